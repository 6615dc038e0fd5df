"""Judging one merge request against a room's state: request in, result frame out.

The hub's side of the merge extension, apart from the connection it came on. A request is
judged by :meth:`SharedState.acommit` with the room's policies, as in-process merges are;
the conflicts the room's rules do not settle are settled with the policy the client named
for the change (step 3 of the request), or else go back to the client. The answer is the
encoded merge result (``docs/protocol.md``, *Merge result*).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from crdt_state import (
    Change,
    Conflict,
    ConflictError,
    CrdtStateError,
    MergeResult,
    SharedState,
    StorageError,
    VersionVector,
    resolvers,
)
from crdt_state.paths import Pattern
from crdt_state.resolvers import Escalation
from sync.wire import protocol as p
from sync.wire.changes import ErrorRecord
from sync.wire.convert import conflict_to_record, core_changes
from sync.wire.errors import ProtocolError

__all__ = [
    "client_policies",
    "judge_merge_unwaited",
    "refused_reply",
    "storage_failed_reply",
    "unsettled_default",
]

log = logging.getLogger("crdt_state.hub")

DOCUMENT_TOO_LARGE = "document_too_large"
INTERNAL_ERROR = "internal_error"
"""The error code of a merge whose judging failed unexpectedly (a bug, not bad input)."""


def judge_merge_unwaited(
    state: SharedState,
    request: p.MergeRequest,
    *,
    agent: str,
    scope: str,
    too_large: Callable[[int], bool],
) -> bytes:
    """Judge ``request`` against ``state`` without waiting for durability; the result frame.

    Runs at once (no await). The change is made in memory and handed to the store; the
    caller must not send the frame before ``state.when_durable`` reported every change
    made so far durable (one wait for a whole batch; :func:`storage_failed_reply` is
    the answer when that wait fails).

    Args:
        state: the room's state.
        request: the decoded request.
        agent: who the merge is by when the request names no agent.
        scope: whose request ids these are when the request names no writer (the
            connection's identity); see :func:`writer_of`.
        too_large: tells whether about that many more bytes would take the document
            past its size limit.

    Returns:
        The encoded merge result: ok, conflict (settled conflicts listed) or error
        (nothing written; the stable code in ``error.code``, a storage failure the
        commit raises at once included). An unexpected exception while judging (a bug
        in a policy or in the state, not bad input) is logged with its traceback and
        answered with the error ``internal_error``: the request gets a final answer,
        the connection stays open, and nothing is re-sent in a loop.
    """
    try:
        ops, base, options = _commit_arguments(state, request, agent, scope, too_large)
        result = state.commit(ops, base, wait=False, **options)
    except Exception as exc:
        return _refusal(exc, request, state, agent)
    return _ok_reply(request, result)


class _TooLarge(Exception):
    """The merge would take the document past its size limit (nothing written)."""


def _commit_arguments(
    state: SharedState,
    request: p.MergeRequest,
    agent: str,
    scope: str,
    too_large: Callable[[int], bool],
) -> tuple[list[Change], VersionVector, dict[str, Any]]:
    """What judging ``request`` commits: its changes, its base, the commit's options.

    The part of :func:`judge_merge_unwaited` before it commits.

    Raises:
        _TooLarge: the changes would take the document past its size limit.
        Exception: what parsing the request raises (answered by :func:`_refusal`).
    """
    ops, base = _parsed(request)
    if too_large(sum(len(repr(op.value)) for op in ops)):
        raise _TooLarge
    return ops, base, _commit_options(state, request, ops, agent, scope)


def _parsed(request: p.MergeRequest) -> tuple[list[Change], VersionVector]:
    """The request's changes as the core's, and its base (strict rules: network bytes)."""
    base = VersionVector.from_state(request.base, strict=True)
    return core_changes(request.changes), base


def _commit_options(
    state: SharedState, request: p.MergeRequest, ops: Sequence[Change], agent: str, scope: str
) -> dict[str, Any]:
    return {
        "agent": request.agent or agent,
        "resolvers": client_policies(state, ops, request.policies),
        "default": unsettled_default(state),
        "request_id": request.request_id,
        "writer": writer_of(request, scope),
        "builds_on": request.chain,
    }


def _ok_reply(request: p.MergeRequest, result: MergeResult) -> bytes:
    if not result.conflicts:
        return p.encode_ok_result(request.request_id, result.token.to_state(), result.applied)
    return p.encode_merge_result(
        request.request_id,
        p.MergeStatus.CONFLICT if result.conflicts else p.MergeStatus.OK,
        result.token.to_state(),
        applied=result.applied,
        conflicts=[conflict_to_record(c) for c in result.conflicts],
    )


def _refusal(exc: Exception, request: p.MergeRequest, state: SharedState, agent: str) -> bytes:
    """The error frame for a merge that raised ``exc`` while judged (nothing written)."""
    if isinstance(exc, _TooLarge):
        return _error_reply(request, state, DOCUMENT_TOO_LARGE, "document size limit reached")
    if isinstance(exc, ConflictError):
        return p.encode_merge_result(
            request.request_id,
            p.MergeStatus.ERROR,
            state.token.to_state(),
            conflicts=[conflict_to_record(c) for c in exc.conflicts],
            error=ErrorRecord("retry" if exc.retry else exc.code, exc.message),
        )
    if isinstance(exc, CrdtStateError | ProtocolError):
        # the code travels apart: the text without its "[code]" (a client shows it again)
        text = str(exc).removeprefix(f"[{exc.code}]").removeprefix(":").strip()
        return _error_reply(request, state, str(exc.code), text)
    log.error(
        "merge %d by %s: internal error while judging it",
        request.request_id,
        agent,
        exc_info=exc,
    )
    return _error_reply(request, state, INTERNAL_ERROR, "internal error while judging the merge")


def _report_to_client(conflict: Conflict) -> NoReturn:
    """The hub's default policy: leave the conflict to the merging client's policies.

    Recorded (the room's conflict audit, the inspector) as ``raise_conflict``, the name an
    in-process state gives the same refusal, not as this private function.
    """
    raise Escalation(False, "left to the merging client")


_report_to_client.__name__ = "raise_conflict"


def unsettled_default(state: SharedState) -> object | None:
    """Choose the default policy for a merge judged in a room.

    Returns:
        A policy that sends every overlap the room's rules do not settle back to the
        client, equal values included; ``None`` when the room has a default of its own.
    """
    return _report_to_client if state.policies.default is resolvers.raise_conflict else None


def client_policies(
    state: SharedState, ops: Sequence[Change], named: Sequence[tuple[int, str]]
) -> dict[Pattern, object] | None:
    """Map the policies the client named for its changes to the paths they govern.

    A named policy is used only where the room leaves the conflict to the client: no
    rule of the room governs the path and the room has no default of its own. Unknown
    names are ignored (the conflict then goes back to the client).

    Args:
        state: the room's state (its policy table decides what the room governs).
        ops: the merge's changes.
        named: ``(change index, policy name)`` pairs sent with the merge.

    Returns:
        The policies by path pattern, or ``None`` when none applies.
    """
    table = state.policies
    if not named or table.default is not resolvers.raise_conflict:
        return None
    chosen: dict[Pattern, object] = {}
    for index, name in named:
        policy = resolvers.NAMED_POLICIES.get(name)
        path = ops[index].path
        if policy is None or table.has_rule(path) or any(k in ("*", "**") for k in path):
            continue
        chosen[Pattern(path)] = policy
    return chosen or None


def writer_of(request: p.MergeRequest, scope: str) -> str:
    """Whose request ids these are: the writer the client names, or else its connection.

    The two are kept apart by a prefix, so no client can name a connection's scope.
    """
    return f"w:{request.writer}" if request.writer else f"c:{scope}"


def refused_reply(request: p.MergeRequest, state: SharedState, code: str, message: str) -> bytes:
    """The error result refusing ``request`` with ``code`` (nothing written).

    The token is the room's current one; ``message`` is for people.
    """
    return _error_reply(request, state, code, message)


def storage_failed_reply(
    request: p.MergeRequest, state: SharedState, error: BaseException
) -> bytes:
    """The error result of a merge judged with ``wait=False`` whose change was not stored.

    The answer when the durability wait after :func:`judge_merge_unwaited` raises
    ``error`` (a :class:`~crdt_state.StorageError`: code ``storage``); the token is the
    room's current one.
    """
    if not isinstance(error, Exception):  # stores report StorageError; be safe anyway
        error = StorageError(f"the change could not be stored: {error!r}")
    return _refusal(error, request, state, request.agent or "")


def _error_reply(request: p.MergeRequest, state: SharedState, code: str, message: str) -> bytes:
    return p.encode_merge_result(
        request.request_id,
        p.MergeStatus.ERROR,
        state.token.to_state(),
        error=ErrorRecord(code, message),
    )
