"""Convergence of SharedState replicas over an unreliable network (hypothesis stateful).

Several replicas, each with its own Yjs client id, fork/edit/merge locally and
exchange standard Yjs updates through an in-memory network that can deliver,
drop, duplicate and reorder messages; a "reconnect" does a full sync between
two replicas. After every step each replica's plain mirror must equal its
document and its token must be the document's state vector. At the end, after
a full sync, every replica has equal content and equal tokens, and a replica
rebuilt from every update ever sent equals them too.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pycrdt import merge_updates

from crdt_state import (
    Branch,
    PathNotFound,
    SharedState,
    StateUpdate,
    VersionVector,
    WrongType,
    resolvers,
)
from crdt_state.document import doc_snapshot

KEYS = ("a", "b", "c")
PATHS = (
    [(k,) for k in KEYS]
    + [(k, j) for k in KEYS for j in KEYS]
    + [(k, j, i) for k in KEYS for j in KEYS for i in KEYS]
)
CLIENT_IDS = (11, 222, 3333)

scalars = st.one_of(st.integers(-3, 3), st.sampled_from(["x", "y"]), st.none(), st.booleans())
values = st.recursive(
    st.one_of(scalars, st.lists(scalars, max_size=3)),
    lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, max_size=2),
    max_leaves=5,
)
replica_ids = st.integers(0, len(CLIENT_IDS) - 1)


def canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class Replicas(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.replicas = [
            SharedState(client_id=cid, default=resolvers.last_writer_wins) for cid in CLIENT_IDS
        ]
        n = len(self.replicas)
        # (dst, update) messages in flight
        self.network: list[tuple[int, bytes]] = []
        self.sent: list[bytes] = []
        # token last sent from src to dst with get_update(since=...)
        self.last_sent: dict[tuple[int, int], VersionVector] = {
            (s, d): VersionVector() for s in range(n) for d in range(n)
        }
        # updates observed via subscribe, not yet forwarded, per (src, dst)
        self.outbox: dict[tuple[int, int], list[bytes]] = {
            (s, d): [] for s in range(n) for d in range(n)
        }
        self.branches: list[tuple[int, Branch]] = []
        self.fork_snapshots: dict[int, dict[str, Any]] = {}  # id(branch) -> state at fork
        for s, replica in enumerate(self.replicas):
            replica.subscribe(self._listener(s))
        self.agents = 0

    def _listener(self, src: int) -> Any:
        def on_update(change: StateUpdate) -> None:
            assert isinstance(change.update, bytes)
            for d in range(len(self.replicas)):
                if d != src:
                    self.outbox[(src, d)].append(change.update)

        return on_update

    def _send(self, dst: int, update: bytes) -> None:
        self.network.append((dst, update))
        self.sent.append(update)

    # -- local work ---------------------------------------------------------------------
    @rule(r=replica_ids)
    def fork(self, r: int) -> None:
        self.agents += 1
        branch = self.replicas[r].fork(f"agent{self.agents}")
        self.fork_snapshots[id(branch)] = self.replicas[r].snapshot()
        self.branches.append((r, branch))

    @precondition(lambda self: self.branches)
    @rule(i=st.integers(0, 100))
    def read_branch(self, i: int) -> None:
        """An unedited branch reads the state as it was at its fork, whatever arrived since."""
        _, branch = self.branches[i % len(self.branches)]
        if branch.changes():
            return
        at_fork = self.fork_snapshots[id(branch)]
        for path in PATHS:
            expected: Any = at_fork
            for key in path:
                if isinstance(expected, dict):
                    expected = expected.get(key, "<absent>")
                else:
                    expected = "<absent>"
            assert canon(branch.get(path, "<absent>")) == canon(expected), path

    @precondition(lambda self: self.branches)
    @rule(
        i=st.integers(0, 100),
        kind=st.sampled_from(["set", "set", "delete", "append"]),
        path=st.sampled_from(PATHS),
        value=values,
    )
    def edit(self, i: int, kind: str, path: tuple[str, ...], value: Any) -> None:
        _, branch = self.branches[i % len(self.branches)]
        try:
            if kind == "set":
                branch.set(path, value)
            elif kind == "delete":
                branch.delete(path)
            else:
                branch.append(path, value)
        except (WrongType, PathNotFound):
            pass

    @precondition(lambda self: self.branches)
    @rule(i=st.integers(0, 100))
    def merge(self, i: int) -> None:
        r, branch = self.branches.pop(i % len(self.branches))
        before = self.replicas[r].token
        result = branch.merge()
        assert result.token == self.replicas[r].token
        assert before <= result.token
        if result.applied:
            assert before < result.token

    @rule(r=replica_ids, path=st.sampled_from(PATHS), value=values)
    def commit(self, r: int, path: tuple[str, ...], value: Any) -> None:
        """One-shot OCC write at the current token."""
        replica = self.replicas[r]
        try:
            replica.commit({path: value}, replica.token, "committer")
        except WrongType:
            pass
        else:
            assert canon(replica.get(path)) == canon(value)

    # -- the network --------------------------------------------------------------------
    @rule(src=replica_ids, dst=replica_ids)
    def send_since(self, src: int, dst: int) -> None:
        if src == dst:
            return
        replica = self.replicas[src]
        token = replica.token
        self._send(dst, replica.get_update(since=self.last_sent[(src, dst)]))
        self.last_sent[(src, dst)] = token

    @rule(src=replica_ids, dst=replica_ids)
    def send_incremental(self, src: int, dst: int) -> None:
        box = self.outbox[(src, dst)]
        if src == dst or not box:
            return
        update = box[0] if len(box) == 1 else bytes(merge_updates(*box))
        box.clear()
        self._send(dst, update)

    @precondition(lambda self: self.network)
    @rule(i=st.integers(0, 100))
    def deliver(self, i: int) -> None:
        dst, update = self.network.pop(i % len(self.network))
        self.replicas[dst].apply_update(update)

    @precondition(lambda self: self.network)
    @rule(i=st.integers(0, 100))
    def drop(self, i: int) -> None:
        self.network.pop(i % len(self.network))

    @precondition(lambda self: self.network)
    @rule(i=st.integers(0, 100))
    def duplicate(self, i: int) -> None:
        self.network.append(self.network[i % len(self.network)])

    @rule(a=replica_ids, b=replica_ids)
    def reconnect(self, a: int, b: int) -> None:
        """Full sync both ways, each side sending what the other's token lacks."""
        if a == b:
            return
        ra, rb = self.replicas[a], self.replicas[b]
        to_b = ra.get_update(since=rb.token)
        to_a = rb.get_update(since=ra.token)
        self.sent += [to_b, to_a]
        rb.apply_update(to_b)
        ra.apply_update(to_a)

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def mirror_equals_document(self) -> None:
        for replica in self.replicas:
            assert canon(doc_snapshot(replica._core.doc)) == canon(replica.snapshot())

    @invariant()
    def token_is_state_vector(self) -> None:
        for replica in self.replicas:
            assert replica.token == VersionVector.from_state(replica._core.doc.get_state())

    @invariant()
    def equal_tokens_equal_content(self) -> None:
        for i, a in enumerate(self.replicas):
            for b in self.replicas[i + 1 :]:
                if a.token == b.token:
                    assert canon(a.snapshot()) == canon(b.snapshot())

    def teardown(self) -> None:
        for _, branch in self.branches:
            branch.merge()
        for _ in range(2):
            for a in self.replicas:
                for b in self.replicas:
                    if a is not b:
                        update = a.get_update(since=b.token)
                        self.sent.append(update)
                        b.apply_update(update)
        first = self.replicas[0]
        for replica in self.replicas[1:]:
            assert replica.token == first.token
            assert canon(replica.snapshot()) == canon(first.snapshot())
        for replica in self.replicas:
            assert canon(doc_snapshot(replica._core.doc)) == canon(replica.snapshot())
        rebuilt = SharedState(client_id=99999)
        for update in self.sent:
            rebuilt.apply_update(update)
        assert rebuilt.token == first.token
        assert canon(rebuilt.snapshot()) == canon(first.snapshot())
        assert canon(doc_snapshot(rebuilt._core.doc)) == canon(rebuilt.snapshot())


Replicas.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestReplicas = Replicas.TestCase
