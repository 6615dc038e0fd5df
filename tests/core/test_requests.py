"""Idempotency keys: bounded memory of applied requests."""

from __future__ import annotations

import pytest

from crdt_state import SharedState, VersionVector
from crdt_state.requests import RequestMemory


def test_memory_is_bounded_and_keeps_the_newest() -> None:
    memory = RequestMemory(keep=2)
    for rid in (1, 2, 3):
        memory.remember(rid, VersionVector({1: rid}), (("k",),))
    assert 1 not in memory and 2 in memory and 3 in memory
    assert len(memory) == 2
    result = memory.result(3)
    assert result is not None
    assert result.token == VersionVector({1: 3}) and result.applied == (("k",),)
    assert memory.result(None) is None and memory.result(99) is None


def test_refused_requests_are_not_remembered() -> None:
    from crdt_state import ConflictError

    state = SharedState()
    base = state.token
    state.commit({"a": 1}, base, "x")
    with pytest.raises(ConflictError):
        state.commit({"a": 2}, base, "y", request_id=5)
    assert 5 not in state._requests
    # settled and sent again with the same id: applied now
    state.commit({"a": 2}, base, "y", request_id=5, resolvers={"a": 2})
    assert state.get("a") == 2 and 5 in state._requests
