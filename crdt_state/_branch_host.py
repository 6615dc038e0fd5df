"""What a branch needs: the state it was forked from, and the ``with`` protocol.

:class:`BranchHost` is the contract between a :class:`~crdt_state.branch.Branch`
and its state (:class:`~crdt_state.SharedState` implements it, a remote replica may
too); :class:`MergeOnExit` is the context-manager protocol every kind of branch
shares (a local one, a remote one). Both are API, exported by
:mod:`crdt_state.branch`; this module only keeps the contracts apart from the
branch's implementation.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .conflicts import Change, MergeResult
from .model_type import ModelT
from .paths import Path
from .version import VersionVector

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["BranchHost", "MergeOnExit"]


class _Scoped(Protocol):
    """What :class:`MergeOnExit` needs of the class it is mixed into."""

    @property
    def status(self) -> str: ...

    def discard(self) -> None: ...

    def merge(self) -> MergeResult: ...

    async def amerge(self) -> MergeResult: ...


class MergeOnExit:
    """The ``with`` / ``async with`` protocol of a branch.

    Leaving the block merges an open branch (``merge``, or ``amerge`` for
    ``async with``); an exception discards it and propagates. For any class with
    ``status``, ``discard``, ``merge`` and ``amerge`` (:class:`Branch`, a remote branch).
    """

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self: _Scoped,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.discard()
        elif self.status == "open":
            self.merge()

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(
        self: _Scoped,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.discard()
        elif self.status == "open":
            await self.amerge()


_S = TypeVar("_S", bound=MergeOnExit)


class BranchHost(Protocol[ModelT]):
    """What a :class:`Branch` needs from the state it was forked from.

    :class:`~crdt_state.SharedState` implements it; so may any other state
    (a remote one) that wants plain branches. Positions are the host's
    change-log positions (:attr:`position`).
    """

    @property
    def lock(self) -> threading.RLock:
        """Held to read several positions in one consistent moment."""
        ...

    @property
    def position(self) -> int:
        """The current log position."""
        ...

    @property
    def token(self) -> VersionVector:
        """The current version."""
        ...

    def read_at(self, path: Any, position: int) -> Any:
        """A copy of the value at ``path`` at ``position`` (``MISSING`` when absent)."""
        ...

    def keys_at(self, position: int) -> set[str]:
        """Every top-level key that may have had a value at ``position``."""
        ...

    def ensure_open(self) -> None:
        """Raise :class:`~crdt_state.errors.StateClosed` once the host takes no writes."""
        ...

    def prepare_value(self, path: Path, value: Any) -> Any:
        """``value`` validated and normalised for ``path``."""
        ...

    def prepare_items(self, path: Path, items: list[Any]) -> list[Any]:
        """``items`` validated and normalised for appending at ``path``."""
        ...

    def prepare_fields(self, values: BaseModel | Mapping[str, Any]) -> list[tuple[Path, Any]]:
        """The ``(path, prepared value)`` pairs :meth:`Branch.update` writes."""
        ...

    def to_model(self, data: dict[str, Any]) -> ModelT:
        """``data`` as an instance of the host's schema (``TypeError`` without one)."""
        ...

    def apply_merge(
        self,
        changes: list[Change],
        position: int,
        agent: str,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> tuple[MergeResult, int | None]:
        """Merge ``changes`` computed at ``position``: the result and the store's ticket.

        Returns without waiting for the disk (the ticket is ``None`` in memory).
        """
        ...

    def wait_durable(self, ticket: int | None) -> None:
        """Block until the change of ``ticket`` is durable."""
        ...

    async def await_durable(self, ticket: int | None) -> None:
        """Wait, without blocking the event loop, until the change of ``ticket`` is durable."""
        ...
