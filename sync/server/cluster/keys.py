"""Redis key names of the cluster, one hash tag per room (pure, no I/O).

Every key of room ``r`` looks like ``crdt:{<tag>}:<part>``, where ``<tag>`` is ``r`` with
``%``, ``{`` and ``}`` percent-encoded. Redis Cluster hashes only the text between the
first ``{`` and the first ``}`` after it, so all keys of a room land in one slot (a Lua
script or a transaction may touch several of them) whatever characters the room name
has, and two rooms never share a tag.

Parts used so far: :data:`OWNER` (the lease). The streams and the awareness channel of
the later cluster work take their names from here too.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OWNER", "PREFIX", "hash_tag", "parse_room_key", "room_key", "room_tag"]

PREFIX: Final = "crdt"
OWNER: Final = "owner"
"""The part of the room's ownership lease: ``crdt:{room}:owner``."""

_ESCAPES: Final = {"%": "%25", "{": "%7B", "}": "%7D"}
_UNESCAPES: Final = {v: k for k, v in _ESCAPES.items()}


def room_tag(room: str) -> str:
    """The hash tag of ``room``: the name with ``%``, ``{``, ``}`` percent-encoded.

    Raises ``ValueError`` for an empty name (``{}`` is no hash tag: Redis would hash the
    whole key, and the room's keys would scatter over slots).
    """
    if not isinstance(room, str) or not room:
        raise ValueError(f"a room name must be a non-empty string, got {room!r}")
    if "%" not in room and "{" not in room and "}" not in room:  # the usual name: as is
        return room
    return "".join(_ESCAPES.get(ch, ch) for ch in room)


def room_key(room: str, part: str) -> str:
    """The Redis key of ``part`` (``"owner"``, ...) of ``room``: ``crdt:{<tag>}:<part>``.

    ``part`` must be non-empty and free of ``{``, ``}`` (``ValueError`` otherwise).
    """
    if not part or "{" in part or "}" in part:
        raise ValueError(f"invalid key part {part!r}")
    return f"{PREFIX}:{{{room_tag(room)}}}:{part}"


def parse_room_key(key: str) -> tuple[str, str]:
    """The inverse of :func:`room_key`: ``(room, part)``; ``ValueError`` if not one of ours."""
    head = PREFIX + ":{"
    end = key.find("}", len(head))
    if not key.startswith(head) or end < 0 or key[end + 1 : end + 2] != ":":
        raise ValueError(f"not a crdt-state room key: {key!r}")
    tag, part = key[len(head) : end], key[end + 2 :]
    if not tag or not part or "{" in tag or "{" in part or "}" in part:
        raise ValueError(f"not a crdt-state room key: {key!r}")
    return _unescape(tag, key), part


def hash_tag(key: str) -> str | None:
    """What Redis Cluster hashes of ``key`` when it has a hash tag, else ``None``.

    The rule: the text between the first ``{`` and the first ``}`` after it, if non-empty.
    """
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end < 0 or end == start + 1:
        return None
    return key[start + 1 : end]


def _unescape(tag: str, key: str) -> str:
    if "%" not in tag:  # the usual tag: nothing escaped
        return tag
    out: list[str] = []
    i = 0
    while i < len(tag):
        if tag[i] == "%":
            ch = _UNESCAPES.get(tag[i : i + 3])
            if ch is None:
                raise ValueError(f"bad escape in room key: {key!r}")
            out.append(ch)
            i += 3
        else:
            out.append(tag[i])
            i += 1
    return "".join(out)
