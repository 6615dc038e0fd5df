"""Test helpers shared by the whole suite: hubs, ports, polling (fixtures: ``conftest.py``).

Importable from any test module (``from hubs import ...``): pytest puts ``tests/`` on
``sys.path`` when it loads ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from crdt_state import Retry
from sync import Hub

__all__ = [
    "FAST",
    "SECRET",
    "RestartableHub",
    "eventually",
    "free_port",
    "hub_on_thread",
    "inspect_cli",
]

FAST = Retry(attempts=1, base_delay=0.01, max_delay=0.05)
"""Reconnect quickly: tests stop and start hubs often."""

SECRET = "test-secret"
"""The secret of the secured hub fixtures."""


def inspect_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``crdt-state inspect ARGV...`` in a process of its own (this checkout's code), output
    captured as text."""
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-m", "sync.cli", "inspect", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
    )


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
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


def hub_on_thread(secret: str | None = None) -> Iterator[str]:
    """Run a hub (in memory) on its own event-loop thread; yields ``ws://127.0.0.1:<port>``.

    For tests that are plain threads (the blocking client, MCP servers in subprocesses).
    """
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, object] = {}

    async def run() -> None:
        async with Hub(port=0, secret=secret) as hub:
            holder["url"] = f"ws://{hub.host}:{hub.port}"
            holder["hub"] = hub
            holder["stop"] = stop = asyncio.Event()
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(10)
    yield str(holder["url"])
    stop = holder["stop"]
    assert isinstance(stop, asyncio.Event)
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()
