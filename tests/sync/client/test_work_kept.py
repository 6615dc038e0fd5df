"""A token that expires mid-session is not a read-only token, and a queued merge that fails
later keeps its changes: the client's work is not lost."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from hubs import FAST, SECRET, RestartableHub, eventually

import sync
from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits


async def test_merges_after_the_token_expired_stay_queued_not_denied(
    secured: Hub, tmp_path: Path
) -> None:
    token = mint_token(SECRET, "team/*", "write", 2)
    expires = int(time.time() + 2)
    async with sync.connect(
        secured.url("team/x"), agent="a", token=token, local=tmp_path / "a.db", reconnect=FAST
    ) as remote:
        done = await remote.acommit({"before": 1}, remote.token)
        assert not done.pending
        await eventually(lambda: time.time() > expires + 0.5 and not remote.connected, 6)
        later = await remote.acommit({"after": 2}, remote.token)
        assert later.pending and not remote.read_only  # queued, not "this token may only read"
        assert remote.pending == 1 and remote.failed == []
        assert remote.get("after") == 2  # the agent sees its own queued write
    assert secured.rooms["team/x"].state.snapshot() == {"before": 1}


async def test_a_queued_merge_that_fails_later_keeps_its_changes_for_a_redo(
    tmp_path: Path,
) -> None:
    """Its error in ``remote.failed`` named no change: the work could not be recovered."""
    hub = RestartableHub(tmp_path / "hub.db", limits=Limits(max_merge_bytes=300))
    await hub.start()
    async with sync.connect(
        hub.url("room"), agent="a", local=tmp_path / "a.db", reconnect=FAST
    ) as remote:
        await remote.acommit({"small": 1}, remote.token)
        await hub.stop()
        await eventually(lambda: not remote.connected)
        queued = await remote.acommit({"big": "x" * 1000}, remote.token)
        assert queued.pending
        await hub.start()
        await eventually(lambda: bool(remote.failed), 10)
        [error] = remote.failed
        assert error.code == "merge_too_large"
        assert error.details["changes"] == [{"kind": "set", "path": ["big"], "value": "x" * 1000}]
        assert error.details["agent"] == "a"
    await hub.stop()


async def test_a_remote_branchs_cancelled_amerge_called_again_merges_once(hub: Hub) -> None:
    """As for a local branch: a cancelled (timed-out) amerge, or two at once, sent the
    merge again: the hub applied each as a new merge (appends doubled)."""
    async with sync.connect(hub.url("once"), agent="a") as remote:
        cancelled = 0
        for _ in range(20):
            branch = remote.fork()
            branch.append("log", "x")
            task = asyncio.create_task(branch.amerge())
            await asyncio.sleep(0)
            await asyncio.sleep(0)  # sent; the hub's answer not in yet
            if task.cancel():
                cancelled += 1
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            again = await branch.amerge()
            assert again is branch.result and not again.pending
        both = remote.fork()
        both.append("log", "y")
        first, second = await asyncio.gather(both.amerge(), both.amerge())
        assert first == second
        await remote.wait_idle()
    assert cancelled > 0
    assert hub.rooms["once"].state.get("log") == ["x"] * 20 + ["y"]
