"""A LangGraph triage graph: 25 parallel workers and a second graph on one shared state.

The triage graph fans out 25 ``Send``s to a worker node; each worker "asks an
LLM" (a short sleep, no API key) about one aspect of the ticket and returns a
partial update of the shared state. At the same time a second graph, run in
another thread, escalates the ticket. Both write through a ``SharedChannel``
on one typed ``SharedState``, whose fields declare their merge policies:

- disjoint writes (each worker's finding) all merge;
- ``priority`` keeps the maximum, ``sentiment`` the first answer, ``calls``
  adds every increment (a counter), ``log`` keeps every append.

Run: ``python examples/langgraph_triage.py``.
"""

# no "from __future__ import annotations": LangGraph reads the schemas at run time

import asyncio
import random
import threading
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from pydantic import BaseModel

from crdt_state import Conflict, SharedState, StateUpdate, resolvers
from crdt_state import langgraph as shared_graph

WORKERS = 25
ASPECTS = ["billing", "shipping", "tone", "product", "urgency"]


class Triage(BaseModel):
    """The shared triage state, with a merge policy per field."""

    ticket: str = ""
    sentiment: Annotated[str | None, resolvers.first_writer_wins] = None
    priority: Annotated[int, resolvers.maximum] = 0
    calls: Annotated[int, resolvers.counter] = 0
    findings: dict[str, str] = {}
    log: list[str] = []


shared_state = SharedState(schema=Triage)


class TriageGraph(TypedDict):
    shared: Annotated[dict[str, Any], shared_graph.SharedChannel(shared_state)]
    ticket: str


class WorkerJob(TypedDict):
    """What ``fan_out`` sends each worker (LangGraph passes it as the node's state)."""

    i: int
    calls: int


async def fake_llm(prompt: str) -> str:
    """Stands in for a model call: 5 to 40 ms, a deterministic answer."""
    await asyncio.sleep(random.uniform(0.005, 0.04))
    return "angry" if "tone" in prompt else f"looked at {prompt.split()[-1]}"


# LangGraph's node protocol names the parameter ``state``: keep the name for type checkers
def plan(state: TriageGraph) -> dict[str, Any]:
    return {"shared": {"ticket": state["ticket"], "log": ["planned"]}}


def fan_out(state: TriageGraph) -> list[Send]:
    calls = state["shared"]["calls"]  # the count every worker starts from
    return [Send("worker", {"i": i, "calls": calls}) for i in range(WORKERS)]


async def worker(state: WorkerJob) -> dict[str, Any]:
    i = state["i"]
    aspect = ASPECTS[i % len(ASPECTS)]
    answer = await fake_llm(f"assess the ticket for {aspect}")
    update: dict[str, Any] = {
        "findings": {f"worker-{i:02d}": answer},
        "calls": state["calls"] + 1,  # one more call: concurrent increments add up
        "log": [f"worker-{i:02d} done"],
    }
    if aspect == "tone":
        update["sentiment"] = answer
    if aspect == "urgency":
        update["priority"] = 1 + i % 4
    return {"shared": update}


def build_triage() -> Any:
    builder = StateGraph(TriageGraph)
    builder.add_node("plan", plan)
    builder.add_node("worker", worker)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["worker"])
    builder.add_edge("worker", END)
    return builder.compile()


def build_escalation() -> Any:
    async def escalate(state: TriageGraph) -> dict[str, Any]:
        await fake_llm("decide whether to escalate")
        calls = state["shared"]["calls"]
        return {"shared": {"priority": 5, "calls": calls + 1, "log": ["escalated"]}}

    builder = StateGraph(TriageGraph)
    builder.add_node("escalate", escalate)
    builder.add_edge(START, "escalate")
    builder.add_edge("escalate", END)
    return builder.compile()


def main() -> None:
    conflicts: list[Conflict] = []

    def on_merge(update: StateUpdate) -> None:
        conflicts.extend(update.conflicts)

    shared_state.subscribe(on_merge)
    escalation = threading.Thread(
        target=lambda: asyncio.run(build_escalation().ainvoke({"ticket": "T-42"}))
    )
    escalation.start()
    asyncio.run(build_triage().ainvoke({"ticket": "T-42"}))
    escalation.join()

    final = shared_state.model()
    assert isinstance(final, Triage)
    print(f"final state: ticket={final.ticket} sentiment={final.sentiment}")
    print(f"  priority={final.priority} calls={final.calls} findings={len(final.findings)}")
    print(f"  log: {len(final.log)} entries")
    print(f"conflict log ({len(conflicts)} settled by policy):")
    for c in conflicts[:8]:
        print(
            f"  {'.'.join(c.path)}: {c.current_agent}={c.current!r} vs "
            f"{c.incoming_agent}={c.incoming!r} -> {c.resolution!r} ({c.policy})"
        )
    if len(conflicts) > 8:
        print(f"  ... and {len(conflicts) - 8} more")
    lost = WORKERS - len(final.findings)
    assert final.calls == WORKERS + 1 and final.priority == 5 and lost == 0
    assert len(final.log) == WORKERS + 2
    print(f"{WORKERS} workers and one escalation: nothing lost")


if __name__ == "__main__":
    main()
