"""Fixtures of the LangGraph tests: a real hub on loopback, on its own thread.

A copy of ``hub_url`` from tests/integrations/conftest.py until the shared
tests/conftest.py of the sync restructure holds it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from sync import Hub


@pytest.fixture
def hub_url() -> Iterator[str]:
    """``ws://127.0.0.1:<port>`` of a hub (no secret) running on its own event loop thread."""
    yield from _hub(None)


def _hub(secret: str | None) -> Iterator[str]:
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
