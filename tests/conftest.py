"""Fixtures shared by the whole suite (helpers they use: ``tests/hubs.py``).

- ``hub``: a hub in memory on a free loopback port, on the test's event loop;
- ``secured``: the same, needing access tokens minted with :data:`hubs.SECRET`;
- ``hub_url`` / ``secured_hub_url``: ``ws://127.0.0.1:<port>`` of such a hub running on
  its own event-loop thread (for tests made of plain threads or subprocesses).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from hubs import SECRET, hub_on_thread

from sync import Hub


@pytest.fixture
async def hub() -> AsyncIterator[Hub]:
    """A hub in memory, without a secret, on a free port."""
    async with Hub(port=0) as running:
        yield running


@pytest.fixture
async def secured() -> AsyncIterator[Hub]:
    """A hub in memory whose clients need tokens minted with :data:`hubs.SECRET`."""
    async with Hub(port=0, secret=SECRET) as running:
        yield running


@pytest.fixture
def hub_url() -> Iterator[str]:
    """``ws://127.0.0.1:<port>`` of a hub (no secret) running on its own event-loop thread."""
    yield from hub_on_thread()


@pytest.fixture
def secured_hub_url() -> Iterator[str]:
    """Like ``hub_url``, for a hub that needs tokens minted with :data:`hubs.SECRET`."""
    yield from hub_on_thread(SECRET)
