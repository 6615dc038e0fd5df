"""Remote agents share a room through the websocket hub, one of them offline for a while.

Starts a hub on a free loopback port (rooms in SQLite files), connects three agents with
``sync.connect``, lets them work concurrently (each writes its own finding and
bumps a counter the hub adds up), takes one agent offline, lets it keep
merging (reading its own queued merges), reconnects it, and prints the room.

Run: ``python examples/remote_agents.py``
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from pathlib import Path

import sync
from crdt_state import Retry, resolvers


async def agent(remote: sync.RemoteState, name: str, rounds: int) -> None:
    for n in range(rounds):
        async with remote.fork() as branch:
            await asyncio.sleep(random.uniform(0.01, 0.05))  # "thinking"
            branch.set(("findings", f"{name}-{n}"), f"{name} found thing {n}")
            branch.set("calls", (branch.get("calls") or 0) + 1)


async def main() -> None:
    policies = {"*": {"calls": resolvers.counter}}  # the hub adds concurrent increments up
    fast = Retry(attempts=1, base_delay=0.05, max_delay=0.3)  # reconnect quickly
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "hub.db"  # one SQLite file per room
        hub = sync.Hub(port=0, db=db, resolvers=policies)
        await hub.start()
        port, url = hub.port, hub.url("incident/42")
        local = Path(tmp) / "carol.sqlite"  # carol's queued merges survive a restart
        async with (
            sync.connect(url, agent="alice") as alice,
            sync.connect(url, agent="bob") as bob,
            sync.connect(url, agent="carol", local=local, reconnect=fast) as carol,
        ):
            await asyncio.gather(agent(alice, "alice", 5), agent(bob, "bob", 5))

            # carol loses the hub: she keeps forking and merging; merges are queued,
            # and each of her forks reads the ones queued before it
            await hub.stop()
            before = carol.get("calls")
            for n in range(2):
                async with carol.fork() as branch:
                    branch.set(("findings", f"carol-offline-{n}"), "written while offline")
                    branch.set("calls", (branch.get("calls") or 0) + 1)
            assert carol.get("calls") == before + 2  # her own queued merges, read back
            print(f"carol offline: {carol.pending} merge(s) queued, connected={carol.connected}")

            # the hub comes back on the same port and reloads the room from its file;
            # carol's queued work is sent and judged against its own fork base
            hub = sync.Hub(port=port, db=db, resolvers=policies)
            await hub.start()
            await carol.wait_idle(timeout=20)
            print(f"carol back: {carol.pending} merge(s) queued, connected={carol.connected}")
            room = hub.rooms["incident/42"].state.snapshot()
            print(json.dumps(room, indent=2, sort_keys=True))
            assert room["calls"] == 12 and len(room["findings"]) == 12
            assert carol.failed == []
            print("every agent's work is in the room; calls added up to", room["calls"])
        await hub.stop()


if __name__ == "__main__":
    asyncio.run(main())
