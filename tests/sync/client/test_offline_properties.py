"""Property: a remote agent working through hub outages and restarts loses nothing.

One agent runs a random sequence of read-modify-write increments and string
sets, while the hub is stopped and started again and the agent itself is
restarted (same ``local`` file). Every step also appends its id to a list, a
witness of which steps were applied (a merge is all or nothing). Ground truth
is computed from the steps alone.

- Alone, every step is applied, exactly once and in order; the agent reads
  its own steps at once, online or not; nothing fails, nothing conflicts.
- With a second agent writing the same paths, every step of either agent is
  applied or reported to its caller (or in ``failed``): never silently lost,
  never applied twice, and the counter adds up to the applied increments
  (a settled merge may land after later, independent ones of its agent).
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hubs import FAST, RestartableHub, eventually
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt_state import CrdtStateError, resolvers
from sync.client.remote import RemoteState

Step = tuple[str, ...]
agent_steps = st.lists(
    st.one_of(
        st.just(("inc",)),
        st.tuples(st.just("set"), st.sampled_from(["red", "green", "blue"])),
        st.just(("stop",)),
        st.just(("start",)),
        st.just(("restart",)),
    ),
    min_size=1,
    max_size=10,
)
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
COUNTING = {"n": resolvers.counter}


@dataclass
class Agent:
    """One remote agent and what its steps did, as the test sees it."""

    name: str
    url: str
    local: Path | None
    options: dict[str, Any] = field(default_factory=dict)
    remote: RemoteState | None = None
    incs: list[str] = field(default_factory=list)  # ids of increment steps
    sets: dict[str, str] = field(default_factory=dict)  # id -> value of set steps
    order: list[str] = field(default_factory=list)  # every step id, in order
    raised: list[CrdtStateError] = field(default_factory=list)
    failed: list[CrdtStateError] = field(default_factory=list)

    async def open(self) -> RemoteState:
        remote = RemoteState(
            self.url, agent=self.name, local=self.local, reconnect=FAST, **self.options
        )
        await remote.start(timeout=0.05 if self.local is not None else 5)
        self.remote = remote
        return remote

    async def close(self) -> None:
        assert self.remote is not None
        self.failed += self.remote.failed
        await self.remote.close()
        self.remote = None

    async def step(self, kind: str, value: str = "") -> None:
        assert self.remote is not None
        step_id = f"{self.name}{len(self.order)}"
        self.order.append(step_id)
        try:
            async with self.remote.fork() as branch:
                if kind == "inc":
                    branch.set("n", branch.get("n") + 1)
                else:
                    branch.set("s", value)
                branch.append("log", step_id)
        except CrdtStateError as exc:  # told to the caller: a reported step
            self.raised.append(exc)
        (self.incs.append(step_id) if kind == "inc" else self.sets.__setitem__(step_id, value))


async def run(steps: list[Step], other_steps: list[Step] | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hub = RestartableHub(Path(tmp) / "hub.db")
        await hub.start()
        up = True
        url = hub.url("prop/room")
        alone = other_steps is None
        options = {} if alone else {"resolvers": COUNTING}
        a = Agent("a", url, Path(tmp) / "a.sqlite", options)
        b = Agent("b", url, None, options)
        remote = await a.open()
        await remote.acommit({"n": 0, "s": "", "log": []}, remote.token)
        if not alone:
            await b.open()
        try:
            for i, (kind, *args) in enumerate(steps):
                if kind == "stop" and up:
                    await hub.stop()
                    up = False
                elif kind == "start" and not up:
                    await hub.start()
                    up = True
                elif kind == "restart":
                    await a.close()
                    await a.open()
                elif kind in ("inc", "set"):
                    await a.step(kind, *args)
                    if alone:  # read-your-writes, online or offline
                        assert a.remote is not None
                        assert a.remote.get("n") == len(a.incs)
                        assert a.remote.get("s") == (list(a.sets.values()) or [""])[-1]
                        assert a.remote.get("log") == a.order
                if other_steps and up and i < len(other_steps):
                    kind_b, *args_b = other_steps[i]
                    if kind_b in ("inc", "set"):
                        await b.step(kind_b, *args_b)
            if not up:
                await hub.start()
            for agent in (a, b) if not alone else (a,):
                remote_ = agent.remote
                assert remote_ is not None
                await remote_.wait_idle(timeout=20)
                await eventually(lambda r=remote_: r.connected)  # type: ignore[misc]
            room = await hub.state("prop/room")
            if alone:
                check_alone(a, room)
            else:
                check_interfered([a, b], room)
        finally:
            for agent in (a, b):
                if agent.remote is not None:
                    await agent.close()
            await hub.stop()


def check_alone(a: Agent, room: dict[str, Any]) -> None:
    assert a.remote is not None
    assert room == {
        "n": len(a.incs),
        "s": (list(a.sets.values()) or [""])[-1],
        "log": a.order,  # every step once, in order
    }
    assert a.raised == [] and a.remote.failed == [] and a.failed == []
    assert a.remote.conflicted == []
    assert a.remote.snapshot() == room


def check_interfered(agents: list[Agent], room: dict[str, Any]) -> None:
    log = room["log"]
    assert len(log) == len(set(log)), "a step was applied twice"
    applied = set(log)
    for agent in agents:
        assert agent.remote is not None
        reported = len(agent.raised) + len(agent.failed) + len(agent.remote.failed)
        landed = [step_id for step_id in agent.order if step_id in applied]
        assert len(landed) + reported == len(agent.order), (
            f"{agent.name}: {len(agent.order)} steps, {len(landed)} applied, {reported} reported"
        )
    incs = [x for agent in agents for x in agent.incs]
    assert room["n"] == sum(1 for step_id in incs if step_id in applied)
    sets = {k: v for agent in agents for k, v in agent.sets.items()}
    last_set = [sets[x] for x in log if x in sets]
    assert room["s"] == (last_set[-1] if last_set else "")


@SETTINGS
@given(agent_steps)
def test_an_agent_alone_loses_nothing_through_outages_and_restarts(steps: list[Step]) -> None:
    asyncio.run(run(steps, None))


@SETTINGS
@given(agent_steps, agent_steps)
def test_with_a_second_writer_every_step_is_applied_or_reported(
    steps: list[Step], other: list[Step]
) -> None:
    asyncio.run(run(steps, other))
