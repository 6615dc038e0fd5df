"""Test helpers: a hub that can be stopped and started again on the same port and files."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crdt_state import Retry
from sync.hub import Hub

__all__ = ["FAST", "RestartableHub", "eventually", "free_port"]

FAST = Retry(attempts=1, base_delay=0.01, max_delay=0.05)
"""Reconnect quickly: tests stop and start hubs often."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``check`` until true, failing after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)


class RestartableHub:
    """A durable hub (rooms in SQLite files under ``db``) on a fixed loopback port."""

    def __init__(self, db: Path, **options: Any) -> None:
        self.db = db
        self.port = free_port()
        self.options = options
        self.hub: Hub | None = None

    def url(self, room: str) -> str:
        return f"ws://127.0.0.1:{self.port}/{room}"

    async def start(self) -> Hub:
        assert self.hub is None
        self.hub = Hub(port=self.port, db=self.db, **self.options)
        await self.hub.start()
        return self.hub

    async def stop(self) -> None:
        if self.hub is not None:
            await self.hub.stop()
            self.hub = None

    async def state(self, room: str) -> dict[str, Any]:
        """The room as the running hub holds it (loaded from its file if no one joined yet)."""
        assert self.hub is not None
        return (await self.hub.room(room)).state.snapshot()
