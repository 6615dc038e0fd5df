"""Policies declared on the model settle concurrent merges as a plain model predicts.

Agents fork at arbitrary moments, edit (increment counters, add tags, offer
scores) and merge in an arbitrary order; the expected result is computed
independently: counters are the sum of every increment, unions hold every tag
once, maxima hold the largest score offered.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from crdt_state import SharedState, resolvers


class Stats(BaseModel):
    hits: int = 0
    best: Annotated[float, resolvers.maximum] = 0.0


class Board(BaseModel):
    calls: Annotated[int, resolvers.counter] = 0
    tags: Annotated[list[str], resolvers.union] = []
    best: Annotated[float, resolvers.maximum] = 0.0
    per_tool: dict[str, Annotated[int, resolvers.counter]] = {}
    stats: Stats = Stats()


TAGS = st.sampled_from(["bug", "ui", "db", "perf", "auth"])
TOOLS = st.sampled_from(["search", "fetch"])
EDITS = st.fixed_dictionaries(
    {
        "calls": st.integers(0, 5),
        "tags": st.lists(TAGS, max_size=3),
        "best": st.floats(0, 100, allow_nan=False),
        "tool": TOOLS,
        "tool_calls": st.integers(1, 3),
    }
)


@st.composite
def schedules(draw: Any) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Edits per agent and an interleaving of fork/merge events (fork before merge)."""
    edits = draw(st.lists(EDITS, min_size=1, max_size=5))
    events = [("fork", i) for i in range(len(edits))] + [("merge", i) for i in range(len(edits))]
    order = draw(st.permutations(events))
    seen: set[int] = set()
    fixed: list[tuple[str, int]] = []
    for kind, i in order:  # a merge drawn before its fork becomes fork-then-merge
        if kind == "fork" and i in seen:
            continue
        if kind == "merge" and i not in seen:
            fixed.append(("fork", i))
        seen.add(i)
        fixed.append((kind, i))
    return edits, fixed


def apply_edit(branch: Any, edit: dict[str, Any]) -> None:
    branch.set("calls", branch.get("calls") + edit["calls"])
    tags = branch.get("tags")
    branch.set("tags", tags + [t for t in dict.fromkeys(edit["tags"]) if t not in tags])
    branch.set("best", max(branch.get("best"), edit["best"]))
    path = ("per_tool", edit["tool"])
    branch.set(path, branch.get(path, 0) + edit["tool_calls"])
    branch.set("stats.best", max(branch.get("stats.best"), edit["best"]))


def expected(edits: list[dict[str, Any]]) -> dict[str, Any]:
    per_tool: dict[str, int] = {}
    for e in edits:
        per_tool[e["tool"]] = per_tool.get(e["tool"], 0) + e["tool_calls"]
    best = max(e["best"] for e in edits)
    return {
        "calls": sum(e["calls"] for e in edits),
        "tags": {t for e in edits for t in e["tags"]},
        "best": best,
        "per_tool": per_tool,
        "stats_best": best,
    }


def check(state: SharedState, edits: list[dict[str, Any]]) -> None:
    model = state.model()
    assert isinstance(model, Board)
    want = expected(edits)
    assert model.calls == want["calls"]
    assert set(model.tags) == want["tags"]
    assert len(model.tags) == len(set(model.tags))
    assert model.best == want["best"]
    assert model.per_tool == want["per_tool"]
    assert model.stats.best == want["stats_best"]


@settings(max_examples=60, deadline=None)
@given(schedule=schedules())
def test_annotated_policies_in_any_interleaving(
    schedule: tuple[list[dict[str, Any]], list[tuple[str, int]]],
) -> None:
    edits, events = schedule
    state = SharedState(schema=Board)
    branches: dict[int, Any] = {}
    for kind, i in events:
        if kind == "fork":
            branches[i] = state.fork(f"agent{i}")
            apply_edit(branches[i], edits[i])
        else:
            branches[i].merge()
    check(state, edits)


def test_annotated_policies_with_threads() -> None:
    edits = [
        {
            "calls": i % 4 + 1,
            "tags": [f"t{i % 7}"],
            "best": float(i * 37 % 101),
            "tool": "search" if i % 2 else "fetch",
            "tool_calls": 1,
        }
        for i in range(16)
    ]
    state = SharedState(schema=Board)
    barrier = threading.Barrier(len(edits))
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        try:
            branch = state.fork(f"agent{i}")
            apply_edit(branch, edits[i])
            barrier.wait(timeout=10)  # every branch forked before anyone merges
            branch.merge()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(len(edits))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    check(state, edits)


def test_annotated_policies_with_asyncio_transact() -> None:
    edits = [
        {"calls": 2, "tags": ["a", f"x{i}"], "best": float(i), "tool": "fetch", "tool_calls": 2}
        for i in range(10)
    ]
    state = SharedState(schema=Board)

    async def main() -> None:
        async def agent(i: int) -> None:
            async def step(branch: Any) -> None:
                await asyncio.sleep(0)  # let every agent fork before anyone merges
                apply_edit(branch, edits[i])

            await state.atransact(step, agent=f"agent{i}")

        await asyncio.gather(*(agent(i) for i in range(len(edits))))

    asyncio.run(main())
    check(state, edits)
