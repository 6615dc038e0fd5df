"""What pycrdt would take from a peer's update otherwise than Yjs does: its clocks (pure logic).

Two ways in which yrs, the Rust core under pycrdt 0.14, parts from Yjs on a client's
clocks, both found by fuzzing the hub, both leaving a document that pycrdt later panics
on, or that peers cannot load:

- **Large clocks.** Yjs counts a client's clocks in JavaScript numbers (up to 2**53);
  yrs in 32 bits: it cuts a larger clock read from an update down to its low 32 bits
  without a word, and adds clocks and lengths in 32 bits. No Yjs peer comes near 2**31
  operations of one client, so a clock above :data:`MAX_CLOCK` is refused.
- **Gaps.** An update whose structs of a client start past the clocks the document holds
  of that client (its state vector) is kept pending by Yjs until the missing structs
  come. yrs integrates it at once when what its first struct points to is there,
  leaving a hole in that client's structs; when the missing ones come, they are filed
  after the later ones, and the replica silently parts from its peers (a value written
  before is lost) or encodes its document wrongly. Such an update *waits*
  (:class:`Problem.waits`): the state keeps it aside and applies it once the document
  holds the clocks before it (updates delivered out of order, a dropped one sent again).
  One that skips clocks inside itself (a ``Skip`` struct, which ``merge_updates`` writes
  for updates that do not follow each other) is refused: the clocks it lacks may never
  come.

:func:`read_clocks` reads the update's structs (their clock ranges, the ids their items
point to, the delete set); a look at the bytes settles most updates from the first
client's header alone: no ``Skip`` info byte (``0x0a``) anywhere, no run of three bytes
with the high bit set (every varuint below 2**21) and fewer than :data:`_SHORT` bytes (too
few structs for their lengths to reach 2**31).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from ._update_scan import Reader, content_length

__all__ = ["MAX_CLOCK", "Clocks", "Problem", "clock_problem", "read_clocks"]

MAX_CLOCK: Final = 2**31 - 1
"""The largest clock (the last of a range) an update may name."""

_WIDE = re.compile(rb"[\x80-\xff]{3}")  # the first three bytes of a varuint >= 2**21
_SKIP: Final = b"\x0a"  # the info byte of a Skip struct
_GC_REF, _SKIP_REF = 0, 10
_ORIGIN, _RIGHT_ORIGIN, _PARENT_SUB = 0x80, 0x40, 0x20
_SHORT: Final = 2000
# Below it, with every varuint < 2**21: at most 1,000 structs (two bytes each at least),
# every length < 2**21 (a GC, skip or deleted run's varuint; content lengths are bounded
# by its bytes), so no range ends past 2**21 * 1,001 < 2**31; delete-set ranges < 2**22.

Held = Callable[[int], int]
"""The clocks the document holds of a client (the next clock it expects from it)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Why pycrdt would take an update otherwise than Yjs."""

    reason: str
    waits: bool = False
    """The update starts past the clocks held: apply it once they are (else refuse it)."""


@dataclass(frozen=True, slots=True)
class Clocks:
    """What :func:`read_clocks` found."""

    problem: Problem | None = None
    resends: bool = False
    """Some client's structs start below the clocks held: honest peers do that when they
    send structs squashed since (a text typed a letter at a time, sent whole); a peer
    sending other content at those clocks is where pycrdt's document can come to read
    otherwise than its own encoding."""


def read_clocks(update: bytes, held: Held) -> Clocks:
    """Whether pycrdt would take ``update``'s clocks otherwise than Yjs; what it re-sends.

    ``held`` gives the clocks the document holds of each client (its state vector).

    Raises:
        ValueError: bytes that cannot be read as a Yjs v1 update (only read when the
            cheap look cannot settle it).
    """
    if len(update) < _SHORT and _SKIP not in update and _WIDE.search(update) is None:
        reader = Reader(update)
        count = reader.uint()
        if count == 0:  # a delete set alone
            return Clocks()
        if count == 1:
            reader.uint()  # how many structs
            client = reader.uint()
            first, have = reader.uint(), held(client)
            if first <= have:
                return Clocks(resends=first < have)
    return _read(update, held)  # read whole what may wait: garbage is refused, not kept


def clock_problem(update: bytes, held: Held) -> Problem | None:
    """:func:`read_clocks`'s problem alone."""
    return read_clocks(update, held).problem


def _walk(reader: Reader) -> Iterator[tuple[int, int, int, int, list[int]]]:
    """Each struct: (client, first clock, kind, length, the clocks its ids point to).

    Leaves ``reader`` at the delete set once exhausted.
    """
    for _ in range(reader.uint()):
        count, client, clock = reader.uint(), reader.uint(), reader.uint()
        for _ in range(count):
            info = reader.byte()
            ref = info & 0x1F
            pointed: list[int] = []
            if ref in (_GC_REF, _SKIP_REF):
                length = reader.uint()
            else:
                for flag in (_ORIGIN, _RIGHT_ORIGIN):
                    if info & flag:
                        reader.uint()
                        pointed.append(reader.uint())
                if not info & (_ORIGIN | _RIGHT_ORIGIN):
                    if reader.uint() == 1:
                        reader.raw()  # the root type's name
                    else:
                        reader.uint()
                        pointed.append(reader.uint())
                    if info & _PARENT_SUB:
                        reader.raw()
                length = content_length(reader, ref)
            if length < 1:
                raise ValueError("an empty struct")
            yield client, clock, ref, length, pointed
            clock += length


def _read(update: bytes, held: Held) -> Clocks:
    reader = Reader(update)
    firsts: dict[int, int] = {}
    for client, clock, ref, length, pointed in _walk(reader):
        firsts[client] = min(clock, firsts.get(client, clock))
        if ref == _SKIP_REF:
            return _refused(f"it skips clocks {clock}-{clock + length - 1} of client {client}")
        if clock + length - 1 > MAX_CLOCK:
            return _too_large(clock + length - 1)
        if pointed and max(pointed) > MAX_CLOCK:
            return _too_large(max(pointed))
    for _ in range(reader.uint()):  # the delete set: per client, ranges (clock, length)
        reader.uint()
        for _ in range(reader.uint()):
            clock = reader.uint()
            end = clock + reader.uint() - 1
            if end > MAX_CLOCK:
                return _too_large(end)
    for client, first in firsts.items():  # only an update pycrdt may take can wait
        problem = _gap(client, first, held)
        if problem is not None:
            return Clocks(problem)
    return Clocks(resends=any(first < held(client) for client, first in firsts.items()))


def _gap(client: int, first: int, held: Held) -> Problem | None:
    have = held(client)
    if first <= have:
        return None
    return Problem(
        f"client {client}'s structs start at clock {first}, this replica holds {have} of them",
        waits=True,
    )


def _refused(reason: str) -> Clocks:
    return Clocks(Problem(reason))


def _too_large(clock: int) -> Clocks:
    return _refused(f"it names clock {clock}, above {MAX_CLOCK} (pycrdt's 32-bit clocks wrap)")
