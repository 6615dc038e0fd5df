"""Idempotency keys and chains: the results of recently applied requests (pure logic).

``SharedState.commit(..., request_id=..., writer=...)`` remembers each
applied request here under its :class:`RequestKey` ``(writer, request_id)``
(a durable state also in its file, in the same transaction as the change),
so a request sent again after a lost answer is not applied twice. Request ids
are scoped by their writer: two writers may use the same id.

A merge may also *build on* earlier requests of its writer (a chain, see
``SharedState.commit(builds_on=...)``): :meth:`RequestMemory.chain_keys`
checks that every one of them was applied exactly as sent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from itertools import repeat
from typing import Final, NamedTuple

from .conflicts import MergeResult
from .errors import BrokenChain
from .paths import Path
from .version import VersionVector

__all__ = ["KEEP_REQUESTS", "LISTED_BROKEN", "ChainKey", "RequestKey", "RequestMemory"]

KEEP_REQUESTS: Final = 100_000
"""How many applied requests are remembered (all writers together)."""
LISTED_BROKEN: Final = 100
"""Most request ids a :class:`BrokenChain` lists (its message gives the count): a chain
of 100,000 ids that a client sends in a few bytes must not come back as half a megabyte."""


class RequestKey(NamedTuple):
    """What identifies one request: its ``writer`` and the writer's ``request_id``."""

    writer: str
    request_id: int


ChainKey = tuple[str, int]
"""A request of a chain as ``(writer, request_id)``: a :class:`RequestKey` or the plain
pair, which compares and hashes alike (a chain's keys are made as plain pairs: building
thousands of named tuples was most of a long chain's cost)."""


class _Done(NamedTuple):
    token: VersionVector
    paths: tuple[Path, ...]


class RequestMemory:
    """The newest :data:`KEEP_REQUESTS` applied requests, with their token and paths.

    ``clean`` records whether a request was applied exactly as sent (it met no
    conflict): only such requests can be built on (see :meth:`chain_keys`).
    """

    def __init__(self, keep: int = KEEP_REQUESTS) -> None:
        self.keep = keep
        self._done: OrderedDict[ChainKey, _Done] = OrderedDict()
        self._clean: set[ChainKey] = set()
        """The remembered keys applied exactly as sent (what a chain may name)."""

    def remember(
        self, key: RequestKey, token: VersionVector, paths: tuple[Path, ...], clean: bool = True
    ) -> None:
        """Record that ``key`` was applied, giving ``token`` and writing ``paths``."""
        self._done[key] = _Done(token, paths)
        self._done.move_to_end(key)
        if clean:
            self._clean.add(key)
        else:
            self._clean.discard(key)
        if len(self._done) > self.keep:
            forgotten, _ = self._done.popitem(last=False)
            self._clean.discard(forgotten)

    def result(self, key: RequestKey | None) -> MergeResult | None:
        """What to answer a repeated ``key`` (``None``: not applied, or no key)."""
        if key is None:
            return None
        known = self._done.get(key)
        if known is None:
            return None
        return MergeResult(token=known.token, applied=known.paths, fast_forward=False)

    def chain_keys(self, writer: str, request_ids: Iterable[int]) -> frozenset[ChainKey]:
        """The keys of a chain, once every one is known to be applied exactly as sent.

        Raises :class:`BrokenChain` naming the ids that were not applied (refused,
        never received, or forgotten) or were applied with conflicts: the lowest
        :data:`LISTED_BROKEN` in ``details["request_ids"]``, how many more in
        ``details["unlisted"]`` (only when there are more).
        """
        keys = frozenset(zip(repeat(writer), request_ids))
        broken = sorted(rid for _, rid in keys - self._clean)
        if broken:
            details: dict[str, object] = {"writer": writer, "request_ids": broken[:LISTED_BROKEN]}
            if len(broken) > LISTED_BROKEN:
                details["unlisted"] = len(broken) - LISTED_BROKEN
            raise BrokenChain(
                f"{len(broken)} earlier merge(s) of this writer that this one builds on "
                "were not applied as sent",
                details=details,
            )
        return keys

    def tokens_of(self, keys: Iterable[ChainKey]) -> dict[ChainKey, VersionVector]:
        """The token each remembered request of ``keys`` gave (forgotten ones left out)."""
        out: dict[ChainKey, VersionVector] = {}
        for key in keys:
            known = self._done.get(key)
            if known is not None:
                out[key] = known.token
        return out

    def is_clean(self, key: RequestKey) -> bool:
        """True when ``key`` is remembered as applied without any conflict."""
        return key in self._clean

    def __len__(self) -> int:
        return len(self._done)

    def __contains__(self, key: object) -> bool:
        return key in self._done
