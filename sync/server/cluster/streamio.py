"""The few Redis stream calls of the cluster, typed and failing as ``ClusterUnavailable``.

redis-py's stream commands are loosely typed (and answer bytes or str depending on the
client); these wrappers return entry ids as ``str`` and fields as a mapping, and turn a
Redis that does not answer into :class:`~sync.server.cluster.errors.ClusterUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Final

from redis.asyncio import Redis

from sync.server.cluster.errors import ClusterUnavailable
from sync.server.cluster.keys import parse_room_key, room_key
from sync.server.cluster.lease import UNAVAILABLE

__all__ = [
    "end_if_cancelled",
    "Entry",
    "APPEND_IF_HOLDER",
    "append_if_holder",
    "entries_of",
    "later",
    "newest",
    "read_after",
    "read_all",
    "read_rooms",
    "stream_key",
    "text_id",
    "trim_before",
]

APPEND_IF_HOLDER: Final = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return false
end
return redis.call('xadd', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
"""
"""``XADD`` to ``KEYS[2]`` (``MAXLEN ~ ARGV[2]``, fields ``ARGV[3:]``) while ``KEYS[1]``
holds ``ARGV[1]``; the new id, or nil."""

Entry = tuple[str, Mapping[bytes | str, bytes | str]]
"""A stream entry: its id and its fields."""


def text_id(raw: Any) -> str:
    """A stream id (or key) as Redis returned it (bytes, or text), as text."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def entries_of(raw: Any) -> list[Entry]:
    """The entries of a raw ``XREAD``/``XRANGE`` answer for one stream, ids as ``str``."""
    return [(text_id(entry_id), fields or {}) for entry_id, fields in raw or ()]


def later(entry_id: str, than: str) -> bool:
    """True when the stream id ``entry_id`` comes after ``than`` (both ``ms-seq``)."""
    return _id_key(entry_id) > _id_key(than)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


_KEYS: dict[tuple[str, str], bytes] = {}
"""Stream keys as bytes by (room, part): read calls name every followed room's key."""
_MAX_KEYS: Final = 65_536


def stream_key(room: str, part: str) -> bytes:
    """``room_key(room, part)`` as bytes, remembered (cleared past :data:`_MAX_KEYS`)."""
    key = _KEYS.get((room, part))
    if key is None:
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.clear()
        key = _KEYS[(room, part)] = room_key(room, part).encode()
    return key


async def read_rooms(
    redis: Redis, positions: Mapping[str, str], part: str, *, count: int, block: float
) -> list[tuple[str, Any]]:
    """One ``XREAD BLOCK`` over the ``part`` streams of rooms (name -> read after).

    Returns ``(room name, raw entries)`` for each stream that had entries (the raw
    entries as :func:`entries_of` takes them); a key that is no room's is skipped.
    Keys and positions are sent as bytes: redis-py packs a ``str`` argument several
    times slower (an ``XREAD`` of 20 rooms: ~88 µs of CPU with ``str``, ~21 with bytes).
    Redis failures are raised as redis-py raises them (the callers react differently).
    """
    names: dict[bytes, str] = {}
    streams: dict[bytes, bytes] = {}
    for name, position in positions.items():
        key = stream_key(name, part)
        names[key] = name
        streams[key] = position.encode()
    got: Any = await redis.xread(streams, count=count, block=int(block * 1000))  # type: ignore[arg-type]
    rooms = []
    for raw_key, raw_entries in got or ():
        known = names.get(raw_key) if isinstance(raw_key, bytes) else None
        if known is None:
            try:
                known, _ = parse_room_key(text_id(raw_key))
            except ValueError:
                continue
        rooms.append((known, raw_entries))
    return rooms


async def read_after(
    redis: Redis, key: str, position: str, *, count: int, block_ms: int
) -> list[Entry]:
    """Up to ``count`` entries of ``key`` after ``position``, waiting up to ``block_ms``."""
    try:
        got: Any = await redis.xread({key: position}, count=count, block=block_ms)
    except UNAVAILABLE as exc:
        raise ClusterUnavailable("redis", f"redis did not answer: {exc}") from exc
    if not got:
        return []
    first = got[0]
    return entries_of(first[1])


async def read_all(redis: Redis, key: str) -> list[Entry]:
    """Every entry of ``key``, oldest first."""
    try:
        got: Any = await redis.xrange(key)
    except UNAVAILABLE as exc:
        raise ClusterUnavailable("redis", f"redis did not answer: {exc}") from exc
    return entries_of(got)


async def newest(redis: Redis, key: str) -> Entry | None:
    """The newest entry of ``key``, ``None`` when the stream is empty or missing."""
    try:
        got: Any = await redis.xrevrange(key, count=1)
    except UNAVAILABLE as exc:
        raise ClusterUnavailable("redis", f"redis did not answer: {exc}") from exc
    entries = entries_of(got)
    return entries[0] if entries else None


async def append_if_holder(
    redis: Redis,
    lease_key: str,
    token: str,
    key: str,
    fields: Mapping[str, bytes | str],
    *,
    maxlen: int,
) -> str | None:
    """``XADD`` ``fields`` to ``key`` only while ``lease_key`` holds ``token``.

    One script does both, atomically. Returns the new id, or ``None`` when the lease is
    not ``token``'s.

    Both keys must share a hash tag (the room's). This is what keeps a deposed owner, or
    one whose lease vanished with a Redis restart, from publishing on the room's ``out``
    stream even before it noticed: positions in ``out`` are always the current ``in``'s.
    """
    args: list[bytes | str] = [token, str(maxlen)]
    for name, value in fields.items():
        args += [name, value]
    script = redis.register_script(APPEND_IF_HOLDER)
    try:
        done: Any = await script(keys=[lease_key, key], args=args)
    except UNAVAILABLE as exc:
        raise ClusterUnavailable("redis", f"redis did not answer: {exc}") from exc
    return None if done is None else text_id(done)


async def trim_before(redis: Redis, key: str, position: str) -> None:
    """Drop the entries of ``key`` older than ``position`` (approximately; best effort)."""
    with contextlib.suppress(*UNAVAILABLE):
        await redis.xtrim(key, minid=position, approximate=True)


def end_if_cancelled() -> None:
    """Raise ``CancelledError`` when the current task was cancelled and went on anyway.

    The cluster's endless loops (the ``in`` reader, the ``out`` follower, the outbox) call
    it after every round. On Python 3.11, ``asyncio.wait_for`` (which redis-py wraps
    socket calls in when its client has a socket timeout) can swallow a cancellation that
    arrives as the call completes; the loop then runs on for ever and whoever awaits the
    cancelled task (a hub stopping, a test's teardown) waits for ever. The task's count
    of cancellation requests stays above zero in that case: the next round ends the loop.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
