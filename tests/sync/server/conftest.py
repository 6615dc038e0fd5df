"""Fixtures shared by the hub tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from crdt_state import storage


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Open while set: every commit of a state file waits until the event is set."""
    gate = threading.Event()
    gate.set()
    commit = storage.Store._commit

    def gated(self: storage.Store, batch: Any) -> None:
        gate.wait(30)
        commit(self, batch)

    monkeypatch.setattr(storage.Store, "_commit", gated)
    yield gate
    gate.set()
