"""Property: no lost update, across every kind of writer of one room.

A hypothesis state machine drives, on one room of a real durable hub on
loopback:

- in-process agents on the hub's own :class:`SharedState` (``atransact`` with
  ``resolvers.retry``, and branches forked in one step and merged in a later
  one, possibly after a hub restart),
- remote agents (:class:`sync.client.remote.RemoteState` with a ``local`` SQLite file
  and the ``counter`` policy) writing online, offline while the hub is stopped,
  and reconnecting when it starts again on the same port and files,
- plain Yjs writers (a pycrdt ``Doc`` replica) writing their own key and
  sending the update through ``apply_update``.

Every agent step increments the shared counter ``n`` (read-modify-write) or
sets the agent's own key. Ground truth is kept by the test alone: each step
either succeeded or its caller was told (an exception, or an entry in the
remote agent's ``failed``). At the end (hub up, everyone reconnected and
idle): ``n`` equals the number of successful increments, every own key holds
its last successful value, and every replica has the same snapshot as the hub.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hubs import FAST, RestartableHub, eventually
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pycrdt import Doc, Map

from crdt_state import Branch, CrdtStateError, Retry, SharedState, resolvers
from sync.client import RemoteBranch
from sync.client.remote import RemoteState

ROOM = "proof/room"
INPROC = ["p0", "p1"]
REMOTES = ["r0", "r1"]
YJS = ["y0"]
VALUES = st.sampled_from(["red", "green", "blue"])
RETRY = Retry(attempts=4, base_delay=0.001, max_delay=0.005)
COUNTING = {"n": resolvers.counter}
RETRYING = {"n": resolvers.retry}


def bump(branch: Branch | RemoteBranch) -> None:
    branch.set("n", branch.get("n") + 1)


class NoLostUpdate(RuleBasedStateMachine):
    """One room, many writers; the test's own ledger is the ground truth."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        self.hub = RestartableHub(root / "hub.db")
        self.up = True
        self.incs = 0  # successful increments, all writers
        self.told = 0  # steps whose caller was told they failed
        self.last: dict[str, str] = {}  # own key -> last successful value
        self.branches: dict[str, Branch] = {}  # in-process agent -> forked, bumped branch
        self.docs: dict[str, Doc[Any]] = {name: Doc() for name in YJS}
        self.remotes: dict[str, RemoteState] = {}
        self.run(self.hub.start())
        state = self.state()
        self.run(state.atransact(lambda b: b.set("n", 0), agent="seed"))
        for name in REMOTES:
            remote = RemoteState(
                self.hub.url(ROOM),
                agent=name,
                local=root / f"{name}.sqlite",
                reconnect=FAST,
                resolvers=COUNTING,
            )
            self.run(remote.start(timeout=5))
            self.remotes[name] = remote

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def state(self) -> SharedState:
        assert self.hub.hub is not None
        state: SharedState = self.run(self.hub.hub.room(ROOM)).state
        return state

    # -- the hub ---------------------------------------------------------------------
    @precondition(lambda self: self.up)
    @rule()
    def stop_hub(self) -> None:
        self.run(self.hub.stop())
        self.up = False

    @precondition(lambda self: not self.up)
    @rule()
    def start_hub(self) -> None:
        self.run(self.hub.start())
        self.up = True

    @rule()
    def let_network_run(self) -> None:
        self.run(asyncio.sleep(0.02))

    # -- in-process agents ---------------------------------------------------------------
    @precondition(lambda self: self.up)
    @rule(agent=st.sampled_from(INPROC))
    def inproc_increment(self, agent: str) -> None:
        try:
            self.run(self.state().atransact(bump, agent=agent, retry=RETRY, resolvers=RETRYING))
        except CrdtStateError:  # ConflictError, RetryExhausted, ...: told
            self.told += 1
        else:
            self.incs += 1

    @precondition(lambda self: self.up)
    @rule(agent=st.sampled_from(INPROC), value=VALUES)
    def inproc_set(self, agent: str, value: str) -> None:
        try:
            self.run(self.state().atransact(lambda b: b.set(agent, value), agent=agent))
        except CrdtStateError:
            self.told += 1
        else:
            self.last[agent] = value

    @precondition(lambda self: self.up)
    @rule(agent=st.sampled_from(INPROC))
    def inproc_fork(self, agent: str) -> None:
        old = self.branches.pop(agent, None)
        if old is not None:
            old.discard()
        branch = self.state().fork(agent)
        bump(branch)
        self.branches[agent] = branch

    @rule(agent=st.sampled_from(INPROC))
    def inproc_merge(self, agent: str) -> None:
        branch = self.branches.pop(agent, None)
        if branch is None:
            return
        try:
            self.run(branch.amerge(resolvers=RETRYING))
        except CrdtStateError:  # a conflict to retry, a closed state: told
            self.told += 1
            if branch.status == "open":
                branch.discard()
        else:
            self.incs += 1

    # -- remote agents (online or offline) ---------------------------------------------
    @rule(agent=st.sampled_from(REMOTES))
    def remote_increment(self, agent: str) -> None:
        try:
            self.run(self._remote(agent, bump))
        except CrdtStateError:
            self.told += 1
        else:
            self.incs += 1

    @rule(agent=st.sampled_from(REMOTES), value=VALUES)
    def remote_set(self, agent: str, value: str) -> None:
        try:
            self.run(self._remote(agent, lambda b: b.set(agent, value)))
        except CrdtStateError:
            self.told += 1
        else:
            self.last[agent] = value

    async def _remote(self, agent: str, edit: Any) -> None:
        async with asyncio.timeout(10), self.remotes[agent].fork() as branch:
            edit(branch)

    # -- plain Yjs writers -----------------------------------------------------------
    @precondition(lambda self: self.up)
    @rule(writer=st.sampled_from(YJS), value=VALUES)
    def yjs_set(self, writer: str, value: str) -> None:
        state = self.state()
        doc = self.docs[writer]
        doc.apply_update(state.get_update())
        before = doc.get_state()
        doc.get("state", type=Map)[writer] = value
        try:
            state.apply_update(doc.get_update(before))
        except CrdtStateError:
            self.told += 1
        else:
            self.last[writer] = value

    @invariant()
    def remotes_read_their_writes(self) -> None:
        for name, remote in self.remotes.items():
            if name in self.last:
                assert remote.get(name) == self.last[name]

    # -- the end -----------------------------------------------------------------------
    def teardown(self) -> None:
        try:
            self.run(self._settle_and_check())
        finally:
            for remote in self.remotes.values():
                self.run(remote.close())
            self.run(self.hub.stop())
            self.loop.close()
            self.tmp.cleanup()

    async def _settle_and_check(self) -> None:
        if not self.up:
            await self.hub.start()
            self.up = True
        for remote in self.remotes.values():
            await remote.wait_idle(timeout=20)
            # a connect attempt that met the hub as it stopped may wait out the client's
            # 5 s opening-handshake timeout before the next attempt (seen once in CI)
            await eventually(lambda r=remote: r.connected, timeout=15)  # type: ignore[misc]
        failed = [e for r in self.remotes.values() for e in r.failed]
        assert failed == [], f"queued remote merges failed: {failed}"
        assert self.hub.hub is not None
        room = (await self.hub.hub.room(ROOM)).state
        expected = {"n": self.incs, **self.last}
        assert room.snapshot() == expected, f"told {self.told} step(s)"
        for remote in self.remotes.values():
            await eventually(lambda r=remote: r.snapshot() == expected)  # type: ignore[misc]


NoLostUpdate.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # no shrinking: replays of timing-dependent failures take minutes; the minimal
    # case found is the test below
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
test_no_lost_update = NoLostUpdate.TestCase


async def _offline_chain_then_reconnect() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        hub = RestartableHub(Path(tmp) / "hub.db")
        await hub.start()
        assert hub.hub is not None
        await (await hub.hub.room(ROOM)).state.atransact(lambda b: b.set("n", 0), agent="seed")
        remote = RemoteState(
            hub.url(ROOM),
            agent="r0",
            local=Path(tmp) / "r0.sqlite",
            reconnect=FAST,
            resolvers=COUNTING,
        )
        await remote.start(timeout=5)
        try:
            await hub.stop()
            async with remote.fork() as branch:  # queued offline
                bump(branch)
            await hub.start()
            state = (await hub.hub.room(ROOM)).state
            await state.atransact(bump, agent="p0", retry=RETRY, resolvers=RETRYING)
            await eventually(lambda: remote.connected)  # its first merge still pending
            async with remote.fork() as branch:  # builds on its unconfirmed increment
                bump(branch)
            await remote.wait_idle(timeout=20)
            assert remote.failed == []
            return int((await hub.hub.room(ROOM)).state.snapshot()["n"])
        finally:
            await remote.close()
            await hub.stop()


def test_three_increments_across_a_reconnect_count_three() -> None:
    """The minimal case the machine found: a remote agent's offline increment, an
    in-process increment on the restarted hub, then, once the agent has reconnected
    but before its queued merge is confirmed, a second remote increment chained
    on the first: three successful
    increments, none reported, so ``n`` must be 3."""
    assert asyncio.run(_offline_chain_then_reconnect()) == 3
