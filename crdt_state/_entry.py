"""One entry of the change log: what a merged change set did and how to undo it (pure).

Kept apart from :mod:`crdt_state._changelog` so that the path index
(:mod:`crdt_state._pathindex`) can read entries without importing the log.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .conflicts import WriteKind
from .paths import Path
from .version import VersionVector

if TYPE_CHECKING:
    from .requests import RequestKey

__all__ = ["Entry", "TruncateTo", "WriteKind", "advance", "covered_prefix", "covers"]


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Undo record of an append: the list had ``length`` items before."""

    length: int


@dataclass(slots=True)
class Entry:
    """One integrated change set.

    ``writes`` maps each written path to how it was written; ``undo`` lists
    ``(path, value before)`` in application order (``MISSING`` = was absent,
    :class:`TruncateTo` = list was shorter); ``delta`` maps each client to
    the clock range ``[start, end)`` this entry added. ``request`` is the
    :class:`~crdt_state.requests.RequestKey` of the merge that made the entry
    (``None`` for merges without a request id and for received updates): a
    later merge of the same writer that builds on it does not conflict with it.
    """

    seq: int
    agent: str | None
    token: VersionVector
    delta: dict[int, tuple[int, int]]
    writes: dict[Path, WriteKind]
    undo: list[tuple[Path, Any]]
    time: float = field(default_factory=time.time)
    origin: str = "local"
    request: RequestKey | None = None

    def covered_by(self, token: VersionVector) -> bool:
        """True when ``token`` has seen every operation of this entry."""
        clock = token.get_clock
        for client, (_, end) in self.delta.items():  # noqa: SIM110 (no generator: every merge)
            if clock(client) < end:
                return False
        return True


def covers(token: VersionVector, entries: Sequence[Entry], first: int) -> bool:
    """Whether ``token`` covers every one of ``entries[first:]`` (see :meth:`Entry.covered_by`)."""
    for index in range(first, len(entries)):  # noqa: SIM110 (no slice or generator)
        if not entries[index].covered_by(token):
            return False
    return True


def covered_prefix(
    entries: Sequence[Entry], before: VersionVector, token: VersionVector, *, monotone: bool
) -> int:
    """How many of ``entries`` (oldest first), ``token`` covers before one it does not.

    ``before`` is the token before the first entry; ``monotone``: every entry's token
    is at least the one before it, so the answer is found by bisection in
    ``O(log(entries))`` comparisons of tokens (else one entry after the other).
    """
    if not monotone:
        for count, entry in enumerate(entries):
            if not entry.covered_by(token):
                return count
        return len(entries)
    # With growing tokens, entries[..i] are all covered exactly when the token
    # has every clock entries[i].token has for the clients those entries advanced
    # (a client none of them advanced still has its clock from before them).
    start_of = before.get_clock
    clock = token.get_clock
    lo, hi = 0, len(entries)  # entries[:lo] covered; entries[hi - 1] and later not all
    while lo < hi:
        mid = (lo + hi) // 2
        if all(clock(c) >= k for c, k in entries[mid].token.items() if k != start_of(c)):
            lo = mid + 1
        else:
            hi = mid
    return lo


def advance(before: VersionVector, after: VersionVector) -> tuple[dict[int, tuple[int, int]], bool]:
    """The clock ranges ``after`` has beyond ``before``, and whether it is monotone.

    Monotone: ``after`` has every clock of ``before`` at least as far (the tokens
    of one document only grow).
    """
    start_of = before.get_clock
    delta: dict[int, tuple[int, int]] = {}
    kept = 0  # clients of ``before`` that ``after`` has at least as far
    for client, clock in after.items():
        start = start_of(client)
        if clock > start:
            delta[client] = (start, clock)
            if start:
                kept += 1
        elif clock == start:
            kept += 1
    return delta, kept == len(before)
