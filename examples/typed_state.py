"""A typed triage state: a pydantic model with merge policies on its fields.

Six triage agents (threads) work on one ticket at once. Each forks a branch,
"thinks" for a while (a slow LLM call in real life), and merges its findings.
The merge policies live next to the fields:

- ``llm_calls`` is a counter: every agent's increments add up;
- ``labels`` is a union: every label any agent proposed is kept, once;
- ``confidence`` keeps the maximum offered;
- ``findings`` is a list: concurrent appends are all kept;
- ``workers`` is a dict of models: each agent writes its own entry.

Finally one agent proposes a severity the model does not allow; the write is
refused before it reaches its branch, with an error an agent (or an LLM in a
tool loop) can act on.

Run: ``python examples/typed_state.py``
"""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from crdt_state import SchemaError, SharedState, resolvers


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class Finding(BaseModel):
    agent: str
    summary: str
    severity: Severity = Severity.LOW
    at: datetime


class Worker(BaseModel):
    status: Literal["idle", "working", "done"] = "idle"
    seconds: float = 0.0


class Ticket(BaseModel):
    title: str = "Checkout fails for some users"
    severity: Severity = Severity.MEDIUM
    llm_calls: Annotated[int, resolvers.counter] = 0
    labels: Annotated[list[str], resolvers.union] = []
    confidence: Annotated[float, resolvers.maximum] = Field(default=0.0, ge=0, le=1)
    findings: list[Finding] = []
    workers: dict[str, Worker] = {}


AGENTS = {
    "logs": (["backend", "payments"], "5xx spike on /checkout since 09:12", Severity.HIGH),
    "metrics": (["payments"], "p99 latency of the payment API x4", Severity.HIGH),
    "frontend": (["ui"], "retry button loops on timeout", Severity.MEDIUM),
    "support": (["customer-impact"], "38 tickets mention 'card declined'", Severity.MEDIUM),
    "deploys": (["backend", "release"], "payments-svc 4.2.0 rolled out at 09:10", Severity.LOW),
    "db": (["database"], "connection pool saturated on payments-db", Severity.HIGH),
}


def triage(state: SharedState[Ticket], name: str, start: threading.Barrier) -> None:
    labels, summary, severity = AGENTS[name]
    rng = random.Random(name)
    branch = state.fork(name)
    start.wait()  # every agent forks from the same version, then works concurrently
    began = time.perf_counter()
    calls = rng.randint(1, 4)
    time.sleep(0.05 * calls)  # the slow part: LLM calls
    branch.set("llm_calls", branch.get("llm_calls") + calls)
    branch.set("labels", branch.get("labels") + labels)
    branch.set("confidence", round(rng.uniform(0.4, 0.95), 2))
    branch.append(
        "findings",
        Finding(agent=name, summary=summary, severity=severity, at=datetime.now(UTC)),
    )
    branch.set(("workers", name), Worker(status="done", seconds=time.perf_counter() - began))
    result = branch.merge()
    settled = ", ".join(f"{'.'.join(c.path)} by {c.policy}" for c in result.conflicts)
    print(f"  {name:<9} merged; conflicts settled: {settled or 'none'}")


def main() -> None:
    state = SharedState(schema=Ticket)
    print("Six agents triage one ticket concurrently:")
    start = threading.Barrier(len(AGENTS))
    threads = [threading.Thread(target=triage, args=(state, n, start)) for n in AGENTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    ticket = state.model()  # a Ticket, for type checkers too
    print("\nThe typed result:")
    assert ticket.llm_calls == sum(random.Random(n).randint(1, 4) for n in AGENTS)
    print(f"  llm_calls  = {ticket.llm_calls} (every agent's calls, summed)")
    print(f"  labels     = {ticket.labels} (union)")
    print(f"  confidence = {ticket.confidence} (maximum)")
    print(f"  findings   = {len(ticket.findings)} (all appends kept)")
    for finding in sorted(ticket.findings, key=lambda f: f.agent):
        print(f"    - [{finding.severity.value:>6}] {finding.agent}: {finding.summary}")
    print(f"  workers    = {sorted(ticket.workers)} all {ticket.workers['db'].status}")

    print("\nOne agent proposes a severity the model does not allow:")
    with state.fork("escalator") as branch:
        try:
            branch.set("severity", "sev0")
        except SchemaError as error:
            print(f"  refused: {error}")
            print("  errors for the agent:", json.dumps(error.errors, indent=None))
            branch.set("severity", Severity.CRITICAL)  # the agent corrects itself
    final = state.model()
    print(f"  severity is now {final.severity.value!r}")

    print("\nThe JSON schema to hand to an LLM as a tool definition has fields:")
    print("  " + ", ".join(state.json_schema()["properties"]))


if __name__ == "__main__":
    main()
