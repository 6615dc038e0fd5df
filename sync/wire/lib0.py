"""lib0 binary primitives used by y-protocols: varuint, varbytes and varstring.

Wire format (the same as lib0's ``encoding``/``decoding`` modules in JavaScript):

* **varuint** -- an unsigned integer in little-endian groups of 7 bits, one group per byte,
  the high bit set on every byte but the last. ``300`` is ``ac 02``.
* **varbytes** -- a varuint length followed by that many raw bytes.
* **varstring** -- varbytes holding the UTF-8 encoding of the string (the length counts
  bytes, not characters).

The :class:`Reader` is strict where lib0 is lenient: it refuses varuints above
:data:`MAX_VAR_UINT` (JavaScript's ``Number.MAX_SAFE_INTEGER``, also pycrdt's client-id
limit), non-canonical varuints (a superfluous trailing ``00`` group), lengths that run past
the end of the input, and invalid UTF-8. Every failure is a
:class:`~sync.wire.errors.ProtocolError`;
nothing else escapes a read.
"""

from __future__ import annotations

from typing import Final

from sync.wire.errors import ErrorCode, ProtocolError

__all__ = [
    "MAX_VAR_UINT",
    "Reader",
    "encode_var_bytes",
    "encode_var_string",
    "encode_var_uint",
]

MAX_VAR_UINT: Final = 2**53 - 1
"""Largest integer a varuint may carry: JavaScript peers cannot represent more."""

_MAX_VAR_UINT_BYTES: Final = 8  # ceil(53 / 7)

_ONE_BYTE: Final = tuple(bytes((value,)) for value in range(0x80))


def encode_var_uint(value: int) -> bytes:
    """Encode ``0 <= value <= MAX_VAR_UINT`` as a canonical lib0 varuint.

    Raises :class:`ProtocolError` (``invalid_value``) for a negative, too large or
    non-``int`` value (``bool`` is refused; ``IntEnum`` members are fine).
    """
    if type(value) is int and 0 <= value <= 0x7F:  # the common one-byte case
        return _ONE_BYTE[value]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(ErrorCode.INVALID_VALUE, f"varuint must be an int, got {value!r}")
    value = int(value)  # IntEnum members encode as their value
    if not 0 <= value <= MAX_VAR_UINT:
        raise ProtocolError(
            ErrorCode.INVALID_VALUE,
            f"varuint must be an int in [0, 2**53 - 1], got {value!r}",
        )
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_var_bytes(data: bytes) -> bytes:
    """Encode ``data`` as varbytes: varuint length, then the bytes themselves."""
    return encode_var_uint(len(data)) + bytes(data)


def encode_var_string(text: str) -> bytes:
    """Encode ``text`` as varstring (UTF-8 bytes as varbytes).

    Raises :class:`ProtocolError` (``invalid_value``) if ``text`` holds lone surrogates,
    which have no UTF-8 encoding.
    """
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ProtocolError(ErrorCode.INVALID_VALUE, f"string is not encodable: {exc}") from None
    return encode_var_bytes(raw)


class Reader:
    """A cursor over one message's bytes with strict, bounds-checked lib0 reads.

    Each ``read_*`` method consumes what it returns or raises :class:`ProtocolError`
    (the position is then unspecified; drop the reader). Call :meth:`expect_end` once the
    message should be fully read.
    """

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._pos = 0

    @property
    def remaining(self) -> int:
        """Number of bytes not read yet."""
        return len(self._data) - self._pos

    def read_var_uint(self) -> int:
        """Read one canonical varuint no larger than :data:`MAX_VAR_UINT`."""
        data = self._data
        pos = self._pos
        if pos < len(data) and data[pos] < 0x80:  # the common one-byte case
            self._pos = pos + 1
            return data[pos]
        value = 0
        for index in range(_MAX_VAR_UINT_BYTES):
            if self._pos >= len(data):
                raise ProtocolError(ErrorCode.TRUNCATED, "input ends inside a varuint")
            byte = data[self._pos]
            self._pos += 1
            value |= (byte & 0x7F) << (7 * index)
            if byte < 0x80:
                if byte == 0 and index > 0:
                    raise ProtocolError(
                        ErrorCode.NON_CANONICAL_VARUINT,
                        "varuint has a superfluous zero group",
                    )
                if value > MAX_VAR_UINT:
                    raise ProtocolError(ErrorCode.VARUINT_OVERFLOW, "varuint exceeds 2**53 - 1")
                return value
        raise ProtocolError(ErrorCode.VARUINT_OVERFLOW, "varuint longer than 8 bytes")

    def read_bytes(self, length: int) -> bytes:
        """Read exactly ``length`` raw bytes."""
        if length > self.remaining:
            raise ProtocolError(
                ErrorCode.TRUNCATED,
                f"need {length} bytes, only {self.remaining} left",
            )
        start = self._pos
        self._pos += length
        return self._data[start : self._pos]

    def read_var_bytes(self) -> bytes:
        """Read varbytes: a varuint length, then that many bytes."""
        return self.read_bytes(self.read_var_uint())

    def read_var_string(self) -> str:
        """Read a varstring and decode it as strict UTF-8."""
        raw = self.read_var_bytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(ErrorCode.INVALID_UTF8, f"varstring is not UTF-8: {exc}") from None

    def read_rest(self) -> bytes:
        """Read every remaining byte (possibly none)."""
        return self.read_bytes(self.remaining)

    def expect_end(self) -> None:
        """Raise ``trailing_bytes`` unless every byte has been read."""
        if self.remaining:
            raise ProtocolError(
                ErrorCode.TRAILING_BYTES,
                f"{self.remaining} unexpected bytes after the message",
            )
