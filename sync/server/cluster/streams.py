"""The entries of a room's two Redis streams, as a pure codec (no I/O).

``crdt:<cluster>:{room}:in`` (see :mod:`~sync.server.cluster.keys`) — written by every
hub, read by the room's owner only. One entry per write a hub received from one of its
sessions (:class:`InEntry`), in **one** field ``e`` (every field of a stream entry costs
the reader's Redis client a reply element to parse: an entry of six fields took ~48 µs to
read with redis-py, one of one field ~19), packed with lib0 encodings:

==============  ======================================================================
part            value
==============  ======================================================================
format          one byte, ``1``
kind            one byte: ``u`` (a plain Yjs update) or ``m`` (a merge request)
hub             varstring: the receiving hub's id (where the answer goes)
session         varuint: the session's id on that hub
agent           varstring: the session's label (the merge's agent when the request
                names none)
scope           varstring: the session's writer scope (request ids sent without a writer
                are scoped by it)
data            the rest: the update bytes, or the merge request message as received
                (``sync.wire``)
==============  ======================================================================

``crdt:<cluster>:{room}:out`` — written by the owner only, after the PostgreSQL commit
of what it carries; every hub serving the room follows it. One entry per judged batch
(:class:`OutEntry`), in one field ``e``:

==============  ======================================================================
part            value
==============  ======================================================================
format          one byte, ``1``
last in         varstring: the id of the last ``in`` entry of the batch (where a new
                owner resumes)
fence           varuint: the owner's fencing number
update          varbytes: the accepted changes as one Yjs update (empty when the batch
                wrote nothing)
answers         the rest (:class:`Answer`), packed: for each, varstring hub, varuint
                session, varuint kind (0 reply frame, 1 close), varbytes payload
==============  ======================================================================

Entries of the earlier layout, one Redis field per part (``in``: ``k d h s a w``;
``out``: ``u i f r``, the same values as text or bytes), are still read: a hub of the
previous release may be writing them during a rolling restart.

A hub applies the update to its replica (applying an update twice is harmless), then queues
each answer addressed to it for that session: a merge result frame, or the close of a
session whose update the owner refused (payload: the reason, UTF-8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

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
    "in_header",
]

UPDATE: Final = "u"
MERGE: Final = "m"

Fields = Mapping[Any, bytes | str]
"""A stream entry's fields as redis-py gives them: keys are ``bytes``, or ``str`` with
``decode_responses`` (``Any``: a ``Mapping`` is invariant in its key, and a dict typed
with either key type is a valid entry)."""


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


FORMAT: Final = 1
"""The packed layout's first byte."""
_FORMAT_BYTE: Final = bytes((FORMAT,))
_KIND_BYTES: Final = {UPDATE: b"u", MERGE: b"m"}
_KINDS: Final = {ord("u"): UPDATE, ord("m"): MERGE}


def encode_in(entry: InEntry) -> dict[str, bytes | str]:
    """The fields of ``entry`` for ``XADD``: one, ``e`` (see the module doc)."""
    header = in_header(entry.kind, entry.hub, entry.session, entry.agent, entry.scope)
    return {"e": header + entry.data}


def in_header(kind: str, hub: str, session: int, agent: str, scope: str) -> bytes:
    """The packed ``in`` entry's bytes before its data (see the module doc).

    The same for every write of one session of one kind: a hub forwarding a session's
    writes computes it once (:mod:`~sync.server.cluster.forwarding`); the entry is this
    followed by the data.

    Raises:
        ValueError: ``kind`` is neither ``UPDATE`` nor ``MERGE``.
    """
    kind_byte = _KIND_BYTES.get(kind)
    if kind_byte is None:
        raise ValueError(f"unknown in-entry kind {kind!r}")
    return b"".join(
        (
            _FORMAT_BYTE,
            kind_byte,
            encode_var_string(hub),
            encode_var_uint(session),
            encode_var_string(agent),
            encode_var_string(scope),
        )
    )


def _packed(fields: Fields) -> bytes | None:
    value = fields.get(b"e")
    if value is None:
        value = fields.get("e")
    return None if value is None else _bytes(value)


def decode_in(fields: Fields) -> InEntry:
    """The :class:`InEntry` of ``fields`` as ``XREAD`` returns them (either layout).

    Raises:
        StreamEntryError: a field is missing or malformed.
    """
    packed = _packed(fields)
    if packed is None:
        return _decode_in_fields(fields)
    try:
        if len(packed) < 2 or packed[0] != FORMAT:
            raise StreamEntryError(f"unknown in-entry format {packed[:1]!r}")
        kind = _KINDS.get(packed[1])
        if kind is None:
            raise StreamEntryError(f"unknown in-entry kind {packed[1:2]!r}")
        reader = Reader(packed)
        reader.read_bytes(2)
        return InEntry(
            kind=kind,
            hub=reader.read_var_string(),
            session=reader.read_var_uint(),
            agent=reader.read_var_string(),
            scope=reader.read_var_string(),
            data=reader.read_rest(),
        )
    except ProtocolError as exc:
        raise StreamEntryError(f"malformed in-entry: {exc}") from exc


def _decode_in_fields(fields: Fields) -> InEntry:
    """An entry of the earlier layout, one field per part."""
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
    """The fields of ``entry`` for ``XADD``: one, ``e`` (see the module doc)."""
    parts = [
        _FORMAT_BYTE,
        encode_var_string(entry.last_in),
        encode_var_uint(entry.fence),
        encode_var_bytes(entry.update),
    ]
    for answer in entry.answers:
        parts += (
            encode_var_string(answer.hub),
            encode_var_uint(answer.session),
            encode_var_uint(int(answer.kind)),
            encode_var_bytes(answer.payload),
        )
    return {"e": b"".join(parts)}


def _read_answers(reader: Reader) -> tuple[Answer, ...]:
    answers: list[Answer] = []
    while reader.remaining:
        hub = reader.read_var_string()
        session = reader.read_var_uint()
        kind = AnswerKind(reader.read_var_uint())
        answers.append(Answer(hub, session, kind, reader.read_var_bytes()))
    return tuple(answers)


def decode_out(fields: Fields) -> OutEntry:
    """The :class:`OutEntry` of ``fields`` as ``XREAD`` returns them (either layout).

    Raises:
        StreamEntryError: a field is missing or malformed.
    """
    packed = _packed(fields)
    try:
        if packed is None:
            return OutEntry(
                update=_bytes(_get(fields, "u")),
                last_in=_text(_get(fields, "i")),
                fence=int(_text(_get(fields, "f"))),
                answers=_read_answers(Reader(_bytes(_get(fields, "r")))),
            )
        if not packed or packed[0] != FORMAT:
            raise StreamEntryError(f"unknown out-entry format {packed[:1]!r}")
        reader = Reader(packed)
        reader.read_bytes(1)
        last_in = reader.read_var_string()
        fence = reader.read_var_uint()
        update = reader.read_var_bytes()
        return OutEntry(update, last_in, fence, _read_answers(reader))
    except (UnicodeDecodeError, ValueError, ProtocolError) as exc:
        if isinstance(exc, StreamEntryError):
            raise
        raise StreamEntryError(f"malformed out-entry: {exc}") from exc
