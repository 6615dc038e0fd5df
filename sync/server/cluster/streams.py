"""The entries of a room's two Redis streams, as a pure codec (no I/O).

``crdt:{room}:in`` — written by every hub, read by the room's owner only. One entry per
write a hub received from one of its sessions (:class:`InEntry`):

======  ==============================================================================
field   value
======  ==============================================================================
``k``   ``u`` (a plain Yjs update) or ``m`` (a merge request)
``d``   the update bytes, or the merge request message as received (``sync.wire``)
``h``   the receiving hub's id (where the answer goes)
``s``   the session's id on that hub (decimal)
``a``   the session's label (the merge's agent when the request names none)
``w``   the session's writer scope (request ids sent without a writer are scoped by it)
======  ==============================================================================

``crdt:{room}:out`` — written by the owner only, after the PostgreSQL commit of what it
carries; every hub serving the room follows it. One entry per judged batch
(:class:`OutEntry`):

======  ==============================================================================
field   value
======  ==============================================================================
``u``   the accepted changes as one Yjs update (empty when the batch wrote nothing)
``i``   the id of the last ``in`` entry of the batch (where a new owner resumes)
``f``   the owner's fencing number (decimal)
``r``   the answers (:class:`Answer`), packed: for each, varstring hub, varuint
        session, varuint kind (0 reply frame, 1 close), varbytes payload
======  ==============================================================================

A hub applies ``u`` to its replica (applying an update twice is harmless), then queues
each answer addressed to it for that session: a merge result frame, or the close of a
session whose update the owner refused (payload: the reason, UTF-8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from sync.wire.errors import ProtocolError
from sync.wire.lib0 import Reader, encode_var_bytes, encode_var_string, encode_var_uint

__all__ = [
    "Answer",
    "AnswerKind",
    "InEntry",
    "OutEntry",
    "StreamEntryError",
    "decode_in",
    "decode_out",
    "encode_in",
    "encode_out",
]

UPDATE: Final = "u"
MERGE: Final = "m"

Fields = Mapping[bytes | str, bytes | str]


class StreamEntryError(ValueError):
    """A stream entry that this code cannot read (written by another version, or damaged).

    ``code`` is ``"bad_stream_entry"``; the owner skips such an entry and logs it.
    """

    code = "bad_stream_entry"


@dataclass(frozen=True, slots=True)
class InEntry:
    """A write received by hub ``hub`` from its session ``session``."""

    kind: str
    data: bytes
    hub: str
    session: int
    agent: str
    scope: str


class AnswerKind(IntEnum):
    """What an :class:`Answer` asks the session's hub to do with its ``payload``."""

    REPLY = 0
    """``payload`` is a merge result frame for the session."""
    CLOSE = 1
    """The owner refused the session's update: close it; ``payload`` is the reason."""


@dataclass(frozen=True, slots=True)
class Answer:
    """Something for session ``session`` of hub ``hub``."""

    hub: str
    session: int
    kind: AnswerKind
    payload: bytes


@dataclass(frozen=True, slots=True)
class OutEntry:
    """One judged batch: its accepted ``update``, its last ``in`` id, its ``answers``."""

    update: bytes
    last_in: str
    fence: int
    answers: Sequence[Answer] = field(default=())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _get(fields: Fields, name: str) -> bytes | str:
    value = fields.get(name.encode())
    if value is None:
        value = fields.get(name)
    if value is None:
        raise StreamEntryError(f"stream entry without field {name!r}")
    return value


def encode_in(entry: InEntry) -> dict[str, bytes | str]:
    """The fields of ``entry`` for ``XADD``."""
    if entry.kind not in (UPDATE, MERGE):
        raise ValueError(f"unknown in-entry kind {entry.kind!r}")
    return {
        "k": entry.kind,
        "d": entry.data,
        "h": entry.hub,
        "s": str(entry.session),
        "a": entry.agent,
        "w": entry.scope,
    }


def decode_in(fields: Fields) -> InEntry:
    """The :class:`InEntry` of ``fields`` as ``XREAD`` returns them.

    Raises:
        StreamEntryError: a field is missing or malformed.
    """
    try:
        kind = _text(_get(fields, "k"))
        if kind not in (UPDATE, MERGE):
            raise StreamEntryError(f"unknown in-entry kind {kind!r}")
        return InEntry(
            kind=kind,
            data=_bytes(_get(fields, "d")),
            hub=_text(_get(fields, "h")),
            session=int(_text(_get(fields, "s"))),
            agent=_text(_get(fields, "a")),
            scope=_text(_get(fields, "w")),
        )
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, StreamEntryError):
            raise
        raise StreamEntryError(f"malformed in-entry: {exc}") from exc


def encode_out(entry: OutEntry) -> dict[str, bytes | str]:
    """The fields of ``entry`` for ``XADD``."""
    packed = bytearray()
    for answer in entry.answers:
        packed += encode_var_string(answer.hub)
        packed += encode_var_uint(answer.session)
        packed += encode_var_uint(int(answer.kind))
        packed += encode_var_bytes(answer.payload)
    return {"u": entry.update, "i": entry.last_in, "f": str(entry.fence), "r": bytes(packed)}


def decode_out(fields: Fields) -> OutEntry:
    """The :class:`OutEntry` of ``fields`` as ``XREAD`` returns them.

    Raises:
        StreamEntryError: a field is missing or malformed.
    """
    try:
        packed = _bytes(_get(fields, "r"))
        reader = Reader(packed)
        answers: list[Answer] = []
        while reader.remaining:
            hub = reader.read_var_string()
            session = reader.read_var_uint()
            kind = AnswerKind(reader.read_var_uint())
            answers.append(Answer(hub, session, kind, reader.read_var_bytes()))
        return OutEntry(
            update=_bytes(_get(fields, "u")),
            last_in=_text(_get(fields, "i")),
            fence=int(_text(_get(fields, "f"))),
            answers=tuple(answers),
        )
    except (UnicodeDecodeError, ValueError, ProtocolError) as exc:
        if isinstance(exc, StreamEntryError):
            raise
        raise StreamEntryError(f"malformed out-entry: {exc}") from exc
