"""A token that expires mid-session is not a read-only token: the client's work waits."""

from __future__ import annotations

import time
from pathlib import Path

from hubs import FAST, SECRET, eventually

import sync
from sync.server.auth import mint_token
from sync.server.hub import Hub


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
