"""25 agents triage one support ticket together, without losing anyone's work.

Each agent is an asyncio task that forks the shared state, "calls an LLM"
(a random 0.2-1.2 s wait standing in for one), writes what it found and
merges. The state holds:

- ``sentiment``, ``summary``, ``intent``: one writer each (two agents judge
  the sentiment: a conflict there re-runs the later agent on fresh state);
- ``entities``: a list every extractor appends to (concurrent appends all kept);
- ``calls``: how many LLM calls were made (``resolvers.counter`` adds up
  concurrent increments);
- ``priority``: the contested scalar, proposed by several agents
  (``resolvers.maximum`` settles it, and every conflict is logged).

Run: ``python examples/swarm.py``
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable

from crdt_state import (
    Branch,
    Conflict,
    MergeResult,
    Retry,
    SharedState,
    format_path,
    resolvers,
)

TICKET = (
    "Hi, this is Dana Whitfield (dana.w@example.com). My order #A-4411 for the Kestrel 2 "
    "espresso machine arrived in Lyon with a cracked boiler, and Acme Pay charged my Visa "
    "ending 0042 twice, 189.00 EUR each. Support promised a callback on March 3 but nobody "
    "called. If this isn't fixed by Friday I'm cancelling my Premium plan and going to BrewCo."
)

ENTITIES = [
    ("person", "Dana Whitfield"),
    ("email", "dana.w@example.com"),
    ("order", "#A-4411"),
    ("product", "Kestrel 2 espresso machine"),
    ("city", "Lyon"),
    ("defect", "cracked boiler"),
    ("payment provider", "Acme Pay"),
    ("card", "Visa ending 0042"),
    ("amount", "189.00 EUR"),
    ("date", "March 3"),
    ("deadline", "Friday"),
    ("plan", "Premium plan"),
    ("competitor", "BrewCo"),
]

# angle -> priority proposed (1 = low ... 4 = urgent)
PRIORITY_VIEWS = {
    "billing": 3,
    "churn": 4,
    "defect": 3,
    "sla": 2,
    "sentiment": 3,
    "value": 2,
    "legal": 1,
    "escalation": 4,
}

rng = random.Random(2024)
Step = Callable[[Branch], Awaitable[None]]


async def llm(answer: str | int) -> str | int:
    """A stand-in for a model call: slow, then an answer."""
    await asyncio.sleep(rng.uniform(0.2, 1.2))
    return answer


def count_call(branch: Branch) -> None:
    branch.set("calls", branch.get("calls", 0) + 1)


def sentiment_agent(verdict: str) -> Step:
    async def step(branch: Branch) -> None:
        current = branch.get("sentiment")
        if current is not None:
            # a re-run on fresh state: someone already judged; ask again, seeing it
            await llm(current)  # "given this sentiment, do you agree?" -> yes
        else:
            branch.set("sentiment", await llm(verdict))
        count_call(branch)

    return step


def field_agent(path: str, answer: str) -> Step:
    async def step(branch: Branch) -> None:
        branch.set(path, await llm(answer))
        count_call(branch)

    return step


def entity_agent(kind: str, text: str) -> Step:
    async def step(branch: Branch) -> None:
        found = await llm(text)
        branch.append("entities", {"type": kind, "text": found})
        count_call(branch)

    return step


def priority_agent(angle: str) -> Step:
    async def step(branch: Branch) -> None:
        branch.set("priority", await llm(PRIORITY_VIEWS[angle]))
        count_call(branch)

    return step


def team() -> dict[str, Step]:
    agents: dict[str, Step] = {
        "sentiment-a": sentiment_agent("angry"),
        "sentiment-b": sentiment_agent("frustrated"),
        "summarizer": field_agent(
            "summary",
            "Espresso machine #A-4411 arrived broken and the customer was double-charged; "
            "promised callback missed; threatens to cancel Premium by Friday.",
        ),
        "intent": field_agent("intent", "refund_and_replacement"),
    }
    for kind, text in ENTITIES:
        agents[f"entities-{kind.replace(' ', '-')}"] = entity_agent(kind, text)
    for angle in PRIORITY_VIEWS:
        agents[f"priority-{angle}"] = priority_agent(angle)
    return agents


async def main() -> None:
    state = SharedState(
        resolvers={
            "calls": resolvers.counter,  # concurrent increments add up
            "priority": resolvers.maximum,  # the contested scalar: highest proposal wins
            "sentiment": resolvers.retry,  # disagreement: re-run the later agent
        }
    )
    state.commit(
        {
            "ticket": TICKET,
            "sentiment": None,
            "entities": [],
            "summary": None,
            "intent": None,
            "calls": 0,
            "priority": 0,
        },
        state.token,
        agent="setup",
    )
    conflicts: list[Conflict] = []  # the conflict log, in merge order
    state.subscribe(lambda update: conflicts.extend(update.conflicts))
    agents = team()
    started = time.perf_counter()

    async def run(name: str, step: Step) -> tuple[str, MergeResult]:
        result = await state.atransact(
            step, agent=name, retry=Retry(attempts=3, base_delay=0.05, max_delay=0.2)
        )
        return name, result

    results = await asyncio.gather(*(run(name, step) for name, step in agents.items()))
    elapsed = time.perf_counter() - started

    final = state.snapshot()
    print(f"{len(agents)} agents finished in {elapsed:.1f} s\n")
    print("Final state:")
    print(json.dumps({k: v for k, v in final.items() if k != "ticket"}, indent=2))

    print(f"\nConflict log ({len(conflicts)} conflicts, each settled by its policy):")
    shown: dict[str, int] = {}
    for c in conflicts:
        path = format_path(c.path)
        shown[path] = shown.get(path, 0) + 1
        if path == "calls" and shown[path] > 3:
            continue  # counter merges are many and alike: show a few
        print(
            f"  {path:<9} base={c.base!r}: {c.current_agent} had {c.current!r},"
            f" {c.incoming_agent} wrote {c.incoming!r} -> {c.resolution!r} ({c.policy})"
        )
    if shown.get("calls", 0) > 3:
        print(
            f"  calls     ... {shown['calls'] - 3} more concurrent increments, added up (counter)"
        )
    for name, result in results:
        if result.attempts > 1:
            print(
                f"  sentiment disagreed: {name} re-ran on fresh state (retry policy),"
                f" {result.attempts} runs in all"
            )

    assert final["calls"] == len(agents), "every agent's merged step is counted"
    assert len(final["entities"]) == len(ENTITIES), "every extractor's entity is kept"
    assert final["priority"] == max(PRIORITY_VIEWS.values()), "the highest proposal wins"
    print(
        f"\nChecks: calls = {final['calls']} (one per agent), "
        f"{len(final['entities'])}/{len(ENTITIES)} entities kept, "
        f"priority = {final['priority']} (highest proposal), nothing lost."
    )


if __name__ == "__main__":
    asyncio.run(main())
