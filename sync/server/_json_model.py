"""Which Yjs content a plain update may carry into a room: the JSON model only (pure logic).

A room's state is JSON: maps (``Y.Map``), lists (``Y.Array``) and JSON values
(``ContentAny``: null, booleans, numbers, strings, and plain objects/arrays
inside them). A stock Yjs client can write anything into the document,
though: a ``Y.Text``, XML types, formatting marks, embeds, binary blobs,
sub-documents. Applied, these would make ``snapshot()`` something other than
plain JSON, and a Yjs document cannot take an update back, so the hub reads
the update's structs first (Yjs update format v1, without a document) and
refuses the whole update if any of them holds such content.

==================  =============================================  ========
Yjs content         what it is                                     accepted
==================  =============================================  ========
``ContentType`` 0   ``Y.Array`` (a JSON list)                      yes
``ContentType`` 1   ``Y.Map`` (a JSON object)                      yes
``ContentAny``      JSON values (in a map entry or list)            yes
``ContentJSON``     legacy JSON values                              yes
``ContentDeleted``  deleted items, ``GC`` and ``Skip`` structs       yes
``ContentType`` 2   ``Y.Text``                                     no
``ContentType`` 3-6 ``Y.XmlElement``, ``Y.XmlFragment``,             no
                    ``Y.XmlHook``, ``Y.XmlText``
``ContentString``   the characters of a text                        no
``ContentEmbed``    an embed in a text                              no
``ContentFormat``   a formatting mark in a text                     no
``ContentBinary``   a ``Uint8Array`` value                          no
``ContentDoc``      a sub-document                                  no
==================  =============================================  ========

Bytes this reader cannot parse are left to the document (pycrdt refuses
what is malformed); only well-formed structs are judged here.
"""

from __future__ import annotations

from typing import Final

from sync.wire.errors import ProtocolError
from sync.wire.lib0 import Reader

__all__ = ["NON_JSON_TYPE", "non_json_content"]

NON_JSON_TYPE: Final = "non_json_type"
"""The code of the refusal of an update writing content outside the JSON model."""

_ORIGIN: Final = 0x80
_RIGHT_ORIGIN: Final = 0x40
_PARENT_SUB: Final = 0x20
_TYPE_NAMES: Final = {
    2: "a Y.Text",
    3: "a Y.XmlElement",
    4: "a Y.XmlFragment",
    5: "a Y.XmlHook",
    6: "a Y.XmlText",
}
_REFUSED_CONTENT: Final = {
    3: "binary content (Uint8Array)",
    4: "text content (Y.Text characters)",
    5: "an embed (Y.Text)",
    6: "a format mark (Y.Text)",
    9: "a sub-document (Y.Doc)",
}
_XML_ELEMENT: Final = 3
_XML_HOOK: Final = 5


def non_json_content(update: bytes) -> str | None:
    """What in ``update`` lies outside the JSON model (``"a Y.Text"``, ...), or ``None``.

    ``None`` too for bytes that are not a well-formed Yjs v1 update: the document
    judges those when it applies them.
    """
    try:
        return _scan(Reader(update))
    except (ProtocolError, ValueError, IndexError):
        return None


def _scan(reader: Reader) -> str | None:
    for _ in range(reader.read_var_uint()):  # one run of structs per client
        structs = reader.read_var_uint()
        reader.read_var_uint()  # client
        reader.read_var_uint()  # clock of the first struct
        for _ in range(structs):
            found = _struct(reader)
            if found is not None:
                return found
    return None


def _struct(reader: Reader) -> str | None:
    info = reader.read_bytes(1)[0]
    ref = info & 0x1F
    if ref in (0, 10):  # GC, Skip: a length
        reader.read_var_uint()
        return None
    if info & _ORIGIN:
        reader.read_var_uint()
        reader.read_var_uint()
    if info & _RIGHT_ORIGIN:
        reader.read_var_uint()
        reader.read_var_uint()
    if not info & (_ORIGIN | _RIGHT_ORIGIN):
        if reader.read_var_uint() == 1:  # parent is a root type, by name
            reader.read_var_string()
        else:  # parent is an item, by id
            reader.read_var_uint()
            reader.read_var_uint()
        if info & _PARENT_SUB:
            reader.read_var_string()
    return _content(reader, ref)


def _content(reader: Reader, ref: int) -> str | None:
    if ref in _REFUSED_CONTENT:
        return _REFUSED_CONTENT[ref]
    if ref == 1:  # deleted: a length
        reader.read_var_uint()
    elif ref == 2:  # JSON: strings
        for _ in range(reader.read_var_uint()):
            reader.read_var_string()
    elif ref == 7:  # a nested type
        type_ref = reader.read_var_uint()
        if type_ref in _TYPE_NAMES:
            return _TYPE_NAMES[type_ref]
        if type_ref not in (0, 1):
            return f"an unknown Yjs type ({type_ref})"
    elif ref == 8:  # any: values
        for _ in range(reader.read_var_uint()):
            _skip_any(reader)
    else:
        return f"unknown Yjs content ({ref})"
    return None


def _skip_any(reader: Reader) -> None:
    """Read past one lib0 ``any`` value (iteratively: no recursion on nested values)."""
    pending = 1
    while pending:
        pending -= 1
        tag = reader.read_bytes(1)[0]
        if tag in (127, 126, 121, 120):  # undefined, null, false, true
            continue
        if tag == 125:  # varint: 7 bits a byte after the first
            while reader.read_bytes(1)[0] & 0x80:
                pass
        elif tag == 124:
            reader.read_bytes(4)
        elif tag in (123, 122):
            reader.read_bytes(8)
        elif tag in (119, 116):  # string, Uint8Array
            reader.read_var_bytes()
        elif tag == 118:  # object: key and value pairs
            entries = reader.read_var_uint()
            for _ in range(entries):
                reader.read_var_string()
            pending += entries
        elif tag == 117:  # array
            pending += reader.read_var_uint()
        else:
            raise ValueError(f"unknown lib0 any tag {tag}")
