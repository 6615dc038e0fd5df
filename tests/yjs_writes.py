"""A stock Yjs peer's updates, one per write (shared by the state and hub tests)."""

from __future__ import annotations

from typing import Any

from pycrdt import Doc, Map

__all__ = ["built_on", "one_update_per_write"]


def one_update_per_write(client_id: int, writes: list[tuple[str, Any]]) -> list[bytes]:
    """The updates of a pycrdt peer setting ``key: value`` in the ``state`` map, one a write."""
    writer: Doc[Any] = Doc(client_id=client_id)
    root = writer.get("state", type=Map)
    updates = []
    for key, value in writes:
        before = writer.get_state()
        root[key] = value
        updates.append(writer.get_update(before))
    return updates


def built_on(base: bytes, client_id: int, key: str, value: Any) -> bytes:
    """A peer's update setting ``key`` in the ``state`` map, built on ``base`` (not in it).

    Its struct's origin is in ``base``: a document without ``base`` keeps it pending.
    """
    peer: Doc[Any] = Doc(client_id=client_id)
    peer.apply_update(base)
    before = peer.get_state()
    peer.get("state", type=Map)[key] = value
    return peer.get_update(before)
