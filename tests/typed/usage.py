"""Calls as the README shows them, type-checked by ``tests/test_typed_usage.py``.

Not a test module (pytest does not collect it): ``mypy --strict`` must accept every
line, so a signature that refuses a documented call (an ``async def`` step returning
``None`` passed to ``atransact``, say) fails the suite.
"""

from __future__ import annotations

from typing import Annotated, Any, assert_type

from pydantic import BaseModel

import sync
from crdt_state import Branch, ConflictError, MergeResult, Retry, SharedState, resolvers
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


# -- the README's "Usage", "Typed state" and "Durable state" -------------------------------


def usage() -> None:
    state = SharedState(
        resolvers={
            "calls": resolvers.counter,
            "tags": resolvers.union,
            "priority": resolvers.maximum,
        }
    )
    with state.fork("summarizer") as branch:
        text = branch.get("ticket.text")
        branch.set("summary", f"summary of {len(text or '')} chars")
        branch.append("log", "summarized")
        branch.set("calls", (branch.get("calls") or 0) + 1)
    router, triager = state.fork("router"), state.fork("triager")
    router.set("intent", "refund")
    triager.set("intent", "replace")
    router.merge()
    try:
        triager.merge()
    except ConflictError as err:
        for c in err.conflicts:
            print(c.path, c.base, c.current, c.incoming, c.same_value)
        triager.merge(resolvers={"intent": "refund"})
    state.transact(lambda b: b.set("owner", "agent-7"), agent="agent-7", default=resolvers.retry)
    state.transact(plain_step, agent="b", resolvers={"n": resolvers.retry})
    snapshot, token = state.read()
    state.commit({"n": snapshot.get("n", 0)}, base=token, agent="c")
    state.apply_update(state.get_update(token))


class Triage(BaseModel):
    sentiment: str | None = None
    calls: Annotated[int, resolvers.counter] = 0
    tags: Annotated[list[str], resolvers.union] = []


def typed() -> Triage:
    state = SharedState(schema=Triage)
    assert_type(state, SharedState[Triage])
    with state.fork("a") as b:
        b.update({"sentiment": "calm"})
        b.update(Triage(calls=2))
        assert_type(b.model(), Triage)
    print(state.json_schema())
    assert_type(state.schema, type[Triage] | None)
    local(state)  # a SharedState[Triage] goes where a SharedState is asked for
    state.transact(triage_step, agent="t")
    state.transact(plain_step, agent="p")  # a step for any branch takes a typed one too
    untyped = SharedState()
    assert_type(untyped, SharedState[BaseModel])
    assert_type(untyped.model(), BaseModel)
    return state.model()  # typed Triage: no isinstance needed


def triage_step(branch: Branch[Triage]) -> int:
    return branch.model().calls


def typed_durable(path: str) -> int:
    state = SharedState.open(path, schema=Triage)
    assert_type(state, SharedState[Triage])
    assert_type(SharedState.open(path), SharedState[BaseModel])
    return state.model().calls


async def typed_remote(url: str) -> int:
    async with sync.connect(url, agent="a", schema=Triage) as shared:
        assert_type(shared.model(), Triage)
        async with shared.fork() as branch:
            assert_type(branch.model(), Triage)
        await shared.atransact(triage_step)
    with sync.connect_blocking(url, agent="b", schema=Triage) as blocking:
        assert_type(blocking.model(), Triage)
        assert_type(blocking.fork().model(), Triage)
        blocking.transact(triage_step)
    async with sync.connect(url, agent="c") as plain:
        assert_type(plain.model(), BaseModel)
    return 0


def durable(path: str) -> None:
    state = SharedState.open(path, durability="normal")
    _, token = state.read()
    print(state.history(agent="a", limit=10), state.at(token))
    print(state.blame("priority"), state.conflicts("priority"))
    state.close()


async def durable_async(path: str) -> MergeResult:
    state = SharedState.open(path)
    async with state.fork("a") as branch:
        branch.set("n", 1)
        return await branch.amerge()


# -- the hub and its clients ---------------------------------------------------------------


async def hub_and_client(secret: str) -> None:
    async with sync.Hub(host="127.0.0.1", port=0, db="hub.db", secret=secret) as hub:
        urls = [hub.url("triage/42"), "ws://127.0.0.1:8766/triage/42"]
        async with sync.connect(urls, agent="a", token="t") as shared:
            print(shared.get("n"), shared.token)
            await shared.acommit({"n": 1}, shared.token)
