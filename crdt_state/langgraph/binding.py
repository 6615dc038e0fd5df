"""What the LangGraph pieces need from a state, and how they call it.

The channel, the node wrapper and the store work with a
:class:`~crdt_state.SharedState` in this process or with a remote state of a
hub room (``sync.connect`` for asyncio code, ``sync.connect_blocking`` for
threads) without importing ``sync``: they only rely on :class:`SupportsBranches`
(``token``, ``read()``, ``fork(agent)``) plus, by duck typing, ``commit`` (a
blocking merge: ``SharedState``, ``sync.connect_blocking``) and ``acommit``
(an awaitable merge: ``SharedState``, ``sync.connect``). :class:`Binding`
picks the right call and says clearly when a state cannot do what is asked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..conflicts import Change, MergeResult
from ..errors import CrdtStateError
from ..retry import Retry
from ..state import SharedState
from ..transact import arun_transaction, run_transaction
from ..version import VersionVector

__all__ = ["Binding", "MergeNotConfirmed", "SupportsBranches", "request_id_for"]

T = TypeVar("T")


@runtime_checkable
class SupportsBranches(Protocol):
    """A state the LangGraph integration can bind to.

    ``SharedState``, ``sync.connect(...)`` and ``sync.connect_blocking(...)``
    all qualify. Merging additionally needs ``commit`` (blocking) or
    ``acommit`` (asyncio), see :class:`Binding`.
    """

    @property
    def token(self) -> VersionVector:
        """The current version."""
        ...

    def read(self) -> tuple[dict[str, Any], VersionVector]:
        """The content and its version, read in one moment."""
        ...

    def fork(self, agent: str) -> Any:
        """A new branch for ``agent`` at the current version."""
        ...


class MergeNotConfirmed(CrdtStateError, RuntimeError):
    """A graph's write to a hub room that the hub has not confirmed: the step did not land.

    ``details["queued"]`` is False when the hub could not be reached and nothing was
    sent (run the step again later), True when the merge was sent and the connection
    dropped before the answer: the remote state sends it again once connected (the hub
    applies it at most once) and reports its end in its ``failed`` / ``conflicted``
    lists; read the state before running the step again.
    """

    code = "merge_not_confirmed"


class Binding:
    """Calls into a bound state: reads, merges (blocking or awaited) and agent steps.

    Raises ``TypeError`` at construction for an object that is not a state.
    """

    def __init__(self, state: object) -> None:
        for name in ("read", "fork"):
            if not callable(getattr(state, name, None)):
                raise TypeError(
                    "bind to a SharedState or a remote state (sync.connect / "
                    f"sync.connect_blocking), not {type(state).__name__}"
                )
        self.state: Any = state
        self.local = isinstance(state, SharedState)
        self.blocking = callable(getattr(state, "commit", None))
        self.awaitable = callable(getattr(state, "acommit", None))

    @property
    def token(self) -> VersionVector:
        """The bound state's current version."""
        token: VersionVector = self.state.token
        return token

    def read(self) -> tuple[dict[str, Any], VersionVector]:
        """The bound state's content and its version, read in one moment."""
        snapshot, token = self.state.read()
        return snapshot, token

    # -- merges ----------------------------------------------------------------------
    def commit(
        self,
        changes: Sequence[Change],
        base: VersionVector,
        agent: str,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
        request_id: int | None = None,
    ) -> MergeResult:
        """A blocking merge of ``changes`` judged against ``base``."""
        if not self.blocking:
            raise TypeError(
                "this state merges only with 'await' (sync.connect); bind the blocking "
                "twin sync.connect_blocking(...) for graph channels and sync nodes"
            )
        options: dict[str, Any] = {"resolvers": resolvers, "default": default}
        if self.local:  # a remote state makes its own idempotency keys
            options["request_id"] = request_id
        self._reachable(agent)
        result: MergeResult = self.state.commit(list(changes), base, agent, **options)
        return self._confirmed(result)

    async def acommit(
        self,
        changes: Sequence[Change],
        base: VersionVector,
        agent: str,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """An awaited merge; a blocking-only state merges in a worker thread."""
        if self.awaitable:
            self._reachable(agent)
            result: MergeResult = await self.state.acommit(
                list(changes), base, agent, resolvers=resolvers, default=default
            )
            return self._confirmed(result)
        return await asyncio.to_thread(
            self.commit, changes, base, agent, resolvers=resolvers, default=default
        )

    def _reachable(self, agent: str) -> None:
        """Refuse a merge a remote state would only queue (its hub is not reachable now).

        A graph's step must land or fail: a queued write could be refused after the
        graph went on as if it had landed.
        """
        if not self.local and getattr(self.state, "connected", True) is False:
            raise MergeNotConfirmed(
                "the hub is not reachable: this write was not sent (run the step again "
                "once the hub is back)",
                details={"node": agent, "queued": False, "hub": getattr(self.state, "url", None)},
            )

    @staticmethod
    def _confirmed(result: MergeResult) -> MergeResult:
        if result.pending:
            raise MergeNotConfirmed(
                "the connection to the hub dropped before it answered: the write stays "
                "queued and is sent again (applied at most once), but may yet be refused; "
                "read the state before running the step again",
                details={"node": result.agent, "queued": True},
            )
        return result

    # -- agent steps -------------------------------------------------------------------
    def transact(
        self,
        fn: Callable[[Any], T],
        *,
        agent: str,
        retry: Retry | None,
        resolvers: Mapping[Any, object] | None,
        default: object | None,
    ) -> MergeResult:
        """Fork, run ``fn(branch)`` in this thread, merge; re-run on a retry conflict."""
        if not self.blocking:
            raise TypeError(
                "a sync node cannot merge into sync.connect(...) (asyncio only): make the "
                "node async, or bind sync.connect_blocking(...)"
            )
        self._reachable(agent)
        return self._confirmed(
            run_transaction(
                self.state.fork, fn, agent=agent, retry=retry, resolvers=resolvers, default=default
            )
        )

    async def atransact(
        self,
        fn: Callable[[Any], object],
        *,
        agent: str,
        retry: Retry | None,
        resolvers: Mapping[Any, object] | None,
        default: object | None,
    ) -> MergeResult:
        """:meth:`transact` for async nodes (``fn`` may be async)."""
        fork: Callable[[str], Any] = self.state.fork
        if not self.awaitable:  # a blocking remote: its merge runs in a worker thread
            fork = _ThreadMergedFork(self.state.fork)
        self._reachable(agent)
        return self._confirmed(
            await arun_transaction(
                fork, fn, agent=agent, retry=retry, resolvers=resolvers, default=default
            )
        )


class _ThreadMergedFork:
    """Forks whose ``amerge`` runs the branch's blocking ``merge`` in a worker thread."""

    def __init__(self, fork: Callable[[str], Any]) -> None:
        self._fork = fork

    def __call__(self, agent: str) -> Any:
        return _ThreadMergedBranch(self._fork(agent))


class _ThreadMergedBranch:
    def __init__(self, branch: Any) -> None:
        self._branch = branch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._branch, name)

    async def amerge(self, **options: Any) -> MergeResult:
        result: MergeResult = await asyncio.to_thread(self._branch.merge, **options)
        return result


def request_id_for(task_id: str, channel: str, index: int, changes: Sequence[Change]) -> int:
    """A stable 52-bit idempotency key for one write of one LangGraph task.

    The same task re-applying the same write (a run resumed after an error)
    gets the same key, so the state applies it once.
    """
    body = json.dumps(
        [task_id, channel, index, [c.to_dict() for c in changes]],
        sort_keys=True,
        default=repr,
        separators=(",", ":"),
    )
    digest = hashlib.blake2b(body.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 12
