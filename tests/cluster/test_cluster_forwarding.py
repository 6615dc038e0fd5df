"""A forwarded write's ``XADD``, packed from per-session parts (``cluster.forwarding``).

The command is byte for byte the one packed from the encoded entry, whatever the room,
session and data; Redis stores it as that entry, which the owner decodes back.
"""

from __future__ import annotations

import secrets

from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from sync.server._room import Session
from sync.server.cluster import room_key
from sync.server.cluster.forwarding import InCommands
from sync.server.cluster.link import Link, pack
from sync.server.cluster.streamio import stream_key
from sync.server.cluster.streams import MERGE, UPDATE, Fields, InEntry, decode_in, encode_in


def _present(fields: Fields | None) -> Fields:
    """An entry's fields (redis types them optional: a deleted entry's)."""
    assert fields is not None
    return fields


@given(
    room=st.text(min_size=1, max_size=20),
    session_id=st.integers(min_value=0, max_value=2**40),
    kind=st.sampled_from([UPDATE, MERGE]),
    data=st.lists(st.binary(max_size=300), min_size=1, max_size=3),
)
def test_the_command_is_the_packed_encoded_entry(
    room: str, session_id: int, kind: str, data: list[bytes]
) -> None:
    commands = InCommands("host:1:abc")
    session = Session(None, "test", 1024, id=session_id)
    for one in data:  # the second write of the session reuses its parts
        entry = InEntry(kind, one, "host:1:abc", session_id, session.label, session.writer)
        packed = encode_in(entry)["e"]
        assert isinstance(packed, bytes)  # encode_in types every field bytes | str
        expected = pack(b"XADD", stream_key(room, "in"), b"*", b"e", packed)
        assert commands.command(room, session, kind, one) == expected


async def test_redis_stores_the_entry_the_owner_decodes(redis: Redis) -> None:
    room = f"forward-{secrets.token_hex(4)}"
    commands = InCommands("hub-a")
    session = Session(None, "test", 1024, id=7)
    link = Link(redis)
    try:
        replies = await link.call(
            [
                commands.command(room, session, UPDATE, b"\x00\x01update"),
                commands.command(room, session, MERGE, b"merge request"),
            ]
        )
        entries = await redis.xrange(room_key(room, "in"))
        assert entries is not None
        assert [i for i, _ in entries] == replies
        assert [decode_in(_present(fields)) for _, fields in entries] == [
            InEntry(UPDATE, b"\x00\x01update", "hub-a", 7, session.label, session.writer),
            InEntry(MERGE, b"merge request", "hub-a", 7, session.label, session.writer),
        ]
        commands.forget(room, 7)
        other = Session(None, "test", 1024, id=7)  # same id, its own writer scope
        await link.call([commands.command(room, other, UPDATE, b"x")])
        entries = await redis.xrange(room_key(room, "in"))
        assert entries is not None
        last = entries[-1][1]
        assert decode_in(_present(last)).scope == other.writer != session.writer
    finally:
        await link.aclose()
        await redis.delete(room_key(room, "in"))
