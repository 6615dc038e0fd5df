"""SharedChannel in real LangGraph graphs: fan-outs lose nothing, overlaps are reported exactly."""

# no "from __future__ import annotations": the graph schemas below are local classes

import asyncio
import threading
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import InvalidUpdateError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Overwrite, Send

from crdt_state import MISSING, Conflict, ConflictError, SharedState, StateUpdate, resolvers
from crdt_state.langgraph import GraphConflictError, SharedChannel
from sync import connect_blocking


def record(state: SharedState) -> tuple[list[StateUpdate], list[Conflict]]:
    """Every merge applied to ``state`` and every conflict they settled."""
    merges: list[StateUpdate] = []
    conflicts: list[Conflict] = []

    def listener(update: StateUpdate) -> None:
        merges.append(update)
        conflicts.extend(update.conflicts)

    state.subscribe(listener)
    return merges, conflicts


def fanout_graph(state: Any, *, hot_every: int, run: str = "") -> Any:
    """START -> plan -> N x Send(worker) -> END; worker i writes its own item, some also 'priority'.

    ``run`` prefixes the item keys, so two runs of the graph write different items.
    """

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state)]
        workers: int

    def plan(graph: Graph) -> dict[str, Any]:
        return {"shared": {"status": "triage"}}

    async def worker(i: int) -> dict[str, Any]:
        await asyncio.sleep(0.002 + (i % 7) * 0.001)  # a simulated LLM call
        update: dict[str, Any] = {"items": {f"{run}w{i}": {"score": i}}, "log": [i]}
        if i % hot_every == 0:
            update["priority"] = i
        return {"shared": update}

    builder = StateGraph(Graph)
    # langgraph types a node by its parameter named "state" (langgraph#8950)
    builder.add_node("plan", plan)  # type: ignore[call-overload]
    # langgraph types a node input as the graph state, not a Send payload
    builder.add_node("worker", worker)  # type: ignore[call-overload]
    builder.add_edge(START, "plan")
    builder.add_conditional_edges(
        "plan", lambda g: [Send("worker", i) for i in range(g["workers"])], ["worker"]
    )
    builder.add_edge("worker", END)
    return builder.compile()


@pytest.mark.parametrize("workers", [25, 1000])
async def test_send_fanout_loses_nothing_and_reports_every_overlap(workers: int) -> None:
    state = SharedState(resolvers={"priority": resolvers.maximum})
    merges, conflicts = record(state)
    graph = fanout_graph(state, hot_every=10)

    await graph.ainvoke({"workers": workers})

    final = state.snapshot()
    # ground truth, computed from the inputs alone
    hot = [i for i in range(workers) if i % 10 == 0]
    assert final["items"] == {f"w{i}": {"score": i} for i in range(workers)}
    assert sorted(final["log"]) == list(range(workers))
    assert final["priority"] == max(hot)
    # every hot writer after the first conflicts exactly once, naming itself and its value
    assert len(conflicts) == len(hot) - 1
    assert all(c.path == ("priority",) and c.policy == "maximum" for c in conflicts)
    reported = {(c.incoming_agent, c.incoming) for c in conflicts}
    first = {i for i in hot if (f"worker#{i}", i) not in reported}
    assert len(first) == 1 and reported == {(f"worker#{i}", i) for i in hot if i not in first}
    assert all(
        c.current_agent is not None and c.current_agent.startswith("worker#") for c in conflicts
    )
    assert len(merges) == 1 + workers  # plan, then one merge per worker


def test_sends_are_judged_against_the_snapshot_they_were_computed_from() -> None:
    """Another writer merges after the fan-out read the count but before the workers'
    step: their increments must add to it, and its priority must not be overwritten (the
    race the LangGraph example hit about once in six runs: calls == 1, priority == 4)."""
    state = SharedState(resolvers={"calls": resolvers.counter, "priority": resolvers.maximum})
    state.commit({"calls": 0, "priority": 0}, state.token, "setup")

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state)]

    def fan_out(graph: Graph) -> list[Send]:
        calls = graph["shared"]["calls"]  # what every worker starts from
        # meanwhile another graph escalates (deterministically, between read and merge)
        state.commit({"calls": calls + 1, "priority": 5}, state.token, "escalation")
        return [Send("worker", {"i": i, "calls": calls}) for i in range(5)]

    def worker(job: dict[str, Any]) -> dict[str, Any]:
        return {"shared": {"calls": job["calls"] + 1, "priority": job["i"]}}

    builder = StateGraph(Graph)
    builder.add_node("plan", lambda _g: {"shared": {"status": "planned"}})
    # langgraph types a node input as the graph state, not a Send payload
    builder.add_node("worker", worker)  # type: ignore[arg-type]
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["worker"])
    builder.add_edge("worker", END)
    # langgraph types the input as the whole state; a partial one is what it takes at run time
    builder.compile().invoke({})  # type: ignore[call-overload]
    assert state.get("calls") == 6 and state.get("priority") == 5
    assert state.get("status") == "planned"


def parallel_graph(state: Any, writes: dict[str, dict[str, Any]], **channel: Any) -> Any:
    """START -> every node in ``writes`` in parallel (one superstep) -> END."""

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state, **channel)]

    builder = StateGraph(Graph)
    for name, update in writes.items():
        builder.add_node(name, lambda _g, update=update: {"shared": update})
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder.compile()


def test_parallel_nodes_writing_disjoint_paths_all_merge() -> None:
    state = SharedState()
    state.commit({"ticket": {"id": 7}}, state.token, "setup")
    graph = parallel_graph(
        state,
        {
            "sentiment": {"ticket": {"sentiment": "angry"}},
            "router": {"ticket": {"queue": "billing"}, "log": ["routed"]},
            "tagger": {"tags": Overwrite(["refund"]), "log": ["tagged"]},
        },
    )
    out = graph.invoke({})
    expected = {"id": 7, "sentiment": "angry", "queue": "billing"}
    assert state.get("ticket") == expected and out["shared"]["ticket"] == expected
    assert sorted(state.get("log")) == ["routed", "tagged"]
    assert state.get("tags") == ["refund"]


def test_overlapping_writes_raise_a_langgraph_error_carrying_the_conflicts() -> None:
    state = SharedState()
    state.commit({"intent": "unknown", "n": 0}, state.token, "setup")
    graph = parallel_graph(
        state,
        {
            "a": {"intent": "refund", "from_a": 1},
            "b": {"intent": "replace", "from_b": 1},
        },
    )
    with pytest.raises(GraphConflictError) as info:
        graph.invoke({})
    error = info.value
    assert isinstance(error, InvalidUpdateError) and isinstance(error, ConflictError)
    assert error.code == "conflict" and error.nodes == ("b",)  # tasks merge in LangGraph's order
    [conflict] = error.conflicts
    assert conflict.path == ("intent",) and not conflict.resolved
    assert (conflict.base, conflict.current, conflict.incoming) == ("unknown", "refund", "replace")
    assert (conflict.current_agent, conflict.incoming_agent) == ("a", "b")
    # the other writes of the step merged; the refused writer's whole update did not
    assert state.snapshot() == {"intent": "refund", "n": 0, "from_a": 1}


def test_channel_policies_settle_overlaps() -> None:
    state = SharedState()
    state.commit({"calls": 3}, state.token, "setup")
    graph = parallel_graph(
        state,
        {f"n{i}": {"calls": 4} for i in range(5)},  # five nodes each counted one call
        resolvers={"calls": resolvers.counter},
    )
    graph.invoke({})
    assert state.get("calls") == 8


def test_equal_writes_go_to_the_policy() -> None:
    state = SharedState()
    seen: list[Conflict] = []

    def accept_equal(conflict: Conflict) -> Any:
        seen.append(conflict)
        if conflict.incoming != conflict.current:
            return resolvers.raise_conflict(conflict)
        return conflict.current

    graph = parallel_graph(
        state,
        {"a": {"status": "open", "a": 1}, "b": {"status": "open", "b": 1}},
        resolvers={"status": accept_equal},
    )
    graph.invoke({})
    assert state.snapshot() == {"status": "open", "a": 1, "b": 1}
    [conflict] = seen
    assert conflict.same_value is True
    assert (conflict.current_agent, conflict.incoming_agent) == ("a", "b")


def test_deletes_and_bad_updates() -> None:
    state = SharedState()
    state.commit({"draft": "x", "keep": 1}, state.token, "setup")
    graph = parallel_graph(state, {"cleaner": {"draft": MISSING}})
    graph.invoke({})
    assert state.snapshot() == {"keep": 1}
    bad = parallel_graph(state, {"oops": {"keep": {1, 2}}})
    with pytest.raises(TypeError) as info:
        bad.invoke({})
    assert getattr(info.value, "code", None) == "unsupported_value"
    assert state.snapshot() == {"keep": 1}


def test_conditional_edges_see_the_nodes_own_writes_without_merging_twice() -> None:
    state = SharedState()
    merges, _ = record(state)

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state)]

    routes: list[Any] = []

    def route(graph: Graph) -> str:
        routes.append(graph["shared"].get("verdict"))
        return END

    builder = StateGraph(Graph)
    builder.add_node("judge", lambda g: {"shared": {"verdict": "spam"}})
    builder.add_edge(START, "judge")
    builder.add_conditional_edges("judge", route)
    # langgraph types the input as the whole state; a partial one is what it takes at run time
    builder.compile().invoke({})  # type: ignore[call-overload]
    assert routes == ["spam"]
    assert len(merges) == 1 and state.get("verdict") == "spam"


def step_graph(state: SharedState, seen: list[dict[str, Any]]) -> Any:
    """START -> a -> b -> END; each node records the snapshot it read."""

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state)]

    def a(graph: Graph) -> dict[str, Any]:
        seen.append(dict(graph["shared"]))
        return {"shared": {"runs": ["a"]}}  # appends: a replay adds one more, never conflicts

    def b(graph: Graph) -> dict[str, Any]:
        seen.append(dict(graph["shared"]))
        return {"shared": {"b": "done", "note": "from b"}}

    builder = StateGraph(Graph)
    # langgraph types a node by its parameter named "state" (langgraph#8950)
    builder.add_node("a", a)  # type: ignore[arg-type]
    builder.add_node("b", b)  # type: ignore[arg-type]
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=InMemorySaver(), interrupt_before=["b"])


def test_checkpoints_resume_and_time_travel_give_the_values_the_run_saw() -> None:
    state = SharedState()
    state.commit({"note": "initial"}, state.token, "setup")
    seen: list[dict[str, Any]] = []
    graph = step_graph(state, seen)
    config: Any = {"configurable": {"thread_id": "t1"}}
    graph.invoke({}, config)  # runs a, stops before b
    paused = graph.get_state(config)
    assert paused.values["shared"] == {"note": "initial", "runs": ["a"]}

    # meanwhile another agent changes a path b will write
    state.commit({"note": "edited elsewhere"}, state.token, "other")
    assert graph.get_state(config).values["shared"] == paused.values["shared"]

    # resuming: b reads what the run saw, and its overlapping write is a conflict, not a loss
    with pytest.raises(GraphConflictError) as info:
        graph.invoke(None, config)
    assert seen[-1] == {"note": "initial", "runs": ["a"]}
    [conflict] = info.value.conflicts
    assert conflict.path == ("note",) and conflict.current == "edited elsewhere"
    assert (conflict.current_agent, conflict.incoming_agent) == ("other", "b")
    assert state.get("note") == "edited elsewhere" and "b" not in state.snapshot()

    # time travel: every checkpoint still shows the values of its step
    # (the input checkpoint, step -1, is taken before any step: it holds no value of its own)
    history = [h for h in graph.get_state_history(config) if h.metadata["step"] >= 0]
    shown = {h.metadata["step"]: h.values["shared"] for h in history}
    assert shown == {0: {"note": "initial"}, 1: {"note": "initial", "runs": ["a"]}}
    assert [h.next for h in history] == [("b",), ("a",)]

    # replaying from the checkpoint before a: a reads the old values again
    seen.clear()
    before_a = next(h.config for h in history if h.metadata["step"] == 0)
    graph.invoke(None, before_a)
    assert seen == [{"note": "initial"}]
    assert state.get("runs") == ["a", "a"]

    # a fresh thread after the conflict reads the state as it is now
    seen.clear()
    fresh: Any = {"configurable": {"thread_id": "t2"}}
    graph.invoke({}, fresh)
    assert seen[0]["note"] == "edited elsewhere"


def test_resuming_after_a_refused_step_does_not_merge_twice() -> None:
    state = SharedState()
    merges, _ = record(state)

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state)]

    builder = StateGraph(Graph)
    builder.add_node("x", lambda g: {"shared": {"hot": "x", "x": 1}})
    builder.add_node("y", lambda g: {"shared": {"hot": "y", "y": 1}})
    for name in ("x", "y"):
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "r"}}
    with pytest.raises(GraphConflictError):
        # langgraph types the input as the whole state; a partial one is what it takes at run time
        graph.invoke({}, config)  # type: ignore[call-overload]
    assert len(merges) == 1 and state.snapshot() == {"hot": "x", "x": 1}
    with pytest.raises(GraphConflictError):  # the same step again: x is not merged a second time
        graph.invoke(None, config)
    assert len(merges) == 1


def test_graph_runs_in_two_threads_share_one_state() -> None:
    policies = {"priority": resolvers.maximum, "status": resolvers.last_writer_wins}
    state = SharedState(resolvers=policies)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            graph = fanout_graph(state, hot_every=5, run=name)
            barrier.wait()
            asyncio.run(graph.ainvoke({"workers": 40}))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("r1-", "r2-")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    expected = {f"{r}w{i}": {"score": i} for r in ("r1-", "r2-") for i in range(40)}
    assert state.get("items") == expected
    assert len(state.get("log")) == 80 and state.get("priority") == 35


def test_graphs_bound_to_a_hub_room_merge_the_same_way(hub_url: str) -> None:
    url = f"{hub_url}/graphs"
    policies = {"priority": resolvers.maximum, "status": resolvers.last_writer_wins}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            with connect_blocking(url, agent=name, resolvers=policies) as remote:
                graph = fanout_graph(remote, hot_every=5, run=name)
                asyncio.run(graph.ainvoke({"workers": 15}))
                remote.wait_idle()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"proc{k}-",)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    with connect_blocking(url, agent="reader") as reader:
        final = reader.snapshot()
    assert final["items"] == {f"proc{k}-w{i}": {"score": i} for k in range(2) for i in range(15)}
    assert sorted(final["log"]) == sorted(list(range(15)) * 2)
    assert final["priority"] == 10 and final["status"] == "triage"


def test_a_bad_writer_in_a_fanout_stops_no_other_and_the_error_tells_the_whole_step() -> None:
    state = SharedState()

    class Graph(TypedDict):
        shared: Annotated[dict[str, Any], SharedChannel(state)]

    def worker(i: int) -> dict[str, Any]:
        if i == 3:
            return {"shared": {"bad": {1, 2}}}  # not JSON data
        if i == 6:
            return {"shared": None}  # not a dict of updates at all
        return {"shared": {"items": {f"w{i}": i}}}

    builder = StateGraph(Graph)
    # langgraph types a node input as the graph state, not a Send payload
    builder.add_node("worker", worker)  # type: ignore[arg-type]
    builder.add_conditional_edges(START, lambda g: [Send("worker", i) for i in range(10)])
    builder.add_edge("worker", END)
    graph: Any = builder.compile()
    with pytest.raises(TypeError) as info:
        graph.invoke({})
    error = info.value
    assert getattr(error, "code", None) == "unsupported_value"
    details = getattr(error, "details", {})
    assert details["node"] == "worker#3"
    assert details["failed"] == [
        {"node": "worker#3", "code": "unsupported_value"},
        {"node": "worker#6", "code": "wrong_type"},
    ]
    assert details["refused"] == [] and len(details["merged"]) == 8
    # every other writer landed, before and after the bad ones
    assert state.get("items") == {f"w{i}": i for i in range(10) if i not in (3, 6)}


async def test_a_graph_bound_to_an_unreachable_hub_is_told_its_write_did_not_land(
    tmp_path: Any,
) -> None:
    from hubs import FAST, RestartableHub, eventually

    from crdt_state.langgraph import MergeNotConfirmed

    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    remote: Any = await asyncio.to_thread(
        lambda: connect_blocking(
            hub.url("room"), agent="graph", local=tmp_path / "g.db", reconnect=FAST
        )
    )
    try:
        await asyncio.to_thread(parallel_graph(remote, {"owner": {"owner": "graph"}}).invoke, {})
        assert remote.get("owner") == "graph"
        await hub.stop()
        await eventually(lambda: not remote.connected)
        with pytest.raises(MergeNotConfirmed) as info:
            await asyncio.to_thread(parallel_graph(remote, {"owner": {"owner": "x"}}).invoke, {})
        assert info.value.code == "merge_not_confirmed"
        assert info.value.details["queued"] is False and info.value.details["node"] == "owner"
        assert remote.pending == 0 and remote.get("owner") == "graph"  # nothing was queued
    finally:
        await asyncio.to_thread(remote.close)


def test_a_write_the_hub_did_not_answer_is_not_taken_as_landed() -> None:
    from crdt_state import MergeResult, VersionVector
    from crdt_state.langgraph import MergeNotConfirmed

    class Dropped:
        """A remote state whose connection dropped after each merge was sent."""

        connected = True
        token = VersionVector()

        def read(self) -> tuple[dict[str, Any], VersionVector]:
            return {}, self.token

        def fork(self, agent: str) -> Any:
            raise AssertionError("a channel does not fork")

        def commit(self, changes: Any, base: VersionVector, agent: str, **_: Any) -> MergeResult:
            return MergeResult(token=base, agent=agent, fast_forward=False, pending=True)

    with pytest.raises(MergeNotConfirmed) as info:
        parallel_graph(Dropped(), {"n": {"x": 1}}).invoke({})
    assert info.value.details == {
        "node": "n",
        "queued": True,
        "failed": [{"node": "n", "code": "merge_not_confirmed"}],
        "refused": [],
        "merged": [],
    }
