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
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace
from sync.server.cluster.lease import UNAVAILABLE
from sync.server.cluster.link import Link, bulk

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


_KEYS: dict[tuple[str, str, str], tuple[bytes, bytes]] = {}
"""Stream keys as bytes, and as a command's bulk string, by (cluster id, room, part): read
calls name every followed room's key."""
_MAX_KEYS: Final = 65_536


def stream_key(room: str, part: str, space: KeySpace = DEFAULT_SPACE) -> bytes:
    """``space.key(room, part)`` as bytes, remembered (cleared past :data:`_MAX_KEYS`)."""
    return _key(room, part, space)[0]


def _key(room: str, part: str, space: KeySpace) -> tuple[bytes, bytes]:
    known = _KEYS.get((space.cluster, room, part))
    if known is None:
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.clear()
        key = space.key(room, part).encode()
        known = _KEYS[(space.cluster, room, part)] = (key, bulk(key))
    return known


async def read_rooms(
    link: Link,
    positions: Mapping[str, str],
    part: str,
    *,
    count: int,
    block: float,
    space: KeySpace = DEFAULT_SPACE,
) -> list[tuple[str, list[Entry]]]:
    """One ``XREAD BLOCK`` over the ``part`` streams of rooms (name -> read after).

    The streams are named in key space ``space`` (the cluster's).
    Returns ``(room name, entries)`` for each stream that had entries, in stream order
    (ids as text, fields as a mapping of bytes); a key that is no room's of ``space``
    is skipped.
    The command is packed by hand and sent on the reader's own connection
    (:class:`~sync.server.cluster.link.Link`: an ``XREAD`` of 20 rooms costs ~50-90 µs
    less CPU than through redis-py's client), keys and positions as bytes.
    Redis failures are raised as redis-py raises them (the callers react differently).
    """
    names: dict[bytes, str] = {}
    keys: list[bytes] = []
    ids: list[bytes] = []
    for name, position in positions.items():
        key, packed = _key(name, part, space)  # the key's bulk string made once per room
        names[key] = name
        keys.append(packed)
        ids.append(bulk(position.encode()))
    command = b"".join(
        (
            b"*%d\r\n" % (6 + 2 * len(keys)),
            bulk(b"XREAD"),
            bulk(b"COUNT"),
            bulk(b"%d" % count),
            bulk(b"BLOCK"),
            bulk(b"%d" % int(block * 1000)),
            bulk(b"STREAMS"),
            *keys,
            *ids,
        )
    )
    (got,) = await link.call((command,))
    if isinstance(got, Exception):
        raise got
    rooms = []
    streams = got.items() if isinstance(got, dict) else (got or ())  # RESP3 or RESP2
    for raw_key, raw_entries in streams:
        known = names.get(raw_key) if isinstance(raw_key, bytes) else None
        if known is None:
            try:
                known, _ = space.parse(text_id(raw_key))
            except ValueError:
                continue
        rooms.append((known, _entries(raw_entries)))
    return rooms


def _entries(raw: Any) -> list[Entry]:
    """The entries of one stream of a raw ``XREAD`` reply: ``[id, [field, value, ...]]``."""
    entries: list[Entry] = []
    for entry_id, flat in raw or ():
        if not flat:  # an entry deleted since it was listed
            fields: dict[bytes | str, bytes | str] = {}
        elif len(flat) == 2:  # the cluster's entries: one field
            fields = {flat[0]: flat[1]}
        else:
            fields = dict(zip(flat[::2], flat[1::2], strict=False))
        entries.append((text_id(entry_id), fields))
    return entries


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
