"""branch_node: nodes that edit a branch, merged on return, re-run alone on a retry conflict."""

# no "from __future__ import annotations": the graph schemas below are local classes

import asyncio
import threading
from collections import Counter
from typing import Any, TypedDict

import pytest

from crdt_state import Branch, ConflictError, Retry, SharedState, resolvers
from crdt_state.langgraph import branch_node
from sync import connect

FAST = Retry(attempts=5, base_delay=0.001, max_delay=0.005)


class Graph(TypedDict, total=False):
    ticket: str
    notes: list[str]


def parallel(nodes: dict[str, Any]) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(Graph)
    for name, node in nodes.items():
        builder.add_node(name, node)
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder.compile()


def test_retry_reruns_only_the_conflicting_node() -> None:
    state = SharedState(resolvers={"owner": resolvers.retry})
    runs: Counter[str] = Counter()
    both_forked = threading.Barrier(2, timeout=10)

    def claim(name: str) -> Any:
        def step(branch: Branch, graph: Graph) -> dict[str, Any]:
            runs[name] += 1
            if runs[name] == 1:
                both_forked.wait()  # both branches forked at the same base before either merges
            branch.set("owner", name)
            branch.append("claims", name)
            return {}

        step.__name__ = name
        return branch_node(step, state=state, retry=FAST)

    def summarize(branch: Branch, graph: Graph) -> dict[str, Any]:
        runs["summarize"] += 1
        branch.set("summary", f"ticket {graph['ticket']}")
        return {"notes": ["summarized"]}

    graph = parallel(
        {
            "alice": claim("alice"),
            "bob": claim("bob"),
            "summarize": branch_node(summarize, state=state),
        }
    )
    out = graph.invoke({"ticket": "T-1"})
    assert out["notes"] == ["summarized"]
    assert runs["summarize"] == 1
    assert sorted([runs["alice"], runs["bob"]]) == [1, 2]
    rerun = "alice" if runs["alice"] == 2 else "bob"
    assert state.get("owner") == rerun  # the re-run saw the first claim and wrote after it
    assert sorted(state.get("claims")) == ["alice", "bob"]
    assert state.get("summary") == "ticket T-1"


def test_unresolved_conflict_raises_and_discards_the_branch() -> None:
    state = SharedState()
    both_forked = threading.Barrier(2, timeout=10)
    gate = threading.Barrier(2, timeout=10)

    def router(branch: Branch, graph: Graph) -> None:
        both_forked.wait()
        branch.set("intent", "refund")

    def triager(branch: Branch, graph: Graph) -> None:
        both_forked.wait()
        branch.set("intent", "replace")
        gate.wait()

    def router_merged(graph: Graph) -> Any:
        result = branch_node(router, state=state)(graph)
        gate.wait()  # the triager merges only after the router's merge is in
        return result

    graph = parallel({"router": router_merged, "triager": branch_node(triager, state=state)})
    with pytest.raises(ConflictError) as info:
        graph.invoke({})
    [conflict] = info.value.conflicts
    assert (conflict.current_agent, conflict.incoming_agent) == ("router", "triager")
    assert state.snapshot() == {"intent": "refund"}


async def test_async_nodes_merge_with_amerge() -> None:
    state = SharedState(resolvers={"calls": resolvers.counter})

    async def count(branch: Branch, graph: Graph) -> None:
        await asyncio.sleep(0.01)
        branch.set("calls", (branch.get("calls") or 0) + 1)
        branch.append("log", "called")

    graph = parallel({f"n{i}": branch_node(count, state=state, agent=f"n{i}") for i in range(6)})
    await graph.ainvoke({})
    assert state.get("calls") == 6 and state.get("log") == ["called"] * 6


async def test_async_nodes_on_a_remote_state(hub_url: str) -> None:
    url = f"{hub_url}/nodes"
    async with connect(url, agent="graph", resolvers={"owner": resolvers.retry}) as remote:
        runs: Counter[str] = Counter()

        def claim(name: str) -> Any:
            async def step(branch: Branch, graph: Graph) -> None:
                runs[name] += 1
                await asyncio.sleep(0.02 if runs[name] == 1 else 0)
                branch.set("owner", name)
                branch.set(("done", name), True)

            return branch_node(step, state=remote, agent=name, retry=FAST)

        graph = parallel({"a": claim("a"), "b": claim("b")})
        await graph.ainvoke({})
        assert remote.get("done") == {"a": True, "b": True}
        assert sorted(runs.values()) == [1, 2]
        assert remote.get("owner") == max(runs, key=lambda n: runs[n])


def test_sync_node_on_an_asyncio_remote_state_is_refused_clearly() -> None:
    class AsyncOnly:
        token = None

        def read(self) -> Any:
            return {}, None

        def fork(self, agent: str) -> Any:
            raise AssertionError("not reached")

        async def acommit(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("not reached")

    node = branch_node(lambda b, g: None, state=AsyncOnly())
    with pytest.raises(TypeError, match="connect_blocking"):
        node({})
