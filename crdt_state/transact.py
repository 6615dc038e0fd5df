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
from typing import TYPE_CHECKING, Any, TypeVar

from .conflicts import ConflictError, MergeResult, RetryExhausted
from .errors import StaleBase
from .retry import Retry

if TYPE_CHECKING:
    from .branch import Branch

__all__ = ["arun_transaction", "run_transaction"]

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
    attempts = _Attempts(agent, retry)
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
    attempts = _Attempts(agent, retry)
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
