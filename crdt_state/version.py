"""Version vectors: the revision tokens of states and branches (pure logic).

A :class:`VersionVector` maps each Yjs client id to the number of operations
of that client a document has integrated (its clock). It is the decoded form
of a Yjs *state vector*, so it travels to any Yjs peer unchanged.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import ItemsView, Iterator, Mapping
from typing import Final

from .errors import InvalidUpdate

__all__ = ["MAX_STRICT_VARUINT", "VersionVector", "decode_varuint", "encode_varuint"]

_MAX_VARUINT_BYTES: Final = 10

MAX_STRICT_VARUINT: Final = 2**53 - 1
"""Largest integer the strict decoder reads: JavaScript peers cannot represent more."""

_MAX_STRICT_VARUINT_BYTES: Final = 8  # ceil(53 / 7)

_STRICT_CACHE_SIZE: Final = 1024
# Recently decoded network state vectors, by their exact bytes. A hub decodes the same
# token several times per merge (the wire codec validates it, the judge decodes it, a
# reply's token is encoded and validated again); vectors are immutable, so sharing one is
# safe. Only successful decodes are kept; the whole table is dropped when full.
_strict_cache: dict[bytes, VersionVector] = {}


def encode_varuint(value: int, out: bytearray) -> None:
    """Append ``value`` to ``out`` as a lib0 variable-length unsigned int."""
    if value < 0:
        raise ValueError("varuint must be >= 0")
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def decode_varuint(data: bytes, pos: int) -> tuple[int, int]:
    """Read a lib0 varuint at ``pos``; return ``(value, next_pos)``.

    Raises :class:`InvalidUpdate` on truncated or over-long input.
    """
    value = 0
    shift = 0
    for i in range(_MAX_VARUINT_BYTES):
        if pos + i >= len(data):
            raise InvalidUpdate("truncated varuint", details={"offset": pos})
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + i + 1
        shift += 7
    raise InvalidUpdate("varuint longer than 10 bytes", details={"offset": pos})


def _strict_varuint(data: bytes, pos: int) -> tuple[int, int]:
    """Read a canonical varuint of at most :data:`MAX_STRICT_VARUINT` at ``pos``.

    The strict rules of bytes from the network (the same as lib0 peers can write):
    at most 8 bytes, no superfluous trailing zero group, a value a JavaScript number
    holds exactly.

    Raises:
        InvalidUpdate: ``details["reason"]`` is ``"truncated"``, ``"non_canonical_varuint"``
            or ``"varuint_overflow"``.
    """
    value = 0
    for index in range(_MAX_STRICT_VARUINT_BYTES):
        if pos + index >= len(data):
            raise InvalidUpdate("truncated varuint", details={"offset": pos, "reason": "truncated"})
        byte = data[pos + index]
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            if byte == 0 and index > 0:
                raise InvalidUpdate(
                    "varuint has a superfluous zero group",
                    details={"offset": pos, "reason": "non_canonical_varuint"},
                )
            if value > MAX_STRICT_VARUINT:
                break
            return value, pos + index + 1
    raise InvalidUpdate(
        "varuint exceeds 2**53 - 1", details={"offset": pos, "reason": "varuint_overflow"}
    )


def _varuint_size(value: int) -> int:
    """The length of :func:`encode_varuint`'s encoding of ``value`` (the shortest one)."""
    return (value.bit_length() + 6) // 7 or 1


class VersionVector(Mapping[int, int]):
    """An immutable ``{client_id: clock}`` mapping with the causal partial order.

    ``a <= b`` means every change seen by ``a`` is seen by ``b``; ``a < b``
    adds "and they differ"; :meth:`concurrent` means neither is before the
    other. Clients with clock 0 are dropped, so equal histories compare and
    hash equal however they were built.
    """

    __slots__ = ("_clocks", "_hash", "_state")

    def __init__(self, clocks: Mapping[int, int] | None = None) -> None:
        items: dict[int, int] = {}
        for client, clock in (clocks or {}).items():
            if not isinstance(client, int) or not isinstance(clock, int) or client < 0 or clock < 0:
                raise ValueError(f"invalid version vector entry {client!r}: {clock!r}")
            if clock:
                items[client] = clock
        self._clocks = dict(sorted(items.items()))
        self._hash: int | None = None
        self._state: bytes | None = None

    # -- Mapping -----------------------------------------------------------
    def __getitem__(self, client: int) -> int:
        return self._clocks[client]

    def get_clock(self, client: int) -> int:
        """The clock of ``client`` (0 when unseen)."""
        return self._clocks.get(client, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self._clocks)

    def __len__(self) -> int:
        return len(self._clocks)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._clocks.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VersionVector):
            return self._clocks == other._clocks
        return NotImplemented

    # -- partial order -----------------------------------------------------
    def __le__(self, other: VersionVector) -> bool:
        if not isinstance(other, VersionVector):
            return NotImplemented
        return all(other._clocks.get(c, 0) >= k for c, k in self._clocks.items())

    def __lt__(self, other: VersionVector) -> bool:
        if not isinstance(other, VersionVector):
            return NotImplemented
        return self <= other and self != other

    def __ge__(self, other: VersionVector) -> bool:
        if not isinstance(other, VersionVector):
            return NotImplemented
        return other <= self

    def __gt__(self, other: VersionVector) -> bool:
        if not isinstance(other, VersionVector):
            return NotImplemented
        return other < self

    def concurrent(self, other: VersionVector) -> bool:
        """True when neither vector is before or equal to the other."""
        return not (self <= other) and not (other <= self)

    def merge(self, other: VersionVector) -> VersionVector:
        """The least upper bound: the per-client maximum."""
        clocks = dict(self._clocks)
        for client, clock in other._clocks.items():
            clocks[client] = max(clock, clocks.get(client, 0))
        return VersionVector(clocks)

    @property
    def total(self) -> int:
        """The number of operations covered (sum of the clocks)."""
        return sum(self._clocks.values())

    # -- encodings ---------------------------------------------------------
    def items(self) -> ItemsView[int, int]:
        """``(client, clock)`` pairs in client order (a view of the inner dict, for speed)."""
        return self._clocks.items()

    @classmethod
    def _trusted(cls, clocks: dict[int, int]) -> VersionVector:
        """Build from clocks known to be valid (decoded varuints), skipping validation.

        Takes ownership of ``clocks``.
        """
        if 0 in clocks.values():
            clocks = {client: clock for client, clock in clocks.items() if clock}
        vv = object.__new__(cls)
        vv._clocks = dict(sorted(clocks.items())) if len(clocks) > 1 else clocks
        vv._hash = None
        vv._state = None
        return vv

    @classmethod
    def from_state(cls, state: bytes, *, strict: bool = False) -> VersionVector:
        r"""Decode a Yjs state vector: ``varuint n``, then ``n`` pairs ``(client, clock)``.

        The one state-vector decoder of the project. Lenient by default (what
        the core reads from its own pycrdt documents and files: a client listed
        twice keeps its last clock); ``strict`` for bytes from the network.

        Args:
            state: the encoded state vector (``Doc.get_state()``; ``b"\x00"`` is empty).
            strict: the rules for bytes from the network (the sync wire's one
                rule set): also refuse a client listed twice, a count of entries
                that cannot fit in the bytes (before reading them), a varuint
                that is not canonical or exceeds :data:`MAX_STRICT_VARUINT`.

        Raises:
            InvalidUpdate: truncated input, a varuint over 10 bytes, trailing
                bytes, or a ``strict`` refusal; in strict mode ``details["reason"]``
                is one of ``"truncated"``, ``"trailing_bytes"``, ``"duplicate_client"``,
                ``"too_many_entries"``, ``"non_canonical_varuint"``, ``"varuint_overflow"``.
        """
        if strict:
            return cls._strict_from_state(state)
        # Fast path (this runs after every merge): decode every varuint in one pass;
        # anything unusual falls through to the checked decoder below for the exact error.
        values: list[int] = []
        value = shift = 0
        for byte in state:
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                values.append(value)
                value = shift = 0
            else:
                shift += 7
                if shift >= 7 * _MAX_VARUINT_BYTES:
                    break
        if not shift and values and len(values) == 2 * values[0] + 1:
            if len(values) == 3:
                return cls._one_client(state, values[1], values[2])
            return cls._trusted(dict(zip(values[1::2], values[2::2], strict=True)))
        return cls._checked_from_state(state)

    @classmethod
    def _one_client(cls, state: bytes, client: int, clock: int) -> VersionVector:
        """The vector of ``state``, which decoded to one ``(client, clock)`` pair.

        When ``state`` is exactly what :meth:`to_state` writes for it (no clock 0, the
        shortest varuints: any longer form makes the bytes longer), it is kept as the
        vector's encoding and, like :meth:`to_state`'s, as what the strict decoder makes
        of it: a hub answers each merge with the token it just decoded from its document.
        """
        vv = cls._trusted({client: clock})
        if (
            clock
            and len(state) == 1 + _varuint_size(client) + _varuint_size(clock)
            and type(state) is bytes
        ):
            vv._state = state
            if (
                len(_strict_cache) < _STRICT_CACHE_SIZE
                and client <= MAX_STRICT_VARUINT
                and clock <= MAX_STRICT_VARUINT
            ):
                _strict_cache[state] = vv
        return vv

    @classmethod
    def _checked_from_state(cls, state: bytes) -> VersionVector:
        count, pos = decode_varuint(state, 0)
        clocks: dict[int, int] = {}
        for _ in range(count):
            client, pos = decode_varuint(state, pos)
            clock, pos = decode_varuint(state, pos)
            clocks[client] = clock
        if pos != len(state):
            raise InvalidUpdate("trailing bytes after state vector", details={"offset": pos})
        return cls(clocks)

    @classmethod
    def _strict_from_state(cls, state: bytes) -> VersionVector:
        if type(state) is bytes:
            known = _strict_cache.get(state)
            if known is not None and type(known) is cls:
                return known
            vv = cls._strict_decode(state)
            if len(_strict_cache) >= _STRICT_CACHE_SIZE:
                _strict_cache.clear()
            _strict_cache[state] = vv
            return vv
        return cls._strict_decode(state)

    @classmethod
    def _strict_decode(cls, state: bytes) -> VersionVector:
        count, pos = _strict_varuint(state, 0)
        if count * 2 > len(state) - pos:  # each entry takes at least two bytes
            raise InvalidUpdate(
                f"a state vector of {len(state)} bytes cannot hold {count} entries",
                details={"offset": pos, "reason": "too_many_entries"},
            )
        clocks: dict[int, int] = {}
        for _ in range(count):
            client, pos = _strict_varuint(state, pos)
            clock, pos = _strict_varuint(state, pos)
            if client in clocks:
                raise InvalidUpdate(
                    f"the state vector lists client {client} twice",
                    details={"offset": pos, "client": client, "reason": "duplicate_client"},
                )
            clocks[client] = clock
        if pos != len(state):
            raise InvalidUpdate(
                "trailing bytes after state vector",
                details={"offset": pos, "reason": "trailing_bytes"},
            )
        return cls._trusted(clocks)

    def to_state(self) -> bytes:
        """Encode as a Yjs state vector, accepted by ``Doc.get_update`` of any Yjs peer.

        The encoding is computed once per vector (vectors are immutable), or is the
        bytes a one-client vector was decoded from when they are the same.
        """
        if self._state is not None:
            return self._state
        out = bytearray()
        encode_varuint(len(self._clocks), out)
        for client, clock in self._clocks.items():
            encode_varuint(client, out)
            encode_varuint(clock, out)
        state = self._state = bytes(out)
        if len(_strict_cache) < _STRICT_CACHE_SIZE and all(
            client <= MAX_STRICT_VARUINT and clock <= MAX_STRICT_VARUINT
            for client, clock in self._clocks.items()
        ):
            # what the strict decoder would make of it (canonical, no duplicates)
            _strict_cache[state] = self
        return state

    def to_text(self) -> str:
        """A printable, reversible encoding (URL-safe base64 of :meth:`to_state`)."""
        return base64.urlsafe_b64encode(self.to_state()).decode("ascii").rstrip("=")

    @classmethod
    def from_text(cls, text: str) -> VersionVector:
        """Inverse of :meth:`to_text`.

        Raises:
            InvalidUpdate: ``text`` is not one (not base64, or not an encoded state
                vector); ``details["text"]`` holds its first 100 characters.
        """
        shown = {"text": text[:100]}
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (ValueError, TypeError) as exc:
            raise InvalidUpdate("not a version vector text", details=shown) from exc
        try:
            return cls.from_state(raw)
        except InvalidUpdate as exc:
            raise InvalidUpdate(
                f"not a version vector text ({exc.message})", details=shown
            ) from exc

    def __str__(self) -> str:
        """Short and stable, for logs: ``<total ops>@<8 hex digest>``."""
        digest = hashlib.blake2b(self.to_state(), digest_size=4).hexdigest()
        return f"{self.total}@{digest}"

    def __repr__(self) -> str:
        return f"VersionVector({self._clocks!r})"
