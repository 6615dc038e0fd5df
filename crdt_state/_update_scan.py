"""How deep a Yjs update can nest values, read from its bytes alone (pure logic).

A replica refuses an update from another replica that would store a value
deeper than :data:`~crdt_state.values.MAX_DEPTH` *before* applying it: a Yjs
document cannot take an update back. :func:`depth_bound` reads the structs of
a Yjs v1 update (without a document) and returns an upper bound of the depth
(in the sense of :func:`crdt_state.values.depth_of`) of every value the update
places under the root map ``root``:

- an item whose parent is the root map sits at level 1; an item whose parent
  (or, for an item that copies its parent from its neighbour, that neighbour)
  is in the update sits one level below that parent (at its neighbour's level);
- an item whose parent or neighbour is *not* in the update hangs from the
  existing document: it sits at most at ``unknown`` levels, the caller's
  bound of the depth of what it already holds;
- a nested type opens one more level; plain JSON-like content (``ContentAny``)
  adds its own nesting; items under other roots are not counted (the state
  lives in ``root`` only).

Malformed or unexpected bytes raise :class:`ValueError`; the caller then
falls back to an exact check on a copy of the document. Linear in the size of
the update, no recursion. The delete set (which adds nothing) is not read.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["Reader", "content_length", "depth_bound", "read_structs"]

_ORIGIN = 0x80
_RIGHT_ORIGIN = 0x40
_PARENT_SUB = 0x20
_XML_ELEMENT = 3
_XML_HOOK = 5


@dataclass(slots=True)
class _Item:
    """One struct of the update: its clock range, where it hangs, what it holds."""

    start: int
    end: int
    origin: tuple[int, int] | None = None
    right: tuple[int, int] | None = None
    root: str | None = None  # parent is a root type with this name
    parent: tuple[int, int] | None = None  # parent is the type item with this id
    opens: int = 0  # levels its content adds: 1 for a nested type, a value's nesting
    is_type: bool = False
    placed: bool = True  # False for GC and Skip structs (no parent known)
    skip: bool = False  # a Skip: clocks this update does not carry (a gap in it)


class Reader:
    """A cursor over an update's bytes: lib0 varuints and strings; ValueError past the end."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        pos = self.pos
        if pos >= len(self.data):
            raise ValueError("truncated update")
        self.pos = pos + 1
        return self.data[pos]

    def uint(self) -> int:
        data, pos = self.data, self.pos
        if pos >= len(data):
            raise ValueError("truncated update")
        byte = data[pos]
        if byte < 0x80:  # most varuints are one byte
            self.pos = pos + 1
            return byte
        value = byte & 0x7F
        shift = 7
        while True:
            pos += 1
            if pos >= len(data) or shift > 70:
                raise ValueError("truncated or over-long varuint")
            byte = data[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos + 1
                return value
            shift += 7

    def skip(self, count: int) -> None:
        if self.pos + count > len(self.data):
            raise ValueError("truncated update")
        self.pos += count

    def raw(self) -> bytes:
        count = self.uint()
        start = self.pos
        end = start + count
        if end > len(self.data):
            raise ValueError("truncated update")
        self.pos = end
        return self.data[start:end]

    def skip_varint(self) -> None:
        while self.byte() >= 0x80:
            pass


def depth_bound(update: bytes, *, root: str, unknown: int, limit: int | None = None) -> int:
    """An upper bound of the depth of every value ``update`` writes under the root map ``root``.

    ``unknown`` bounds the depth of every value already in the document (what
    items hanging from it can reach). With ``limit``, a cheaper, looser bound
    is returned when it is already within ``limit`` (each nested type in the
    update can add at most one level); otherwise, and without ``limit``, each
    item's place is followed through its parents and neighbours. Raises
    :class:`ValueError` for bytes that cannot be read as a Yjs v1 update. 0
    when the update writes nothing under ``root``.
    """
    items, types, plain = read_structs(Reader(update))
    base = max(unknown, 1)
    if limit is not None and base + types + plain <= limit:
        return base + types + plain
    index: dict[int, tuple[list[int], list[_Item]]] = {}
    for client, found in items.items():
        found.sort(key=lambda item: item.start)
        index[client] = ([item.start for item in found], found)
    levels: dict[int, int | None] = {}  # id(item) -> level (None: under another root)
    deepest = 0
    for found in items.values():
        for item in found:
            if not item.placed:
                continue
            level = _level(item, index, levels, root, base)
            if level is not None and level + item.opens > deepest:
                deepest = level + item.opens
    return deepest


def _find(index: dict[int, tuple[list[int], list[_Item]]], ref: tuple[int, int]) -> _Item | None:
    """The struct of the update holding clock ``ref``, or None (it is in the document)."""
    client, clock = ref
    known = index.get(client)
    if known is None:
        return None
    starts, found = known
    at = bisect.bisect_right(starts, clock) - 1
    if at < 0:
        return None
    item = found[at]
    if clock < item.end:
        return item
    if at + 1 < len(found) or clock < found[-1].end:
        raise ValueError("an id points between the structs of the update")
    return None


def _level(
    item: _Item,
    index: dict[int, tuple[list[int], list[_Item]]],
    levels: dict[int, int | None],
    root: str,
    unknown: int,
) -> int | None:
    """The level ``item`` sits at (None under another root), following links iteratively."""
    chain: list[tuple[_Item, int]] = []  # (item, levels it adds to what it hangs from)
    seen: set[int] = set()
    node: _Item | None = item
    base: int | None
    while True:
        assert node is not None
        key = id(node)
        if key in levels:
            base = levels[key]
            break
        if key in seen:
            raise ValueError("the structs of the update form a cycle")
        seen.add(key)
        if not node.placed:
            base = unknown
            break
        if node.root is not None:
            chain.append((node, 1))
            base = 0 if node.root == root else None
            break
        if node.parent is not None:
            parent = _find(index, node.parent)
            if parent is not None and parent.placed and not parent.is_type:
                raise ValueError("an item's parent is not a type")
            chain.append((node, 1))
            if parent is None or not parent.placed:
                base = unknown - 1  # a child of a type the document holds: at most `unknown`
                break
            node = parent
            continue
        ref = node.origin if node.origin is not None else node.right
        if ref is None:
            raise ValueError("an item has neither parent nor neighbour")
        neighbour = _find(index, ref)
        chain.append((node, 0))
        if neighbour is None or not neighbour.placed:
            base = unknown  # a neighbour the document holds sits at most at `unknown`
            break
        node = neighbour
    for member, step in reversed(chain):
        if base is not None:
            base += step
        levels[id(member)] = base
    return levels[id(item)]


def read_structs(reader: Reader) -> tuple[dict[int, list[_Item]], int, int]:
    """The structs by client, how many nested types they hold, and the deepest plain value."""
    items: dict[int, list[_Item]] = {}
    types = plain = 0
    for _ in range(reader.uint()):
        count = reader.uint()
        client = reader.uint()
        clock = reader.uint()
        found = items.setdefault(client, [])
        for _ in range(count):
            info = reader.byte()
            ref = info & 0x1F
            if ref in (0, 10):  # GC, Skip: clocks whose struct is gone, or not in this update
                length = reader.uint()
                if length < 1:
                    raise ValueError("an empty struct")
                found.append(_Item(clock, clock + length, placed=False, skip=ref == 10))
                clock += length
                continue
            item = _Item(clock, clock)
            if info & _ORIGIN:
                item.origin = (reader.uint(), reader.uint())
            if info & _RIGHT_ORIGIN:
                item.right = (reader.uint(), reader.uint())
            if not info & (_ORIGIN | _RIGHT_ORIGIN):
                if reader.uint() == 1:
                    item.root = reader.raw().decode("utf-8")
                else:
                    item.parent = (reader.uint(), reader.uint())
                if info & _PARENT_SUB:
                    reader.raw()
            length = _content(reader, ref, item)
            if length < 1:
                raise ValueError("an empty struct")
            if item.is_type:
                types += 1
            elif item.opens > plain:
                plain = item.opens
            item.end = clock + length
            clock = item.end
            found.append(item)
    return items, types, plain


def content_length(reader: Reader, ref: int) -> int:
    """Read past a struct's content of kind ``ref`` (not GC or Skip); its length in clocks."""
    return _content(reader, ref, _Item(0, 0))


def _content(reader: Reader, ref: int, item: _Item) -> int:
    """Read the content of kind ``ref`` into ``item``; returns its length in clocks."""
    if ref == 1:  # deleted
        return reader.uint()
    if ref == 2:  # JSON (legacy): strings of JSON text
        count = reader.uint()
        for _ in range(count):
            item.opens = max(item.opens, _json_nesting(reader.raw()))
        return count
    if ref == 3:  # binary
        reader.raw()
        return 1
    if ref == 4:  # string: its length in UTF-16 code units, as Yjs counts
        return len(reader.raw().decode("utf-8").encode("utf-16-le")) // 2
    if ref == 5:  # embed
        item.opens = _json_nesting(reader.raw())
        return 1
    if ref == 6:  # format
        reader.raw()
        item.opens = _json_nesting(reader.raw())
        return 1
    if ref == 7:  # a nested type
        kind = reader.uint()
        if kind in (_XML_ELEMENT, _XML_HOOK):
            reader.raw()
        item.is_type = True
        item.opens = 1
        return 1
    if ref == 8:  # any: plain values
        count = reader.uint()
        item.opens = _any_nesting(reader, count)
        return count
    if ref == 9:  # a sub-document: its guid and options
        reader.raw()
        _any_nesting(reader, 1)
        return 1
    raise ValueError(f"unknown content kind {ref}")


_FIXED = {120: 0, 121: 0, 126: 0, 127: 0, 124: 4, 123: 8, 122: 8}  # tag -> bytes that follow


def _any_nesting(reader: Reader, count: int) -> int:
    """Read ``count`` lib0 ``any`` values; their deepest nesting of maps and lists."""
    if count == 1:  # one scalar: the common case of a map entry
        data, pos = reader.data, reader.pos
        tag = data[pos] if pos < len(data) else -1
        if tag in _FIXED:
            reader.pos = pos + 1
            reader.skip(_FIXED[tag])
            return 0
        if tag == 119:
            reader.pos = pos + 1
            reader.raw()
            return 0
    deepest = 0
    stack: list[list[int]] = [[count, 0, 0]]  # [values left, is a map, level]
    while stack:
        frame = stack[-1]
        if frame[0] == 0:
            stack.pop()
            continue
        frame[0] -= 1
        if frame[1]:
            reader.raw()  # the key
        tag = reader.byte()
        if tag in (117, 118):  # array, object
            level = frame[2] + 1
            deepest = max(deepest, level)
            stack.append([reader.uint(), int(tag == 118), level])
        elif tag == 119 or tag == 116:  # string, bytes
            reader.raw()
        elif tag == 125:  # varint
            reader.skip_varint()
        elif tag == 124:  # float32
            reader.skip(4)
        elif tag in (123, 122):  # float64, bigint64
            reader.skip(8)
        elif tag not in (120, 121, 126, 127):  # true, false, null, undefined
            raise ValueError(f"unknown value tag {tag}")
    return deepest


def _json_nesting(text: bytes) -> int:
    """The deepest bracket nesting of JSON text (brackets inside strings ignored)."""
    deepest = level = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == 0x5C:  # backslash
                escaped = True
            elif char == 0x22:
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in (0x5B, 0x7B):
            level += 1
            deepest = max(deepest, level)
        elif char in (0x5D, 0x7D):
            level -= 1
    return deepest
