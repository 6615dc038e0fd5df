"""Redis key names: one key space per cluster, one hash tag per room, whatever the room's
name (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from sync.server.cluster.keys import (
    DEFAULT_SPACE,
    OWNER,
    KeySpace,
    hash_tag,
    parse_room_key,
    room_key,
    room_tag,
)

rooms = st.text(min_size=1, max_size=40) | st.text(alphabet="{}%:ab/", min_size=1, max_size=20)
parts = st.sampled_from([OWNER, "in", "out", "awareness", "a:b"])
cluster_ids = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-",
    min_size=1,
    max_size=64,
)


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


def test_the_default_space_names_keys_as_before_key_spaces() -> None:
    assert KeySpace() == DEFAULT_SPACE and DEFAULT_SPACE.cluster == ""
    for part in (OWNER, "in", "out", "awareness"):
        assert DEFAULT_SPACE.key("triage/42", part) == f"crdt:{{triage/42}}:{part}"
        assert DEFAULT_SPACE.key("triage/42", part) == room_key("triage/42", part)
    assert DEFAULT_SPACE.parse("crdt:{triage/42}:in") == ("triage/42", "in")


def test_a_cluster_space_puts_its_id_before_the_rooms_tag() -> None:
    space = KeySpace("0f3a9c2b71d84e65")
    assert space.key("main", OWNER) == "crdt:0f3a9c2b71d84e65:{main}:owner"
    assert space.key("a{b}", "in") == "crdt:0f3a9c2b71d84e65:{a%7Bb%7D}:in"
    assert hash_tag(space.key("main", OWNER)) == "main"
    assert space.parse("crdt:0f3a9c2b71d84e65:{main}:awareness") == ("main", "awareness")


@given(cluster_ids, rooms, parts, parts)
def test_a_cluster_spaces_keys_hash_like_the_default_spaces(
    cluster: str, room: str, a: str, b: str
) -> None:
    """The room's tag is the hash tag in every space: a room stays in one slot, the same."""
    space = KeySpace(cluster)
    key_a, key_b = space.key(room, a), space.key(room, b)
    assert hash_tag(key_a) == hash_tag(key_b) == room_tag(room)
    assert key_slot(key_a.encode()) == key_slot(room_key(room, b).encode())
    assert space.parse(key_a) == (room, a)


@given(cluster_ids, cluster_ids, rooms, parts)
def test_a_space_parses_only_its_own_keys(mine: str, theirs: str, room: str, part: str) -> None:
    space, other = KeySpace(mine), KeySpace(theirs)
    for foreign in (other, DEFAULT_SPACE) if mine != theirs else (DEFAULT_SPACE,):
        with pytest.raises(ValueError):
            space.parse(foreign.key(room, part))
        with pytest.raises(ValueError):
            foreign.parse(space.key(room, part))


@pytest.mark.parametrize(
    "cluster", ["a:b", "{x}", "a}", "a{", "has space", "x" * 65, "\u00e9t\u00e9", None, 7]
)
def test_a_cluster_id_that_could_confuse_keys_is_refused(cluster: object) -> None:
    with pytest.raises(ValueError):
        KeySpace(cluster)  # type: ignore[arg-type]
