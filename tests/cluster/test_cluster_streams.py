"""The cluster's stream entries (pure codec) and the judge's fenced commit hook (PostgreSQL)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from cluster_servers import create_database, drop_database, postgres_admin_dsn
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.rows import TupleRow
from redis.asyncio import Redis

from sync.server.cluster import Fenced, KeySpace, room_key
from sync.server.cluster.keys import parse_room_key
from sync.server.cluster.link import Link
from sync.server.cluster.pgsessions import depose, judge_dsn, judge_name
from sync.server.cluster.pgstorage import fenced_position
from sync.server.cluster.streamio import append_if_holder, read_after, read_rooms, stream_key
from sync.server.cluster.streams import (
    Answer,
    AnswerKind,
    InEntry,
    OutEntry,
    StreamEntryError,
    decode_in,
    decode_out,
    encode_in,
    encode_out,
)
from sync.wire.lib0 import encode_var_bytes, encode_var_string, encode_var_uint


def as_redis_returns(fields: dict[str, bytes | str]) -> dict[bytes | str, bytes | str]:
    """Fields as a client without ``decode_responses`` reads them back."""
    return {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in fields.items()}


def test_in_entries_round_trip() -> None:
    entry = InEntry("m", b"\x64\x00\xff", "hub-1:42:ab", 7, "conn-7", "f" * 32)
    assert decode_in(as_redis_returns(encode_in(entry))) == entry
    assert decode_in(legacy_in(entry)) == entry
    update = InEntry("u", b"", "h", 0, "conn-0", "w")
    assert decode_in(encode_in(update)) == update  # str keys, as decode_responses gives


def test_out_entries_round_trip_with_answers() -> None:
    answers = (
        Answer("hub-a", 3, AnswerKind.REPLY, b"\x64\x01frame"),
        Answer("hub-\u00e9", 2**40, AnswerKind.CLOSE, b"update refused: invalid_update"),
    )
    entry = OutEntry(b"\x01\x02", "1700000000000-3", 12, answers)
    assert decode_out(as_redis_returns(encode_out(entry))) == entry
    empty = OutEntry(b"", "0-1", 1)
    assert decode_out(as_redis_returns(encode_out(empty))) == empty


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {b"k": b"x", b"d": b"", b"h": b"h", b"s": b"1", b"a": b"a", b"w": b"w"},
        {b"k": b"u", b"d": b"", b"h": b"h", b"s": b"one", b"a": b"a", b"w": b"w"},
        {b"k": b"u", b"d": b"", b"h": b"\xff", b"s": b"1", b"a": b"a", b"w": b"w"},
    ],
)
def test_bad_in_entries_are_refused_with_a_code(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(StreamEntryError) as info:
        decode_in(fields)
    assert info.value.code == "bad_stream_entry"


def legacy_in(entry: InEntry) -> dict[bytes | str, bytes | str]:
    """``entry`` in the earlier layout, one field per part (a hub of the previous release)."""
    return {
        b"k": entry.kind.encode(),
        b"d": entry.data,
        b"h": entry.hub.encode(),
        b"s": str(entry.session).encode(),
        b"a": entry.agent.encode(),
        b"w": entry.scope.encode(),
    }


def legacy_out(entry: OutEntry) -> dict[bytes | str, bytes | str]:
    """``entry`` in the earlier layout, one field per part (a hub of the previous release)."""
    packed = bytearray()
    for answer in entry.answers:
        packed += encode_var_string(answer.hub)
        packed += encode_var_uint(answer.session)
        packed += encode_var_uint(int(answer.kind))
        packed += encode_var_bytes(answer.payload)
    return {
        b"u": entry.update,
        b"i": entry.last_in.encode(),
        b"f": str(entry.fence).encode(),
        b"r": bytes(packed),
    }


def test_entries_are_one_field() -> None:
    entry = InEntry("m", b"\x64", "hub-1", 7, "conn-7", "w")
    assert list(encode_in(entry)) == ["e"]
    assert list(encode_out(OutEntry(b"\x01", "1-0", 1))) == ["e"]


texts = st.text(max_size=12)
in_entries = st.builds(
    InEntry,
    kind=st.sampled_from(["u", "m"]),
    data=st.binary(max_size=64),
    hub=texts,
    session=st.integers(0, 2**53 - 1),
    agent=texts,
    scope=texts,
)
answers_st = st.builds(
    Answer,
    hub=texts,
    session=st.integers(0, 2**53 - 1),
    kind=st.sampled_from(list(AnswerKind)),
    payload=st.binary(max_size=32),
)
out_entries = st.builds(
    OutEntry,
    update=st.binary(max_size=64),
    last_in=st.from_regex(r"\A[0-9]{1,13}-[0-9]{1,4}\Z"),
    fence=st.integers(0, 2**53 - 1),
    answers=st.lists(answers_st, max_size=4).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(in_entries)
def test_packed_in_entries_read_as_the_earlier_layout(entry: InEntry) -> None:
    """The packed field decodes to what the earlier one-field-per-part layout gives."""
    packed = decode_in(as_redis_returns(encode_in(entry)))
    assert packed == decode_in(legacy_in(entry)) == entry


@settings(max_examples=300, deadline=None)
@given(out_entries)
def test_packed_out_entries_read_as_the_earlier_layout(entry: OutEntry) -> None:
    """The packed field decodes to what the earlier one-field-per-part layout gives."""
    assert decode_out(as_redis_returns(encode_out(entry))) == decode_out(legacy_out(entry))
    assert decode_out(encode_out(entry)) == entry  # str keys, as above


@settings(max_examples=300, deadline=None)
@given(in_entries, st.data())
def test_damaged_packed_in_entries_are_refused_or_read_whole(
    entry: InEntry, data: st.DataObject
) -> None:
    """Cut anywhere or with a byte changed, a packed entry is refused with the code, never
    read as something else with a different length of parts."""
    packed = encode_in(entry)["e"]
    assert isinstance(packed, bytes)
    cut = data.draw(st.integers(0, len(packed) - 1))
    try:
        got = decode_in({b"e": packed[:cut]})
    except StreamEntryError as exc:
        assert exc.code == "bad_stream_entry"
    else:  # only the data (the rest) may have been cut short
        assert got.data == entry.data[: len(got.data)]


def test_bad_packed_entries_are_refused() -> None:
    good_in = encode_in(InEntry("u", b"x", "h", 1, "a", "w"))["e"]
    good_out = encode_out(OutEntry(b"", "1-0", 1, (Answer("h", 1, AnswerKind.REPLY, b"x"),)))
    packed_out = good_out["e"]
    assert isinstance(good_in, bytes) and isinstance(packed_out, bytes)
    for bad in (b"", b"\x02" + good_in[1:], good_in[:1] + b"x" + good_in[2:], good_in[:3]):
        with pytest.raises(StreamEntryError):
            decode_in({b"e": bad})
    for bad in (b"", b"\x02" + packed_out[1:], packed_out[:-1], packed_out[:2]):
        with pytest.raises(StreamEntryError):
            decode_out({b"e": bad})


def test_bad_out_entries_are_refused() -> None:
    good = legacy_out(OutEntry(b"", "1-0", 1, (Answer("h", 1, AnswerKind.REPLY, b"x"),)))
    with pytest.raises(StreamEntryError):
        decode_out({**good, b"r": good[b"r"][:-1]})  # an answer cut short
    with pytest.raises(StreamEntryError):
        decode_out({**good, b"f": b"NaN"})
    with pytest.raises(StreamEntryError):
        decode_out({k: v for k, v in good.items() if k != b"i"})


async def test_only_the_lease_holder_publishes(redis: Redis) -> None:
    room = "streams/holder"
    lease, out = room_key(room, "owner"), room_key(room, "out")
    await redis.delete(lease, out)
    try:
        await redis.set(lease, "hub-a#1")
        fields = encode_out(OutEntry(b"u", "5-0", 3))
        first = await append_if_holder(redis, lease, "hub-a#1", out, fields, maxlen=100)
        assert first is not None
        assert await append_if_holder(redis, lease, "hub-b#2", out, fields, maxlen=100) is None
        await redis.delete(lease)  # expired, or lost with a Redis restart
        assert await append_if_holder(redis, lease, "hub-a#1", out, fields, maxlen=100) is None
        entries = await read_after(redis, out, "0-0", count=10, block_ms=10)
        assert [entry_id for entry_id, _ in entries] == [first]
        assert decode_out(entries[0][1]).last_in == "5-0"
    finally:
        await redis.delete(lease, out)


def test_the_judge_hook_refuses_a_stale_fence(postgres_dsn: str) -> None:
    room = "streams/fenced"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO crdt_rooms (room, fence, owner) VALUES (%s, 2, 'hub-b#2')", (room,)
        )
        with conn.transaction():
            fenced_position(conn, room, 2, "10-0")
        with pytest.raises(Fenced) as info, conn.transaction():
            fenced_position(conn, room, 1, "99-0")  # the deposed owner's commit
        assert (info.value.fence, info.value.current) == (1, 2)
        with conn.transaction():
            fenced_position(conn, room, 2, None)  # no new position: the stored one stays
        row = conn.execute(
            "SELECT fence, stream_position FROM crdt_rooms WHERE room = %s", (room,)
        ).fetchone()
        assert row == (2, "10-0")


async def test_deposing_ends_earlier_judges_of_the_room_in_this_database_only(
    postgres_dsn: str,
) -> None:
    """Two clusters on one PostgreSQL server (two databases) may share room names."""
    room = "streams/depose"
    admin = postgres_admin_dsn()
    other_dsn = await asyncio.to_thread(create_database, admin)
    try:
        ours: psycopg.Connection[TupleRow] = await asyncio.to_thread(
            psycopg.connect, judge_dsn(postgres_dsn, room, 1, 2.0)
        )
        theirs: psycopg.Connection[TupleRow] = await asyncio.to_thread(
            psycopg.connect, judge_dsn(other_dsn, room, 1, 2.0)
        )
        try:
            async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
                assert await depose(conn, room, 2) == 1  # our fence-1 judge, not theirs
                assert await depose(conn, room, 2) == 0
            assert theirs.execute("SELECT 1").fetchone() == (1,)  # the other cluster's lives
            with pytest.raises(psycopg.OperationalError):
                ours.execute("SELECT 1")
        finally:
            ours.close()
            theirs.close()
    finally:
        await asyncio.to_thread(drop_database, admin, other_dsn)


def test_judge_sessions_are_named_by_room_and_fence(postgres_dsn: str) -> None:
    dsn = judge_dsn(postgres_dsn, "streams/named", 4, 2.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.execute("SHOW application_name").fetchone()
        idle = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert name == (judge_name("streams/named", 4),)
    assert name is not None and name[0].startswith(judge_name("streams/named"))
    assert idle == ("1s",)


@given(st.text(min_size=1, max_size=30) | st.text(alphabet="{}%:ab/", min_size=1, max_size=12))
def test_stream_keys_as_bytes_are_the_room_keys(room: str) -> None:
    """The remembered bytes keys of the rooms' reads are the keys, and parse back."""
    for part in ("in", "out"):
        key = stream_key(room, part)
        assert key == room_key(room, part).encode()
        assert parse_room_key(key.decode()) == (room, part)


async def test_a_read_in_a_key_space_reads_that_clusters_streams_only(redis: Redis) -> None:
    """The same room in two clusters' spaces and the default one: three streams, each read
    by its own space (the remembered keys are the space's too)."""
    room = "streams/spaced"
    spaces = [KeySpace(), KeySpace("c1"), KeySpace("c2")]
    keys = [space.key(room, "out") for space in spaces]
    await redis.delete(*keys)
    try:
        for n, key in enumerate(keys):
            await redis.xadd(key, {"e": str(n)})
        link = Link(redis)
        try:
            for n, space in enumerate(spaces):
                assert stream_key(room, "out", space) == keys[n].encode()
                got = await read_rooms(
                    link, {room: "0-0"}, "out", count=10, block=0.01, space=space
                )
                assert [(name, [f[b"e"] for _, f in e]) for name, e in got] == [
                    (room, [str(n).encode()])
                ]
        finally:
            await link.aclose()
    finally:
        await redis.delete(*keys)


async def test_one_read_over_rooms_names_each_room_by_its_key(redis: Redis) -> None:
    rooms = ["streams/read a", "streams/{odd}%", "streams/\u00e9"]
    keys = [room_key(room, "out") for room in rooms]
    await redis.delete(*keys)
    try:
        for n, key in enumerate(keys):
            await redis.xadd(key, {"e": str(n)})
        link = Link(redis)
        try:
            got = await read_rooms(link, dict.fromkeys(rooms, "0-0"), "out", count=10, block=0.01)
        finally:
            await link.aclose()
        assert {name: [f[b"e"] for _, f in entries] for name, entries in got} == {
            room: [str(n).encode()] for n, room in enumerate(rooms)
        }
    finally:
        await redis.delete(*keys)
