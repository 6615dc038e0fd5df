"""LangGraph Send fan-outs writing one state: LangGraph's own channels against SharedChannel.

One graph, ``plan -> N x Send(worker) -> END``. Worker ``i`` waits a simulated
LLM call (2-8 ms), then writes its own item ``items.w<i>``, appends ``i`` to
``log``, and every tenth worker also writes the scalar ``priority``. The same
graph runs with three kinds of state key:

- ``plain key``: LangGraph's default (``LastValue``): parallel writes raise
  ``InvalidUpdateError``;
- ``dict reducer``: ``Annotated[dict, operator.or_]``: no error, but a shallow
  merge: later writers silently replace ``items``, ``log`` and ``priority``;
- ``SharedChannel``: every write merged against the step's token; overlaps on
  ``priority`` reported and settled by ``maximum``.

"lost" counts items and log entries missing at the end, plus hot writes whose
value was never seen by any policy (dropped without a report). "reported" is
checked against the ground truth: the hot writers but the first merged.

Run: ``python benchmarks/langgraph_fanout.py``.
"""

# no "from __future__ import annotations": LangGraph reads the schemas at run time

import asyncio
import operator
import random
import time
from typing import Annotated, Any, TypedDict, cast

from langgraph.errors import InvalidUpdateError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from crdt_state import Conflict, SharedState, StateUpdate, resolvers
from crdt_state import langgraph as shared_graph

HOT_EVERY = 10


def build(annotation: Any) -> Any:
    class Graph(TypedDict):
        shared: annotation
        workers: int

    def plan(graph: Graph) -> dict[str, Any]:
        return {"shared": {"status": "triage"}}

    async def worker(i: int) -> dict[str, Any]:
        await asyncio.sleep(random.uniform(0.002, 0.008))
        update: dict[str, Any] = {"items": {f"w{i}": i}, "log": [i]}
        if i % HOT_EVERY == 0:
            update["priority"] = i
        return {"shared": update}

    builder = StateGraph(Graph)
    builder.add_node("plan", cast(Any, plan))
    builder.add_node("worker", cast(Any, worker))  # takes the Send's payload, not the graph
    builder.add_edge(START, "plan")
    builder.add_conditional_edges(
        "plan", lambda g: [Send("worker", i) for i in range(g["workers"])], ["worker"]
    )
    builder.add_edge("worker", END)
    return builder.compile()


def measure(kind: str, workers: int) -> dict[str, Any]:
    hot = [i for i in range(workers) if i % HOT_EVERY == 0]
    merges: list[StateUpdate] = []
    conflicts: list[Conflict] = []
    state = SharedState(resolvers={"priority": resolvers.maximum})
    if kind == "plain key":
        annotation: Any = dict
    elif kind == "dict reducer":
        annotation = Annotated[dict, operator.or_]
    else:
        annotation = Annotated[dict, shared_graph.SharedChannel(state)]

        def listener(update: StateUpdate) -> None:
            merges.append(update)
            conflicts.extend(update.conflicts)

        state.subscribe(listener)
    graph = build(annotation)
    start = time.perf_counter()
    try:
        out = asyncio.run(graph.ainvoke({"workers": workers, "shared": {}}))
    except InvalidUpdateError:
        return {"error": "InvalidUpdateError", "time": time.perf_counter() - start}
    elapsed = time.perf_counter() - start
    final = state.snapshot() if kind == "SharedChannel" else out["shared"]
    items = final.get("items", {})
    log = final.get("log", [])
    lost_items = sum(1 for i in range(workers) if items.get(f"w{i}") != i)
    lost_log = workers - len(set(log) & set(range(workers)))
    on_priority = [c for c in conflicts if c.path == ("priority",)]
    seen = {c.incoming for c in on_priority} | {c.current for c in on_priority}
    truth = len(hot) - 1
    if kind == "SharedChannel":
        unseen = len(set(hot) - seen) if truth else 0
        exact = len(on_priority) == truth and len({c.incoming_agent for c in on_priority}) == truth
    else:  # a reducer keeps one hot value and reports nothing
        unseen, exact = truth, truth == 0
    return {
        "time": elapsed,
        "merges": len(merges),
        "reported": len(conflicts),
        "truth": truth,
        "exact": exact,
        "lost": lost_items + lost_log + unseen,
        "priority": final.get("priority"),
    }


def main() -> None:
    random.seed(7)
    head = (
        f"{'state key':<15} {'sends':>6} {'wall s':>7} {'merges':>7} "
        f"{'reported':>9} {'truth':>6} {'exact':>6} {'lost':>6}  priority"
    )
    print(head)
    print("-" * len(head))
    for workers in (25, 1000):
        for kind in ("plain key", "dict reducer", "SharedChannel"):
            r = measure(kind, workers)
            if "error" in r:
                print(f"{kind:<15} {workers:>6} {r['time']:>7.2f}  raises {r['error']}")
                continue
            merges = r["merges"] if kind == "SharedChannel" else "-"
            reported = r["reported"] if kind == "SharedChannel" else 0
            print(
                f"{kind:<15} {workers:>6} {r['time']:>7.2f} {merges!s:>7} {reported:>9} "
                f"{r['truth']:>6} {'yes' if r['exact'] else 'no':>6} {r['lost']:>6}"
                f"  {r['priority']}"
            )
    print()
    print("truth = hot writes after the first (each must be reported once, by its writer);")
    print("lost = items + log entries missing + hot writes dropped without a report")


if __name__ == "__main__":
    main()
