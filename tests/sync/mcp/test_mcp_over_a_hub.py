"""The MCP tools over a hub room: reads show what the hub confirmed, writes are never
reported done before the hub said so (found trying the server as a user)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hubs import FAST, RestartableHub, eventually

import sync
from crdt_state import MergeResult, SharedState, VersionVector
from sync.mcp.tools import CommitArgs, NotAvailable, ReadArgs, StateTools


async def test_reads_show_the_confirmed_room_and_a_dead_hub_takes_no_write(
    tmp_path: Path,
) -> None:
    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    async with asyncio.timeout(20):
        async with sync.connect(
            hub.url("room"), agent="server", local=tmp_path / "mcp.db", reconnect=FAST
        ) as remote:
            tools = StateTools(remote)
            seed = tools.read_state(ReadArgs())
            done = await tools.commit_changes(
                CommitArgs(changes={"n": 1}, base=seed["token"], agent="a")
            )
            assert done["status"] == "merged"
            read = tools.read_state(ReadArgs())
            assert read["values"] == {"n": 1} and read["token"] == done["token"]

            await hub.stop()
            await eventually(lambda: not remote.connected)
            # another client of the same server queues a write while the hub is down
            queued = await remote.acommit({"n": 2}, remote.token, "b")
            assert queued.pending and remote.get("n") == 2  # the remote's own view shows it
            # ... but the tools read the room as confirmed, at the token they return
            assert tools.read_state(ReadArgs()) == read
            assert tools.value_at("n") == 1 and tools.value_at(None) == {"n": 1}
            with pytest.raises(NotAvailable) as refused:
                await tools.commit_changes(
                    CommitArgs(changes={"m": 1}, base=read["token"], agent="c")
                )
            assert refused.value.code == "not_available" and "nothing was written" in str(
                refused.value
            )
            assert remote.pending == 1  # the refused commit queued nothing

            await hub.start()
            await remote.wait_idle()
            assert tools.read_state(ReadArgs())["values"] == {"n": 2}
    assert await hub.state("room") == {"n": 2}
    await hub.stop()


class _DroppedBeforeTheAnswer:
    """A remote state whose connection dropped after the merge was sent."""

    connected = True
    url = "ws://hub.invalid/room"

    def __init__(self) -> None:
        self.replica = SharedState()

    async def acommit(self, changes: Any, base: VersionVector, agent: str) -> MergeResult:
        return MergeResult(token=base, agent=agent, fast_forward=False, pending=True)


async def test_a_merge_without_the_hubs_answer_is_pending_not_merged() -> None:
    tools = StateTools(_DroppedBeforeTheAnswer())
    base = tools.read_state(ReadArgs())["token"]
    result = await tools.commit_changes(CommitArgs(changes={"x": 1}, base=base, agent="a"))
    assert result == {"status": "pending", "applied": [], "conflicts": [], "token": base}
