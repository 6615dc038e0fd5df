"""The path index answers exactly like the full scan of the log it replaced.

``ChangeLog.for_merge`` / ``related`` / ``for_reading`` / ``moved`` /
``keys_since`` / ``seq_of`` are checked against a reference written here from
the definitions: every retained entry after the base (a plain list, no
index), those the base token covers left out, the chain filter applied to
all of them. Logs are generated with trimming (small limits), entries that
add no clock, undo records at ancestors, list truncations, foreign tokens
that cover entries out of order, and chains.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt_state import MISSING, Change, SharedState, StaleBase, UnknownBase, VersionVector
from crdt_state._changelog import ChangeLog, Entry, TruncateTo, WriteKind, read_at, unseen_by_chain
from crdt_state.paths import Path
from crdt_state.planner import MergePlan, plan_merge
from crdt_state.requests import ChainKey, RequestKey
from crdt_state.resolvers import PolicyTable

KEYS = ("a", "b", "c")
WRITE_KINDS: list[WriteKind] = ["set", "delete", "append"]
CLIENTS = (1, 2, 3)

paths = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(tuple)
values = st.one_of(
    st.integers(0, 3),
    st.just(MISSING),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(KEYS), st.integers(0, 3), max_size=2),
)


@dataclass
class RawEntry:
    advance: list[int]  # clients whose clock this entry moves (none: an entry that adds no clock)
    writes: dict[Path, WriteKind]
    undo: list[tuple[Path, Any]]
    agent: str
    request: int | None


@st.composite
def raw_entries(draw: st.DrawFn) -> RawEntry:
    writes = draw(st.dictionaries(paths, st.sampled_from(WRITE_KINDS), max_size=3))
    undo: list[tuple[Path, Any]] = []
    for path, kind in writes.items():
        cut = draw(st.integers(1, len(path)))  # undo records may name an ancestor
        record = path[:cut]
        if kind == "append" and cut == len(path) and draw(st.booleans()):
            undo.append((record, TruncateTo(draw(st.integers(0, 2)))))
        else:
            undo.append((record, draw(values)))
    if draw(st.booleans()):  # an undo record for a path the entry did not write
        undo.append((draw(paths), draw(values)))
    return RawEntry(
        advance=draw(st.lists(st.sampled_from(CLIENTS), max_size=2, unique=True)),
        writes=writes,
        undo=draw(st.permutations(undo)),
        agent=draw(st.sampled_from(["x", "y", "z"])),
        request=draw(st.none() | st.integers(0, 9)),
    )


@dataclass
class Built:
    log: ChangeLog
    tokens: list[VersionVector]  # tokens[s] = the head token after seq s


def build(limit: int, raws: list[RawEntry]) -> Built:
    log = ChangeLog(VersionVector(), limit=limit)
    clocks = dict.fromkeys(CLIENTS, 0)
    tokens = [log.head_token]
    used: set[RequestKey] = set()
    for raw in raws:
        for client in raw.advance:
            clocks[client] += 1 + len(tokens) % 3
        key = None if raw.request is None else RequestKey("w", raw.request)
        if key in used:
            key = None  # a request makes one entry
        if key is not None:
            used.add(key)
        log.append(raw.agent, VersionVector(clocks), raw.writes, list(raw.undo), request=key)
        tokens.append(log.head_token)
    return Built(log, tokens)


def retained(log: ChangeLog) -> list[Entry]:
    return list(log.entries())


def reference_seq_of(built: Built, token: VersionVector) -> int:
    """The old ``seq_of``: the log's own tokens by lookup, any other by a scan."""
    log = built.log
    entries = retained(log)
    first = entries[0].seq if entries else log.head_seq + 1
    own = [s for s, t in enumerate(built.tokens) if t == token]
    if own and (own[-1] >= first or (own[-1] == 0 and first <= 1)):
        return own[-1]
    if not token <= log.head_token:
        raise UnknownBase("ahead")
    seq = first - 1
    for entry in entries:
        if not entry.covered_by(token):
            break
        seq = entry.seq
    if seq == first - 1 and first > 1:
        raise StaleBase("old")
    return seq


def reference_unseen(log: ChangeLog, seq: int, token: VersionVector | None) -> list[Entry]:
    """Every retained entry after ``seq`` that ``token`` does not cover (the old since_token)."""
    return [e for e in retained(log) if e.seq > seq and (token is None or not e.covered_by(token))]


def overlapping(entry: Entry, targets: list[Path]) -> bool:
    touched = [*entry.writes, *(p for p, _ in entry.undo)]
    return any(p[: len(t)] == t or t[: len(p)] == p for p in touched for t in targets)


def policy(conflict: Any) -> Any:
    """A policy whose answer shows everything the conflict carries (the base included)."""
    return repr((conflict.base, conflict.current, conflict.incoming, conflict.current_agent))


TABLE = PolicyTable({"a.**": policy})


def plan(
    ops: list[Change], entries: list[Entry], content: dict[str, Any], ff: bool | None
) -> MergePlan | str:
    try:
        return plan_merge(
            ops,
            entries,
            content,
            TABLE,
            agent="me",
            head=VersionVector(),
            base_token=VersionVector,
            fast_forward=ff,
        )
    except Exception as exc:  # WrongType for shapes: the same either way
        return repr(exc)


def same_plan(a: MergePlan | str, b: MergePlan | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (
        a.writes == b.writes
        and a.conflicts == b.conflicts
        and a.fast_forward == b.fast_forward
        and [e.retry for e in a.escalations] == [e.retry for e in b.escalations]
    )


ops_lists = st.lists(
    st.tuples(paths, st.sampled_from(WRITE_KINDS), st.integers(0, 3)),
    max_size=4,
    unique_by=lambda op: op[0],
).map(
    lambda raw: [
        Change(kind, path, [value] if kind == "append" else value if kind == "set" else MISSING)
        for path, kind, value in raw
    ]
)
contents = st.dictionaries(
    st.sampled_from(KEYS),
    st.one_of(
        st.integers(0, 3),
        st.lists(st.integers(0, 3), max_size=3),
        st.dictionaries(
            st.sampled_from(KEYS),
            st.one_of(st.integers(0, 3), st.dictionaries(st.sampled_from(KEYS), st.integers())),
            max_size=3,
        ),
    ),
    max_size=3,
)


@st.composite
def bases(draw: st.DrawFn, built: Built) -> VersionVector:
    """A token the log had, or one from another replica (any clocks up to the head's)."""
    if draw(st.booleans()):
        return draw(st.sampled_from(built.tokens))
    head = built.log.head_token
    return VersionVector({c: draw(st.integers(0, head.get_clock(c))) for c in CLIENTS})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 8),
    st.lists(raw_entries(), max_size=25),
    st.data(),
    ops_lists,
    contents,
)
def test_indexed_lookups_answer_like_the_full_scan(
    limit: int,
    raws: list[RawEntry],
    data: st.DataObject,
    ops: list[Change],
    content: dict[str, Any],
) -> None:
    built = build(limit, raws)
    log = built.log
    token = data.draw(bases(built))
    try:
        expected_seq: int | str = reference_seq_of(built, token)
    except (StaleBase, UnknownBase) as exc:
        expected_seq = type(exc).__name__
    try:
        seq: int | str = log.seq_of(token)
    except (StaleBase, UnknownBase) as exc:
        seq = type(exc).__name__
    assert seq == expected_seq
    if not isinstance(seq, int):
        return
    full = reference_unseen(log, seq, token)
    targets = [op.path for op in ops]

    # every entry that touched an overlapping path, exactly
    assert log.related(seq, targets, token) == [e for e in full if overlapping(e, targets)]

    # the merge plan: the chosen few decide as all of them (the base value included)
    chosen = log.for_merge(seq, {op.path: op.kind == "append" for op in ops}, token)
    assert all(entry in full for entry in chosen)
    assert log.moved(seq, token) == bool(full)
    assert same_plan(
        plan(ops, chosen, content, not log.moved(seq, token)), plan(ops, full, content, None)
    )

    # a branch (no token) at a retained seq: reads and merges
    everything = reference_unseen(log, seq, None)
    for path in targets:
        current = data.draw(values)
        assert read_at(current, path, log.for_reading(seq, path)) == read_at(
            current, path, everything
        )
    chosen = log.for_merge(seq, {op.path: op.kind == "append" for op in ops})
    assert same_plan(
        plan(ops, chosen, content, seq == log.head_seq), plan(ops, everything, content, None)
    )
    expected_keys = {p[0] for e in everything for p in [*e.writes, *(u for u, _ in e.undo)]}
    assert log.keys_since(seq) == expected_keys


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8), st.lists(raw_entries(), max_size=25), st.data(), ops_lists, contents)
def test_chain_judging_on_related_entries_matches_the_full_scan(
    limit: int,
    raws: list[RawEntry],
    data: st.DataObject,
    ops: list[Change],
    content: dict[str, Any],
) -> None:
    built = build(limit, raws)
    log = built.log
    token = data.draw(bases(built))
    try:
        seq = log.seq_of(token)
    except (StaleBase, UnknownBase):
        return
    keys = [e.request for e in retained(log) if e.request is not None]
    keys += [RequestKey("w", 99)]  # a request that made no retained entry
    chain = frozenset(data.draw(st.lists(st.sampled_from(keys), unique=True)))
    full = unseen_by_chain(reference_unseen(log, seq, token), chain)
    made: dict[ChainKey, VersionVector] = {
        e.request: e.token for e in retained(log) if e.request is not None
    }

    def tokens_of(keys: Collection[ChainKey]) -> dict[ChainKey, VersionVector]:
        return {key: made[key] for key in keys if key in made}

    links = log.made_by(seq, chain, tokens_of)
    assert sorted(e.seq for e in links) == [
        e.seq for e in retained(log) if e.seq > seq and e.request in chain
    ]
    targets = [op.path for op in ops]
    narrowed, moved = log.for_chain(seq, targets, token, chain, tokens_of)
    assert moved == bool(full) == log.moved(seq, token, chain, links)
    assert same_plan(plan(ops, narrowed, content, not moved), plan(ops, full, content, None))


def test_trimming_forgets_dropped_entries_and_keeps_memory_bounded() -> None:
    log = ChangeLog(VersionVector(), limit=10)
    for i in range(1, 2_001):
        path = ("hot",) if i % 2 else ("cold", f"k{i}")
        log.append("agent", VersionVector({1: i}), {path: "set"}, [(path, i)])
    index = log._index
    listed = [
        [seqs] if isinstance(seqs, int) else seqs
        for table in (index._at, index._below, index._replaced)
        for seqs in table.values()
    ]
    assert sum(map(len, listed)) <= 3 * 13  # <= 1.25 x limit entries, each under <= 3 keys
    assert all(seqs[0] > log.oldest_base for seqs in listed)
    assert len(index) <= 13
    assert log.for_reading(log.oldest_base, ("hot",))[0].seq > log.oldest_base


def test_a_hot_path_is_judged_on_a_few_entries() -> None:
    """Many merges of one counter since the base: the planner sees three entries, not all."""
    log = ChangeLog(VersionVector(), limit=100_000)
    for i in range(1, 5_001):
        log.append(f"agent{i}", VersionVector({1: i}), {("n",): "set"}, [(("n",), i - 1)])
    chosen = log.for_merge(0, {("n",): False})
    assert [e.seq for e in chosen] == [1, 5_000]
    assert read_at(5_000, ("n",), chosen) == 0
    # an append to a list everyone appended to: no conflict, and only the newest entry
    for i in range(5_001, 6_001):
        log.append("agent", VersionVector({1: i}), {("l",): "append"}, [(("l",), TruncateTo(i))])
    assert [e.seq for e in log.for_merge(5_000, {("l",): True})] == [6_000]


def test_foreign_token_skips_covered_entries_out_of_order() -> None:
    log = ChangeLog(VersionVector())
    log.append("x", VersionVector({1: 1}), {("a",): "set"}, [(("a",), MISSING)])
    log.append("y", VersionVector({1: 1, 2: 1}), {("a",): "set"}, [(("a",), 1)])
    log.append("z", VersionVector({1: 2, 2: 1}), {("a",): "set"}, [(("a",), 2)])
    foreign = VersionVector({1: 1, 2: 0, 3: 0})  # not a token of the log: equal to seq 1's
    assert log.seq_of(foreign) == 1
    saw_third = VersionVector({1: 2})  # covers entries 1 and 3, not 2
    assert log.seq_of(saw_third) == 1
    assert [e.seq for e in log.related(1, [("a",)], saw_third)] == [2]
    assert [e.seq for e in log.for_merge(1, {("a",): False}, saw_third)] == [2]
    with pytest.raises(UnknownBase):
        log.seq_of(VersionVector({4: 1}))


def test_state_merges_match_a_full_scan_state() -> None:
    """Two states with one client id take the same merges; one judges on every entry."""

    class FullScan(ChangeLog):
        def for_merge(
            self,
            base_seq: int,
            targets: Any,
            token: VersionVector | None = None,
        ) -> list[Entry]:
            return [e for e in self.since(base_seq) if token is None or not e.covered_by(token)]

        def for_reading(self, base_seq: int, path: Path) -> list[Entry]:
            return self.since(base_seq)

    indexed = SharedState(client_id=5, history=40, resolvers={"c.**": policy})
    scanned = SharedState(client_id=5, history=40, resolvers={"c.**": policy})
    scanned._core.log = FullScan(VersionVector(), limit=40)
    import random

    rng = random.Random(3)
    forks: list[tuple[Any, Any]] = []
    for step in range(600):
        if not forks or rng.random() < 0.4:
            forks.append((indexed.fork(f"a{step}"), scanned.fork(f"a{step}")))
        i = rng.randrange(len(forks))
        b1, b2 = forks[i]
        path = tuple(rng.choice(KEYS) for _ in range(rng.randint(1, 3)))
        assert b1.get(path) == b2.get(path)
        kind = rng.choice(["set", "set", "delete", "append", "merge", "merge"])
        outcomes: list[tuple[Any, Any, Any] | str | None] = []
        for branch in (b1, b2):
            try:
                if kind == "set":
                    branch.set(path, step)
                elif kind == "delete":
                    branch.delete(path)
                elif kind == "append":
                    branch.append(path, step)
                else:
                    result = branch.merge()
                    outcomes.append((result.applied, result.conflicts, result.fast_forward))
                    continue
                outcomes.append(None)
            except Exception as exc:
                outcomes.append(repr(exc))
        assert outcomes[0] == outcomes[1], (step, kind, path)
        if kind == "merge" or isinstance(outcomes[0], str):
            forks.pop(i)
        assert indexed.snapshot() == scanned.snapshot()
    assert indexed.token == scanned.token


def test_keys_since_from_the_index_and_from_the_entries_agree() -> None:
    log = ChangeLog(VersionVector(), limit=1_000)
    for i in range(1, 301):  # many entries, few paths: keys_since reads the index
        path = ("a", "x") if i % 3 else (f"k{i % 7}",)
        log.append("agent", VersionVector({1: i}), {path: "set"}, [(path[:1], i)])
    for base in (0, 1, 150, 290, 299, 300):
        expected = {p[0] for e in log.since(base) for p in e.writes}
        assert log.keys_since(base) == expected, base


def test_seq_of_scans_when_tokens_do_not_grow() -> None:
    """A log fed a token that went back (never from a real document) is still exact:
    bisecting it would skip the uncovered first entry."""
    log = ChangeLog(VersionVector())
    log.append("x", VersionVector({1: 5}), {("a",): "set"}, [(("a",), 0)])
    log.append("x", VersionVector({1: 2, 2: 1}), {("b",): "set"}, [(("b",), 0)])
    log.append("x", VersionVector({1: 6, 2: 1, 3: 1}), {("c",): "set"}, [(("c",), 0)])
    foreign = VersionVector({1: 3, 2: 1})
    assert log.seq_of(foreign) == 0  # the first entry is not covered
    assert [e.seq for e in log.related(0, [("a",), ("b",)], foreign)] == [1]
