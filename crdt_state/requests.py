"""Idempotency keys: the results of recently applied requests (pure logic).

``SharedState.commit(..., request_id=...)`` remembers each applied request
here (and a durable state also in its file, in the same transaction as the
change), so a request sent again after a lost answer is not applied twice.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from .conflicts import MergeResult
from .paths import Path
from .version import VersionVector

__all__ = ["KEEP_REQUESTS", "RequestMemory"]

KEEP_REQUESTS: Final = 100_000
"""How many applied request ids are remembered."""


class RequestMemory:
    """The newest :data:`KEEP_REQUESTS` applied request ids, with their token and paths."""

    def __init__(self, keep: int = KEEP_REQUESTS) -> None:
        self.keep = keep
        self._done: OrderedDict[int, tuple[VersionVector, tuple[Path, ...]]] = OrderedDict()

    def remember(self, request_id: int, token: VersionVector, paths: tuple[Path, ...]) -> None:
        """Record that ``request_id`` was applied, giving ``token`` and writing ``paths``."""
        self._done[request_id] = (token, paths)
        self._done.move_to_end(request_id)
        if len(self._done) > self.keep:
            self._done.popitem(last=False)

    def result(self, request_id: int | None) -> MergeResult | None:
        """What to answer a repeated ``request_id`` (``None``: not applied, or no id)."""
        if request_id is None:
            return None
        known = self._done.get(request_id)
        if known is None:
            return None
        token, paths = known
        return MergeResult(token=token, applied=paths, fast_forward=False)

    def __len__(self) -> int:
        return len(self._done)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._done
