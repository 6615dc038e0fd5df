"""Agent steps with retry: fork, run the step, merge; re-run on a retry conflict.

Shared by :meth:`SharedState.transact`, :meth:`SharedState.atransact` and the
remote state's ``atransact``: anything with a ``fork(agent)`` that returns a
:class:`Branch` can run agent steps this way.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .conflicts import ConflictError, MergeResult, RetryExhausted
from .errors import StaleBase, WrongType
from .model_type import ModelT
from .retry import Retry

if TYPE_CHECKING:
    from .branch import Branch

__all__ = ["Transacting", "arun_transaction", "run_transaction"]

T = TypeVar("T")
B = TypeVar("B", bound="Branch[Any]")
"""The branch a transaction runs on (a typed state's ``Branch[Triage]``, say)."""


class _Attempts:
    """Bookkeeping of one transaction's attempts (pure)."""

    def __init__(self, agent: str, retry: Retry | None) -> None:
        self.agent = agent
        self.policy = retry or Retry()
        self.last: ConflictError | None = None

    def __iter__(self) -> Any:
        return iter(range(1, self.policy.attempts + 1))

    def failed(self, exc: ConflictError | StaleBase) -> None:
        """Record a retryable failure; re-raise anything that is not one."""
        if isinstance(exc, StaleBase):
            self.last = ConflictError(str(exc), retry=True)
        elif not exc.retry:
            raise exc
        else:
            self.last = exc

    def more(self, attempt: int) -> bool:
        """True when another attempt follows attempt number ``attempt``."""
        return attempt < self.policy.attempts

    def exhausted(self) -> RetryExhausted:
        return RetryExhausted(
            f"agent {self.agent!r} still conflicted after {self.policy.attempts} attempt(s)",
            attempts=self.policy.attempts,
            conflicts=self.last.conflicts if self.last else (),
        )


def run_transaction(
    fork: Callable[[str], B],
    fn: Callable[[B], T],
    *,
    agent: str,
    retry: Retry | None = None,
    resolvers: Mapping[Any, object] | None = None,
    default: object | None = None,
) -> MergeResult:
    """Run ``fn(branch)`` on a fresh branch and merge it, re-running on a retry.

    A conflict whose policy asks for a retry (or a fork base too old to judge)
    re-runs ``fn`` on fresh state after a jittered backoff, up to
    ``retry.attempts`` runs, then raises :class:`RetryExhausted`. Any other
    conflict raises :class:`ConflictError`. An exception from ``fn`` discards
    the branch and propagates. The result's ``value`` is what ``fn`` returned.
    """
    attempts = _Attempts(agent, _checked(fn, retry))
    for attempt in attempts:
        branch = fork(agent)
        try:
            value = fn(branch)
            result = branch.merge(resolvers=resolvers, default=default)
        except (ConflictError, StaleBase) as exc:
            branch.discard()
            attempts.failed(exc)
            if attempts.more(attempt):
                time.sleep(attempts.policy.delay(attempt))
            continue
        except BaseException:
            branch.discard()
            raise
        return replace(result, value=value, attempts=attempt)
    raise attempts.exhausted()


async def arun_transaction(
    fork: Callable[[str], B],
    fn: Callable[[B], object],
    *,
    agent: str,
    retry: Retry | None = None,
    resolvers: Mapping[Any, object] | None = None,
    default: object | None = None,
) -> MergeResult:
    """The asyncio form of :func:`run_transaction`; ``fn`` may be async or plain."""
    attempts = _Attempts(agent, _checked(fn, retry))
    for attempt in attempts:
        branch = fork(agent)
        try:
            value = fn(branch)
            if inspect.isawaitable(value):
                value = await value
            result = await branch.amerge(resolvers=resolvers, default=default)
        except (ConflictError, StaleBase) as exc:
            branch.discard()
            attempts.failed(exc)
            if attempts.more(attempt):
                await asyncio.sleep(attempts.policy.delay(attempt))
            continue
        except BaseException:
            branch.discard()
            raise
        return replace(result, value=value, attempts=attempt)
    raise attempts.exhausted()


def _checked(fn: object, retry: object) -> Retry | None:
    """``retry`` once ``fn`` is a callable and ``retry`` a :class:`Retry` or ``None``.

    Raises:
        WrongType: either is not (nothing forked, nothing run).
    """
    if not callable(fn):
        raise WrongType(
            f"a transaction runs a callable fn(branch), not {type(fn).__name__}",
            details={"fn": repr(fn)[:80]},
        )
    if retry is not None and not isinstance(retry, Retry):
        raise WrongType(
            f"retry must be a Retry(...) or None, not {type(retry).__name__}",
            details={"retry": repr(retry)[:80]},
        )
    return retry


class Transacting(Generic[ModelT]):
    """:meth:`transact` and :meth:`atransact` for a host that forks branches."""

    def fork(self, agent: str) -> Branch[ModelT]:
        """A new branch for ``agent`` (the host's)."""
        raise NotImplementedError

    def transact(
        self,
        fn: Callable[[Branch[ModelT]], T],
        *,
        agent: str,
        retry: Retry | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Run ``fn(branch)`` on a fresh branch and merge it; re-run on a retry.

        A conflict whose policy is ``resolvers.retry`` (or a base too old to
        judge) re-runs ``fn`` on fresh state after a jittered backoff, up to
        ``retry.attempts`` runs, then raises :class:`RetryExhausted`. Any
        exception from ``fn`` discards the branch and propagates. The result's
        ``value`` is what ``fn`` returned.
        """
        return run_transaction(
            self.fork, fn, agent=agent, retry=retry, resolvers=resolvers, default=default
        )

    async def atransact(
        self,
        fn: Callable[[Branch[ModelT]], object],
        *,
        agent: str,
        retry: Retry | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """The asyncio form of :meth:`transact`; ``fn`` may be async or plain."""
        return await arun_transaction(
            self.fork, fn, agent=agent, retry=retry, resolvers=resolvers, default=default
        )
