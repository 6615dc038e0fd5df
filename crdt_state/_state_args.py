"""The argument checks of :class:`~crdt_state.state.SharedState`'s entry points.

Pure functions that refuse arguments of the wrong type with
:class:`~crdt_state.errors.WrongType` before the state is touched, so a caller's
mistake reads as one (which argument, what was given) rather than as a failure deep
inside a merge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from .errors import WrongType
from .paths import lone_surrogate
from .version import VersionVector

__all__ = ["MAX_AGENT_LENGTH", "check_agent", "check_commit"]


MAX_AGENT_LENGTH: Final = 256
"""The longest agent name (characters): it is stored with every change, in the log, the
history, blame and conflict records, and sent to every inspector."""


def check_agent(agent: object) -> None:
    """Refuse an ``agent`` that is not a non-empty str of at most :data:`MAX_AGENT_LENGTH`.

    (What :meth:`SharedState.fork` takes.)

    Raises:
        WrongType: with ``details["agent"]``, the repr of what was given (cut short).
    """
    if not _fit(agent):
        raise WrongType(_agent_wanted(agent), details={"agent": repr(agent)[:80]})


def _agent_wanted(agent: object) -> str:
    return (
        f"agent must be a non-empty str of at most {MAX_AGENT_LENGTH} characters "
        f"of Unicode text, not {agent!r:.60}"
    )


def _fit(agent: object) -> bool:
    """True for a name an agent may have (stored with every change, so UTF-8 text).

    A lone surrogate in a name made a durable state's store fail for good.
    """
    if not isinstance(agent, str) or not agent or len(agent) > MAX_AGENT_LENGTH:
        return False
    return lone_surrogate(agent) is None


def check_commit(changes: object, base: object, agent: object) -> None:
    """Refuse arguments of the wrong type before anything is judged.

    Raises:
        WrongType: ``base`` is not a :class:`VersionVector`, ``agent`` not a
            non-empty str, or ``changes`` neither a mapping nor an iterable of
            :class:`Change` (``path``: the first path changed, when known).
    """
    if (
        type(changes) is list
        and type(base) is VersionVector
        and type(agent) is str
        and 0 < len(agent) <= MAX_AGENT_LENGTH
        and agent.isascii()
    ):
        return  # the common call (a hub's), which passes every check: no ABC checks
    _check_commit(changes, base, agent)


def _check_commit(changes: object, base: object, agent: object) -> None:
    """:func:`check_commit` without its shortcut for the common argument types."""
    paths = list(changes) if isinstance(changes, Mapping) else []
    where = paths[0] if paths and isinstance(paths[0], str | tuple) else None
    where = (where,) if isinstance(where, str) else where
    if not isinstance(base, VersionVector):
        raise WrongType(
            f"base must be the VersionVector the changes were computed from (state.token "
            f"when you read), not {type(base).__name__}",
            path=where,
            details={"argument": "base", "given": repr(base)[:80]},
        )
    if not _fit(agent):
        raise WrongType(
            _agent_wanted(agent),
            path=where,
            details={"argument": "agent", "given": repr(agent)[:80]},
        )
    if not isinstance(changes, Mapping) and (
        isinstance(changes, str | bytes) or not isinstance(changes, Iterable)
    ):
        raise WrongType(
            "changes must be a mapping {path: value} or an iterable of Change, "
            f"not {type(changes).__name__}",
            details={"argument": "changes", "given": repr(changes)[:80]},
        )
