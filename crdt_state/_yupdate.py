"""Hand-built Yjs updates that write a whole list (or map) as a few blocks (pure logic).

pycrdt 0.14 inserts list items one at a time and every insert walks the array
from its start, so writing ``n`` items costs O(n^2) (16,000 items: ~10 s).
Yjs itself writes ``array.insert(i, [a, b, c])`` as *one* item whose
``ContentAny`` holds all the plain values; an update carrying such an item is
integrated in O(n). :class:`UpdateWriter` encodes exactly the items pycrdt
would end up with after squashing (one item per run of plain values, one
``ContentType`` item per nested ``Y.Map``/``Y.Array`` followed by its content,
depth-first), so a document written this way is byte-identical to one written
through pycrdt's own API.

The encoding is Yjs update format v1 (the one of ``Y.encodeStateAsUpdate``)::

    update  = varuint(1) varuint(#structs) varuint(client) varuint(first clock)
              struct* delete-set(varuint(0))
    struct  = info:u8 [origin: varuint client, varuint clock]
              [parent, when no origin: varuint(0) varuint client varuint clock
               [parent key: varstring]] content
    info    = content ref (8 = ContentAny, 7 = ContentType) | 0x80 origin present
              | 0x20 parent key present
    any     = 0x7e null | 0x78 true | 0x79 false | 0x77 varstring
              | 0x7c float32 | 0x7b float64 | 0x7a int64 (big-endian)

Numbers follow pycrdt's own conversion: an ``int`` that is exact as a double
is a double, any other ``int`` an int64 (Yjs' ``bigint``); a double that is
exact as a float32 is written as float32 (as yrs does).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from .errors import UnsupportedValue
from .version import encode_varuint

__all__ = ["ItemId", "UpdateWriter", "YARRAY", "YMAP"]

ItemId = tuple[int, int]
"""A Yjs item id: ``(client, clock)``."""

YARRAY: Final = 0
"""Type ref of ``Y.Array`` in ``ContentType``."""
YMAP: Final = 1
"""Type ref of ``Y.Map`` in ``ContentType``."""

_CONTENT_TYPE: Final = 7
_CONTENT_ANY: Final = 8
_HAS_ORIGIN: Final = 0x80
_HAS_KEY: Final = 0x20

_F32: Final = struct.Struct(">f")
_F64: Final = struct.Struct(">d")
_I64: Final = struct.Struct(">q")


class UpdateWriter:
    """Builds one Yjs v1 update holding new items of one client, clock after clock.

    Args:
        client: the writing document's client id.
        clock: the document's next clock for ``client`` (its state vector entry);
            the first item written gets this clock.

    Write with :meth:`sequence` (list items after an origin or at the start of a
    list) and :meth:`fill` (the content of a fresh, empty map or list), then take
    :meth:`update`. Nothing is integrated here: the caller applies the bytes to
    the document whose client and clock were given, and :attr:`clock` is then
    that document's next clock. Values must be normalised plain data
    (:func:`crdt_state.values.normalize`); a ``str`` that is not valid Unicode
    raises :class:`UnsupportedValue` before anything is written. Linear in the
    size of the values.
    """

    def __init__(self, client: int, clock: int) -> None:
        self.client = client
        self.start = clock
        self.clock = clock
        """The clock the next item gets (after :meth:`update`: the document's next clock)."""
        self._body = bytearray()
        self._structs = 0
        self._client = _varuint(client)
        self._keys: dict[str, bytes] = {}

    @property
    def empty(self) -> bool:
        """True when nothing has been written."""
        return self._structs == 0

    def update(self) -> bytes:
        """The update bytes (one client's structs and an empty delete set)."""
        head = bytearray([1])
        encode_varuint(self._structs, head)
        head += self._client
        encode_varuint(self.start, head)
        head += self._body
        head.append(0)
        return bytes(head)

    # -- items --------------------------------------------------------------------
    def sequence(
        self, values: list[Any], *, origin: ItemId | None = None, parent: ItemId | None = None
    ) -> ItemId | None:
        """Write ``values`` as list items, after ``origin`` or first in list ``parent``.

        Exactly one of ``origin`` (the id of the item the values follow) and
        ``parent`` (the id of the list's own item, for values that start an
        empty list) is given. Returns the id of the last item written (``origin``
        when ``values`` is empty).
        """
        if (origin is None) == (parent is None):
            raise ValueError("give exactly one of origin and parent")
        body = self._body
        left = origin
        start = 0
        count = len(values)
        while start < count:
            # the item's position: after ``left``, or first in ``parent``
            if left is None:
                assert parent is not None
                head = self._parent_info(parent)
            else:
                head = self._id(left)
            value = values[start]
            if isinstance(value, (dict, list)):
                body.append(_CONTENT_TYPE | (_HAS_ORIGIN if left is not None else 0))
                body += head
                left = self._container(value)
                start += 1
                continue
            end = start + 1
            while end < count and not isinstance(values[end], (dict, list)):
                end += 1
            body.append(_CONTENT_ANY | (_HAS_ORIGIN if left is not None else 0))
            body += head
            _put_varuint(end - start, body)
            for i in range(start, end):
                _write_any(values[i], body)
            self.clock += end - start
            self._structs += 1
            left = (self.client, self.clock - 1)
            start = end
        return left

    def fill(self, value: dict[str, Any] | list[Any], container: ItemId) -> None:
        """Write the content of the fresh, empty map or list whose item is ``container``."""
        if isinstance(value, list):
            if value:
                self.sequence(value, parent=container)
            return
        body = self._body
        parent = self._parent_info(container)
        keys = self._keys
        for key, item in value.items():
            name = keys.get(key)
            if name is None:
                name = keys[key] = _string(key)
            if isinstance(item, (dict, list)):
                body.append(_CONTENT_TYPE | _HAS_KEY)
                body += parent
                body += name
                self._container(item)
            else:
                body.append(_CONTENT_ANY | _HAS_KEY)
                body += parent
                body += name
                body.append(1)
                _write_any(item, body)
                self.clock += 1
                self._structs += 1

    def _container(self, value: dict[str, Any] | list[Any]) -> ItemId:
        """Finish a ``ContentType`` item (header written) and write its content after it."""
        self._body.append(YMAP if isinstance(value, dict) else YARRAY)
        own = (self.client, self.clock)
        self.clock += 1
        self._structs += 1
        if value:
            self.fill(value, own)
        return own

    def _id(self, item: ItemId) -> bytes:
        client = self._client if item[0] == self.client else _varuint(item[0])
        return client + _varuint(item[1])

    def _parent_info(self, parent: ItemId) -> bytes:
        """A parent given by its item id (``0``, not a root name), then the id."""
        return b"\x00" + self._id(parent)


_SMALL: Final = [bytes((i,)) for i in range(0x80)]


def _varuint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    if value < 0x4000:
        return bytes((0x80 | (value & 0x7F), value >> 7))
    if value < 0x200000:
        return bytes((0x80 | (value & 0x7F), 0x80 | ((value >> 7) & 0x7F), value >> 14))
    out = bytearray()
    encode_varuint(value, out)
    return bytes(out)


def _put_varuint(value: int, out: bytearray) -> None:
    if value < 0x80:
        out.append(value)
    else:
        encode_varuint(value, out)


def _string(text: str) -> bytes:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsupportedValue(
            "strings must be valid Unicode (no lone surrogates)",
            details={"value": text[:200]},
        ) from exc
    return _varuint(len(data)) + data


_F32_EXACT: Final = 2**24  # every int of at most this magnitude is exact as a float32


def _write_any(value: Any, out: bytearray) -> None:
    """Append one plain scalar in lib0 ``any`` encoding, as yrs writes it."""
    kind = type(value)
    if kind is int:
        if -_F32_EXACT <= value <= _F32_EXACT:
            out.append(0x7C)
            out += _F32.pack(value)
        elif float(value) == value:
            _write_number(float(value), out)
        else:
            out.append(0x7A)
            out += _I64.pack(value)
    elif kind is str:
        out.append(0x77)
        out += _string(value)
    elif kind is float:
        _write_number(value, out)
    elif value is None:
        out.append(0x7E)
    elif value is True:
        out.append(0x78)
    elif value is False:
        out.append(0x79)
    elif isinstance(value, int):  # subclasses (enums) as the plain value they hold
        _write_any(int(value), out)
    elif isinstance(value, str):
        _write_any(str.__str__(value), out)
    elif isinstance(value, float):
        _write_any(float.__float__(value), out)
    else:
        raise UnsupportedValue(
            f"{kind.__name__} is not a plain scalar",
            details={"type": kind.__name__},
        )


def _write_number(value: float, out: bytearray) -> None:
    try:
        packed = _F32.pack(value)
    except OverflowError:
        packed = b""
    if packed and _F32.unpack(packed)[0] == value:
        out.append(0x7C)
        out += packed
    else:
        out.append(0x7B)
        out += _F64.pack(value)
