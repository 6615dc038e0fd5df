"""Redis key names: one hash tag per room, whatever the room's name (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from sync.server.cluster.keys import OWNER, hash_tag, parse_room_key, room_key, room_tag

rooms = st.text(min_size=1, max_size=40) | st.text(alphabet="{}%:ab/", min_size=1, max_size=20)
parts = st.sampled_from([OWNER, "in", "out", "awareness", "a:b"])


def test_owner_key_layout() -> None:
    assert room_key("triage/42", OWNER) == "crdt:{triage/42}:owner"
    assert hash_tag("crdt:{triage/42}:owner") == "triage/42"


@given(rooms, parts, parts)
def test_every_key_of_a_room_hashes_to_its_tag_and_one_slot(room: str, a: str, b: str) -> None:
    key_a, key_b = room_key(room, a), room_key(room, b)
    assert hash_tag(key_a) == hash_tag(key_b) == room_tag(room)
    assert key_slot(key_a.encode()) == key_slot(key_b.encode())


@given(rooms, rooms, parts)
def test_distinct_rooms_get_distinct_tags_and_keys_parse_back(a: str, b: str, part: str) -> None:
    assert parse_room_key(room_key(a, part)) == (a, part)
    if a != b:
        assert room_tag(a) != room_tag(b)


@pytest.mark.parametrize("room", ["", None, 3])
def test_a_room_without_a_name_is_refused(room: object) -> None:
    with pytest.raises(ValueError):
        room_tag(room)  # type: ignore[arg-type]


@pytest.mark.parametrize("part", ["", "a{b", "x}"])
def test_a_part_with_braces_is_refused(part: str) -> None:
    with pytest.raises(ValueError):
        room_key("r", part)


@pytest.mark.parametrize(
    "key", ["crdt:{}:owner", "other:{r}:owner", "crdt:{r}owner", "crdt:{r%7}:owner", "crdt:{r}:"]
)
def test_foreign_keys_do_not_parse(key: str) -> None:
    with pytest.raises(ValueError):
        parse_room_key(key)


@pytest.mark.parametrize(
    ("key", "tag"),
    [("a{b}c", "b"), ("a{}b{c}", None), ("a{b", None), ("{x}{y}", "x"), ("plain", None)],
)
def test_hash_tag_follows_the_redis_cluster_rule(key: str, tag: str | None) -> None:
    assert hash_tag(key) == tag


@given(rooms)
def test_the_plain_name_fast_paths_equal_the_general_escaping(room: str) -> None:
    """A name without ``%{}`` is its own tag, and a tag without ``%`` its own name: the
    fast paths give what escaping every character (and unescaping it) gives."""
    general = "".join({"%": "%25", "{": "%7B", "}": "%7D"}.get(ch, ch) for ch in room)
    assert room_tag(room) == general
    assert parse_room_key(f"crdt:{{{general}}}:in") == (room, "in")
