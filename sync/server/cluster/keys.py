"""Redis key names of the cluster, one key space per cluster, one hash tag per room (pure).

A :class:`KeySpace` names the keys of one cluster. The cluster's key space is read from
its PostgreSQL database (the id ``crdt_cluster`` holds, see
:mod:`~sync.server.cluster.schema`): every key of room ``r`` is then
``crdt:<cluster>:{<tag>}:<part>``, so two clusters that share a Redis server but keep
their rooms in different databases (staging and production, two apps) never see each
other's leases, streams or awareness, even for rooms of the same name. The default space
(:data:`DEFAULT_SPACE`, cluster id ``""``) names keys ``crdt:{<tag>}:<part>``, as before
key spaces existed: components built directly (tests, tools) use it unless given one.

``<tag>`` is ``r`` with ``%``, ``{`` and ``}`` percent-encoded. Redis Cluster hashes only
the text between the first ``{`` and the first ``}`` after it (a cluster id holds
neither), so all keys of a room land in one slot (a Lua script or a transaction may touch
several of them) whatever characters the room name has, and two rooms never share a tag.

Parts: :data:`OWNER` (the lease), ``in`` and ``out`` (the streams), ``awareness`` (a
pub/sub channel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "CLUSTER_ID",
    "DEFAULT_SPACE",
    "OWNER",
    "PREFIX",
    "KeySpace",
    "hash_tag",
    "parse_room_key",
    "room_key",
    "room_tag",
]

PREFIX: Final = "crdt"
OWNER: Final = "owner"
"""The part of the room's ownership lease: ``crdt:<cluster>:{room}:owner``."""

CLUSTER_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""What a cluster id may be: 1 to 64 letters, digits, ``_``, ``.``, ``-`` (no ``{``,
``}`` or ``:``, so neither a key's hash tag nor its parsing can be confused)."""

_ESCAPES: Final = {"%": "%25", "{": "%7B", "}": "%7D"}
_UNESCAPES: Final = {v: k for k, v in _ESCAPES.items()}


@dataclass(frozen=True)
class KeySpace:
    """The Redis keys of one cluster's rooms: ``crdt:<cluster>:{<tag>}:<part>``.

    ``cluster`` is the cluster's id (:data:`CLUSTER_ID`), or ``""`` for the default
    space, whose keys are ``crdt:{<tag>}:<part>``. ``ValueError`` for any other id.
    """

    cluster: str = ""
    head: str = field(init=False, repr=False, compare=False)
    """What every key of the space starts with: ``crdt:<cluster>:{`` (``crdt:{``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.cluster, str) or (
            self.cluster and not CLUSTER_ID.fullmatch(self.cluster)
        ):
            raise ValueError(f"invalid cluster id {self.cluster!r} (want {CLUSTER_ID.pattern})")
        head = f"{PREFIX}:{self.cluster}:{{" if self.cluster else f"{PREFIX}:{{"
        object.__setattr__(self, "head", head)

    def key(self, room: str, part: str) -> str:
        """The key of ``part`` (``"owner"``, ``"in"``, ...) of ``room`` in this space.

        ``part`` must be non-empty and free of ``{``, ``}`` (``ValueError`` otherwise, as
        for an empty room name).
        """
        if not part or "{" in part or "}" in part:
            raise ValueError(f"invalid key part {part!r}")
        return f"{self.head}{room_tag(room)}}}:{part}"

    def parse(self, key: str) -> tuple[str, str]:
        """The inverse of :meth:`key`: ``(room, part)``.

        ``ValueError`` for a key that is not a room key of this very space (another
        cluster's, the default space's in a cluster's space and the other way round).
        """
        head = self.head
        end = key.find("}", len(head))
        if not key.startswith(head) or end < 0 or key[end + 1 : end + 2] != ":":
            raise ValueError(f"not a room key of {self}: {key!r}")
        tag, part = key[len(head) : end], key[end + 2 :]
        if not tag or not part or "{" in tag or "{" in part or "}" in part:
            raise ValueError(f"not a room key of {self}: {key!r}")
        return _unescape(tag, key), part

    def __str__(self) -> str:
        return f"cluster {self.cluster!r}" if self.cluster else "the default key space"


DEFAULT_SPACE: Final = KeySpace()
"""The key space without a cluster id: ``crdt:{<tag>}:<part>``."""


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
    """The key of ``part`` of ``room`` in the default space: ``crdt:{<tag>}:<part>``.

    As :meth:`KeySpace.key` of :data:`DEFAULT_SPACE`.
    """
    return DEFAULT_SPACE.key(room, part)


def parse_room_key(key: str) -> tuple[str, str]:
    """The inverse of :func:`room_key`: ``(room, part)``; ``ValueError`` if not one of its keys."""
    return DEFAULT_SPACE.parse(key)


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
