"""A blocking remote state for threaded code: the asyncio client on a private loop.

``with sync.connect_blocking(url, agent="a") as remote:`` gives the
:class:`~sync.client.remote.RemoteState` API without ``await``: branches are edited
locally from any thread and ``branch.merge()`` blocks until the hub answers.
One background thread runs the connection; calls from many threads are fine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel

from crdt_state import Change, MergeResult, VersionVector
from sync.client.remote import RemoteBranch, RemoteState

__all__ = ["BlockingBranch", "BlockingRemote", "connect_blocking"]

T = TypeVar("T")


class BlockingBranch:
    """A remote branch whose :meth:`merge` blocks until the hub answers.

    Reading and editing are local and immediate, exactly as on the
    :class:`~sync.client.branch.RemoteBranch` it wraps (:attr:`branch`).
    """

    def __init__(self, owner: BlockingRemote, branch: RemoteBranch) -> None:
        self._owner = owner
        self.branch = branch

    # -- identity ----------------------------------------------------------------------
    @property
    def agent(self) -> str:
        """The agent that owns this branch."""
        return self.branch.agent

    @property
    def base(self) -> VersionVector:
        """The replica's token at the fork."""
        return self.branch.base

    @property
    def status(self) -> str:
        """``"open"``, ``"merged"`` or ``"discarded"``."""
        return self.branch.status

    @property
    def result(self) -> MergeResult | None:
        """The result of the merge once merged."""
        return self.branch.result

    @property
    def dirty(self) -> bool:
        """True when the branch has changes to merge."""
        return self.branch.dirty

    # -- reading -----------------------------------------------------------------------
    def get(self, path: Any, default: Any = None) -> Any:
        """The branch's value at ``path`` (a copy), or ``default`` when absent."""
        return self.branch.get(path, default)

    def snapshot(self) -> dict[str, Any]:
        """The whole state as this branch sees it."""
        return self.branch.snapshot()

    def model(self) -> BaseModel:
        """The branch's view as an instance of the schema (``TypeError`` without one)."""
        return self.branch.model()

    def changes(self) -> tuple[tuple[str, ...], ...]:
        """The paths this branch changed (root-most)."""
        return self.branch.changes()

    def ops(self) -> list[Change]:
        """The branch's changes, as a merge sends them."""
        return self.branch.ops()

    def __getitem__(self, key: str) -> Any:
        return self.branch[key]

    def __contains__(self, path: object) -> bool:
        return path in self.branch

    # -- writing -----------------------------------------------------------------------
    def set(self, path: Any, value: Any) -> None:
        """Write ``value`` at ``path`` (see :meth:`crdt_state.Branch.set`)."""
        self.branch.set(path, value)

    def delete(self, path: Any) -> None:
        """Remove ``path`` (see :meth:`crdt_state.Branch.delete`)."""
        self.branch.delete(path)

    def append(self, path: Any, *items: Any) -> None:
        """Add ``items`` at the end of the list at ``path`` (created when absent)."""
        self.branch.append(path, *items)

    def extend(self, path: Any, items: Iterable[Any]) -> None:
        """Like :meth:`append`, with the items as one iterable."""
        self.branch.extend(path, items)

    def update(self, values: BaseModel | Mapping[str, Any]) -> None:
        """Write every field given (see :meth:`crdt_state.Branch.update`)."""
        self.branch.update(values)

    def __setitem__(self, key: str, value: Any) -> None:
        self.branch[key] = value

    def __delitem__(self, key: str) -> None:
        del self.branch[key]

    def rebase(self) -> None:
        """Move the fork base to the replica's current version, replaying own edits."""
        self.branch.rebase()

    def discard(self) -> None:
        """Drop the branch's changes."""
        self.branch.discard()

    # -- merging -----------------------------------------------------------------------
    def merge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """Send the branch to the hub and wait for the outcome (see ``RemoteBranch.amerge``).

        Raises:
            ConflictError: conflicts the policies did not settle.
            BrokenChain: an earlier merge of the agent that this one builds on failed.
            RemoteError: the hub refused the merge for another reason.
        """
        return self._owner._call(self.branch.amerge(resolvers=resolvers, default=default))

    def __enter__(self) -> BlockingBranch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.branch.discard()
        elif self.branch.status == "open":
            self.merge()


class BlockingRemote:
    """A hub room for threaded code; create it with :func:`connect_blocking`."""

    def __init__(self, url: str | Sequence[str], *, timeout: float = 30.0, **options: Any) -> None:
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="crdt-state-client", daemon=True
        )
        self._thread.start()
        self.remote = RemoteState(url, **options)
        try:
            self._call(self.remote.start(timeout))
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout)

    # -- the SharedState API, blocking -------------------------------------------------
    @property
    def token(self) -> VersionVector:
        return self.remote.token

    def snapshot(self) -> dict[str, Any]:
        return self.remote.snapshot()

    def read(self) -> tuple[dict[str, Any], VersionVector]:
        return self.remote.read()

    def get(self, path: Any, default: Any = None) -> Any:
        return self.remote.get(path, default)

    def get_update(self, since: VersionVector | None = None) -> bytes:
        return self.remote.get_update(since)

    def fork(self, agent: str | None = None) -> BlockingBranch:
        return BlockingBranch(self, self.remote.fork(agent))

    def commit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str | None = None,
        **options: Any,
    ) -> MergeResult:
        """The OCC form, blocking (see ``RemoteState.acommit``)."""
        return self._call(self.remote.acommit(changes, base, agent, **options))

    def transact(self, fn: Callable[[Any], T], **options: Any) -> MergeResult:
        """Run ``fn(branch)`` (on the client's thread) and merge, re-running on a retry."""
        return self._call(self.remote.atransact(fn, **options))

    def wait_idle(self, timeout: float = 10.0) -> None:
        self._call(self.remote.wait_idle(timeout))

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Disconnect and stop the background thread."""
        if self._loop.is_running():
            try:
                self._call(self.remote.close())
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.timeout)
        self._loop.close()

    def __enter__(self) -> BlockingRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_blocking(url: str | Sequence[str], *, agent: str, **options: Any) -> BlockingRemote:
    """:func:`sync.connect` for threaded code (same options); use it in a ``with`` block."""
    return BlockingRemote(url, agent=agent, **options)
