"""CrdtStore: LangGraph's store semantics, and get -> put from two runs as a conflict."""

# no "from __future__ import annotations": the graph schemas below are local classes

import asyncio
import threading
import time
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError
from langgraph.store.memory import InMemoryStore

from crdt_state import ConflictError, SharedState
from crdt_state.langgraph import CrdtStore
from sync import connect_blocking

NAMESPACES = [("users", "alice"), ("users", "bob"), ("docs",), ("users", "alice", "prefs")]
KEYS = ["k1", "k2", "k.3"]
VALUES = st.fixed_dictionaries(
    {"kind": st.sampled_from(["note", "task"]), "n": st.integers(0, 5)},
    optional={"tags": st.lists(st.sampled_from(["a", "b"]), max_size=2)},
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS), VALUES),
        st.tuples(st.just("delete"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS)),
    ),
    max_size=25,
)
FILTERS = [None, {"kind": "note"}, {"n": {"$gte": 3}}, {"n": {"$ne": 2}, "kind": "task"}]


def items(found: list[Any]) -> set[tuple[Any, ...]]:
    return {(i.namespace, i.key, repr(sorted(i.value.items()))) for i in found}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_behaves_like_langgraphs_in_memory_store(ops: list[tuple[Any, ...]]) -> None:
    ours, theirs = CrdtStore(SharedState()), InMemoryStore()
    for op in ops:
        for store in (ours, theirs):
            if op[0] == "put":
                store.put(op[1], op[2], op[3])
            else:
                store.delete(op[1], op[2])
    for namespace in NAMESPACES:
        for key in KEYS:
            a, b = ours.get(namespace, key), theirs.get(namespace, key)
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert (a.namespace, a.key, a.value) == (b.namespace, b.key, b.value)
    for prefix in [(), ("users",), ("users", "alice"), ("docs",)]:
        for condition in FILTERS:
            got = ours.search(prefix, filter=condition, limit=100)
            want = theirs.search(prefix, filter=condition, limit=100)
            assert items(got) == items(want)
            assert all(i.score is None for i in got)
    # namespaces that hold items (the in-memory store also lists emptied ones)
    holding = sorted({i.namespace for i in theirs.search((), limit=1000)})
    assert ours.list_namespaces(limit=1000) == holding
    assert ours.list_namespaces(prefix=("users",), max_depth=2) == sorted(
        {ns[:2] for ns in holding if ns[0] == "users"}
    )
    assert ours.list_namespaces(suffix=("*", "alice")) == [
        ns for ns in holding if len(ns) >= 2 and ns[-1] == "alice"
    ]


def test_items_pagination_timestamps_and_validation() -> None:
    store = CrdtStore(SharedState(), namespace_root="memory")
    store.put(("u",), "a", {"text": "first"})
    created = store.get(("u",), "a")
    assert created is not None and created.created_at == created.updated_at
    time.sleep(0.002)
    store.put(("u",), "a", {"text": "second"})
    store.put(("u",), "b", {"text": "other"})
    updated = store.get(("u",), "a")
    assert updated is not None and updated.value == {"text": "second"}
    assert updated.created_at == created.created_at < updated.updated_at
    assert [i.key for i in store.search(("u",))] == ["b", "a"]  # newest update first
    assert [i.key for i in store.search(("u",), limit=1, offset=1)] == ["a"]
    assert store.state.get("memory") == {
        "u": {
            "a": {
                "value": {"text": "second"},
                "created_at": created.created_at.isoformat(),
                "updated_at": updated.updated_at.isoformat(),
            },
            "b": store.state.get(("memory", "u", "b")),
        }
    }
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {})
    with pytest.raises(NotImplementedError):
        store.put(("u",), "c", {"x": 1}, ttl=5)
    with pytest.raises(TypeError) as info:
        store.put(("u",), "c", {"x": {1, 2}})
    assert getattr(info.value, "code", None) == "unsupported_value"
    with pytest.raises(TypeError) as info:  # a raw ValueError from dict() before
        store.put(("u",), "c", "not a dict")  # type: ignore[arg-type]
    assert getattr(info.value, "code", None) == "wrong_type"
    assert store.get(("u",), "c") is None


def test_a_batch_is_one_merge_with_reads_before_writes() -> None:
    from langgraph.store.base import GetOp, PutOp

    state = SharedState()
    merges: list[Any] = []
    state.subscribe(merges.append)
    store = CrdtStore(state)
    results = store.batch(
        [
            PutOp(("n",), "a", {"v": 1}),
            GetOp(("n",), "a"),
            PutOp(("n",), "b", {"v": 2}),
            PutOp(("n",), "a", {"v": 3}),
        ]
    )
    assert results[1] is None  # reads see the state before the batch
    assert len(merges) == 1
    found = store.get(("n",), "a")
    assert found is not None and found.value == {"v": 3}


def remember_graph(store: BaseStore, think: threading.Barrier | None) -> Any:
    """A graph whose node does get -> (slow LLM) -> put on one memory item."""

    class Graph(TypedDict):
        fact: str

    def remember(graph: Graph, *, store: BaseStore) -> dict[str, Any]:
        item = store.get(("memories", "user-1"), "profile")
        facts = list(item.value["facts"]) if item is not None else []
        if think is not None:
            think.wait()  # both runs read before either writes
        store.put(("memories", "user-1"), "profile", {"facts": [*facts, graph["fact"]]})
        return {}

    builder = StateGraph(Graph)
    # langgraph types a node by its parameter named "state" (langgraph#8950)
    builder.add_node("remember", remember)  # type: ignore[call-overload]
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile(store=store)


def test_get_then_put_from_two_runs_is_a_conflict_not_an_overwrite() -> None:
    state = SharedState()
    store = CrdtStore(state)
    store.put(("memories", "user-1"), "profile", {"facts": ["likes tea"]})
    graph = remember_graph(store, threading.Barrier(2, timeout=10))
    outcomes: dict[str, BaseException | None] = {}

    def run(fact: str) -> None:
        try:
            graph.invoke({"fact": fact})
            outcomes[fact] = None
        except BaseException as exc:  # collected below
            outcomes[fact] = exc

    threads = [threading.Thread(target=run, args=(f,)) for f in ("vegan", "lives in Oslo")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    failed = [exc for exc in outcomes.values() if exc is not None]
    assert len(failed) == 1 and isinstance(failed[0], ConflictError)
    [conflict] = failed[0].conflicts
    assert conflict.path == ("store", "memories.user-1", "profile")
    assert conflict.current["value"]["facts"][0] == "likes tea"
    winner = next(fact for fact, exc in outcomes.items() if exc is None)
    item = store.get(("memories", "user-1"), "profile")
    assert item is not None and item.value == {"facts": ["likes tea", winner]}


def test_a_policy_can_settle_the_get_put_race() -> None:
    def merge_facts(conflict: Any) -> Any:
        mine, theirs = conflict.incoming, conflict.current
        facts = theirs["value"]["facts"] + [
            f for f in mine["value"]["facts"] if f not in theirs["value"]["facts"]
        ]
        return {**mine, "value": {"facts": facts}}

    state = SharedState(resolvers={"store.*.*": merge_facts})
    store = CrdtStore(state)
    store.put(("memories", "user-1"), "profile", {"facts": ["likes tea"]})
    graph = remember_graph(store, threading.Barrier(2, timeout=10))
    threads = [
        threading.Thread(target=graph.invoke, args=({"fact": f},)) for f in ("vegan", "runs")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    item = store.get(("memories", "user-1"), "profile")
    assert item is not None and sorted(item.value["facts"]) == ["likes tea", "runs", "vegan"]


def test_sequential_runs_and_put_after_put_do_not_conflict() -> None:
    store = CrdtStore(SharedState())
    graph = remember_graph(store, None)
    for fact in ("a", "b", "c"):
        graph.invoke({"fact": fact})
    item = store.get(("memories", "user-1"), "profile")
    assert item is not None and item.value == {"facts": ["a", "b", "c"]}
    # outside a graph: get, put, put again from one thread
    store.get(("x",), "k")
    store.put(("x",), "k", {"v": 1})
    store.put(("x",), "k", {"v": 2})
    again = store.get(("x",), "k")
    assert again is not None and again.value == {"v": 2}


async def test_async_api() -> None:
    store = CrdtStore(SharedState())
    await store.aput(("a",), "k", {"v": 1})
    await asyncio.gather(*(store.aput(("a",), f"k{i}", {"v": i}) for i in range(10)))
    found = await store.asearch(("a",), filter={"v": {"$lt": 5}}, limit=100)
    assert {i.key for i in found} == {"k", "k0", "k1", "k2", "k3", "k4"}
    await store.adelete(("a",), "k")
    assert await store.aget(("a",), "k") is None
    assert await store.alist_namespaces() == [("a",)]


def test_memory_shared_across_processes_through_a_hub(hub_url: str) -> None:
    url = f"{hub_url}/memory"
    with (
        connect_blocking(url, agent="p1") as one,
        connect_blocking(url, agent="p2") as two,
    ):
        first, second = CrdtStore(one), CrdtStore(two)
        first.put(("team",), "plan", {"step": 1})
        two.wait_idle()
        deadline = time.monotonic() + 5
        while second.get(("team",), "plan") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = second.get(("team",), "plan")  # p2 reads ...
        assert seen is not None and seen.value == {"step": 1}
        first.get(("team",), "plan")
        first.put(("team",), "plan", {"step": 2})  # ... p1 writes meanwhile ...
        with pytest.raises(ConflictError):
            second.put(("team",), "plan", {"step": 99})  # ... so p2's write is refused
        assert first.get(("team",), "plan").value == {"step": 2}  # type: ignore[union-attr]


def test_store_binding_needs_a_state() -> None:
    with pytest.raises(TypeError, match="SharedState"):
        CrdtStore(object())
