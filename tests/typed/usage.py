"""Calls as the README shows them, type-checked by ``tests/test_typed_usage.py``.

Not a test module (pytest does not collect it): ``mypy --strict`` must accept every
line, so a signature that refuses a documented call (an ``async def`` step returning
``None`` passed to ``atransact``, say) fails the suite.
"""

from __future__ import annotations

from typing import Any

import sync
from crdt_state import Branch, MergeResult, Retry, SharedState, resolvers
from crdt_state.langgraph import branch_node


def plain_step(branch: Branch) -> int:
    branch.set("n", 1)
    return 1


async def async_step(branch: Branch) -> None:
    branch.set("n", 2)


async def untyped_step(branch: Any) -> None:
    branch.set("n", 3)


def local(state: SharedState) -> MergeResult:
    return state.transact(plain_step, agent="a", retry=Retry(attempts=3))


async def local_async(state: SharedState) -> list[MergeResult]:
    return [
        await state.atransact(async_step, agent="a"),
        await state.atransact(untyped_step, agent="b", default=resolvers.retry),
        await state.atransact(plain_step, agent="c"),
    ]


async def remote(url: str) -> MergeResult:
    async with sync.connect(url, agent="a") as shared:
        await shared.atransact(async_step)
        return await shared.atransact(plain_step, agent="b")


def remote_blocking(url: str) -> MergeResult:
    with sync.connect_blocking(url, agent="a") as shared:
        return shared.transact(plain_step)


async def node_step(branch: Branch, graph: dict[str, Any]) -> None:
    branch.set("seen", graph.get("n"))


def node_plain(branch: Branch, graph: dict[str, Any]) -> dict[str, Any]:
    return {"n": 1}


def nodes(state: SharedState) -> list[Any]:
    return [branch_node(node_step, state=state), branch_node(node_plain, state=state)]
