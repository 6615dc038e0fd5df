"""Property: a conflict is reported exactly when write sets overlap, whatever the values.

Pairs and triples of branches fork from one state (some after others merged),
set random, often equal, values at random overlapping paths, and merge (or
commit from their fork token) in a random order under last-writer-wins. The
expected conflicts are computed here from the write sets alone: a branch path
conflicts when a merge after its fork wrote an overlapping path (equal, or
one a prefix of the other). ``same_value`` must say whether the branch wrote
exactly the state's value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crdt_state import Branch, ConflictError, SharedState, WrongType, resolvers

PATHS: list[tuple[str, ...]] = [("a",), ("a", "x"), ("a", "y"), ("b",), ("b", "x"), ("c",)]
ABSENT: Any = object()
VALUES = st.one_of(
    st.sampled_from([0, 1, 1, 1, True, "s"]),  # mostly the same few values
    st.fixed_dictionaries({}, optional={"x": st.sampled_from([0, 1]), "y": st.just(1)}),
)


def canon(value: Any) -> str:
    return "<absent>" if value is ABSENT else json.dumps(value, sort_keys=True)


def get(root: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(root, dict) or key not in root:
            return ABSENT
        root = root[key]
    return root


def put(root: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(root.get(key), dict):
            root[key] = {}
        root = root[key]
    root[path[-1]] = json.loads(json.dumps(value))


def blocked(root: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = root
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
        if not isinstance(node, dict):
            return True
    return False


def overlap(p: tuple[str, ...], q: tuple[str, ...]) -> bool:
    n = min(len(p), len(q))
    return p[:n] == q[:n]


@dataclass
class Agent:
    branch: Branch
    since: int  # merges done before the fork
    view: dict[str, Any]
    paths: list[tuple[str, ...]] = field(default_factory=list)  # set, in order

    def write_set(self) -> list[tuple[str, ...]]:
        """The root-most paths set (a later ancestor write covers earlier child writes)."""
        out: list[tuple[str, ...]] = []
        for path in self.paths:
            if any(overlap(path, q) and len(q) < len(path) for q in out):
                continue
            out = [q for q in out if not (overlap(path, q) and len(q) > len(path))]
            if path not in out:
                out.append(path)
        return out


def run(data: st.DataObject) -> None:
    state = SharedState(default=resolvers.last_writer_wins)
    model: dict[str, Any] = {}
    starts: list[dict[str, Any]] = [{}, {"a": {"x": 1}}, {"a": 1, "b": {"x": 1}}]
    initial = data.draw(st.sampled_from(starts))
    if initial:
        state.commit(dict(initial), state.token, "init")
        model = json.loads(json.dumps(initial))
    written: list[list[tuple[str, ...]]] = []  # per merge: paths it wrote
    agents: list[Agent] = []
    count = data.draw(st.integers(2, 3), label="agents")
    pending = list(range(count))
    while pending or agents:
        if pending and (not agents or data.draw(st.booleans(), label="fork now")):
            i = pending.pop()
            branch = state.fork(f"agent{i}")
            agent = Agent(branch, len(written), json.loads(json.dumps(model)))
            for _ in range(data.draw(st.integers(1, 3), label="writes")):
                path = data.draw(st.sampled_from(PATHS), label="path")
                value = data.draw(VALUES, label="value")
                if blocked(agent.view, path):
                    with pytest.raises(WrongType):
                        branch.set(path, value)
                    continue
                branch.set(path, value)
                put(agent.view, path, value)
                agent.paths.append(path)
            agents.append(agent)
            continue
        agent = agents.pop(data.draw(st.integers(0, len(agents) - 1), label="which"))
        merge(state, agent, model, written, data.draw(st.booleans(), label="via commit"))
    assert canon(state.snapshot()) == canon(model)


def merge(
    state: SharedState,
    agent: Agent,
    model: dict[str, Any],
    written: list[list[tuple[str, ...]]],
    via_commit: bool,
) -> None:
    others = [q for paths in written[agent.since :] for q in paths]
    mine = agent.write_set()
    expected = {p for p in mine if any(overlap(p, q) for q in others)}
    same = {p: canon(get(model, p)) == canon(get(agent.view, p)) for p in expected}

    def check(conflicts: tuple[Any, ...]) -> None:
        assert {c.path for c in conflicts} == expected  # no misses, no false alarms
        for c in conflicts:
            assert c.same_value == same[c.path], c

    if expected:  # refused first with the default policy: nothing applied
        before = state.read()
        with pytest.raises(ConflictError) as info:
            if via_commit:
                state.commit(
                    agent.branch.ops(), agent.branch.base, "occ", default=resolvers.raise_conflict
                )
            else:
                agent.branch.merge(default=resolvers.raise_conflict)
        check(info.value.conflicts)
        assert state.read() == before
        event(f"{len(expected)} conflict(s), same value: {sorted(same.values())}")
    else:
        event("no conflict")
    if via_commit:
        result = state.commit(agent.branch.ops(), agent.branch.base, "occ")
        agent.branch.discard()
    else:
        result = agent.branch.merge()
    check(result.conflicts)
    # last writer wins: an equal value writes nothing, anything else is written
    wrote = [p for p in mine if p not in expected or not same[p]]
    assert set(result.applied) == set(wrote)
    for path in wrote:
        put(model, path, get(agent.view, path))
    written.append(wrote)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_conflicts_exactly_when_write_sets_overlap(data: st.DataObject) -> None:
    run(data)
