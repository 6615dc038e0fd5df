"""The engine-neutral part of the history queries: filters and the answers for lost versions.

Both stores' readers (:mod:`crdt_state._sqlite_reads`, :mod:`crdt_state._pg_reads`)
fetch the log rows with SQL filtering by agent and time; :class:`HistoryQuery`
carries the filters and picks the rows by path and limit. :func:`missing_version`
is the error of ``at`` for a token no retained version has. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .errors import StaleBase, UnknownBase, WrongType
from .journal import HistoryEntry, StoredChange
from .paths import Path, parse_path, related
from .times import as_time
from .version import VersionVector

__all__ = ["HistoryQuery", "missing_version"]


@dataclass(frozen=True, slots=True)
class HistoryQuery:
    """The filters of a ``history`` query (see :meth:`crdt_state.journal.StateStore.history`)."""

    agent: str | None = None
    """Only changes by this agent (filtered in SQL)."""
    since: float | None = None
    """Only changes at or after this time (filtered in SQL)."""
    until: float | None = None
    """Only changes at or before this time (filtered in SQL)."""
    wanted: Path | None = None
    """Only changes that wrote this path, an ancestor or a descendant."""
    limit: int | None = None
    """Only the newest ``limit`` matches."""

    @classmethod
    def of(
        cls,
        agent: str | None,
        path: Any,
        since: object,
        until: object,
        limit: object,
    ) -> HistoryQuery:
        """The query of ``history(...)``'s arguments.

        Raises:
            InvalidPath: ``path`` is not a path.
            WrongType: ``agent``, ``since``, ``until`` or ``limit`` is not one (``since``
                and ``until`` as :func:`crdt_state.times.as_time` reads them).
        """
        wanted = parse_path(path) if path is not None else None
        if agent is not None and not isinstance(agent, str):
            raise WrongType(
                f"agent is a name (str), not {type(agent).__name__}",
                details={"agent": repr(agent)[:80]},
            )
        count: int | None = None
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                raise WrongType(
                    f"limit is a count (an int >= 0), not {limit!r:.40}",
                    details={"limit": repr(limit)[:80]},
                )
            count = limit
        return cls(agent, as_time(since, "since"), as_time(until, "until"), wanted, count)

    def pick(self, rows: Iterable[StoredChange]) -> list[HistoryEntry]:
        """The entries of the ``rows`` (already filtered by agent and time) this query wants."""
        wanted = self.wanted
        out = [
            HistoryEntry(
                seq=r.seq, token=r.token, agent=r.agent, paths=r.paths, time=r.time, origin=r.origin
            )
            for r in rows
            if wanted is None or any(related(p, wanted) for p in r.paths)
        ]
        return out[-self.limit :] if self.limit is not None else out


def missing_version(token: VersionVector, oldest: VersionVector) -> StaleBase | UnknownBase:
    """The error of ``at(token)`` when no retained version has ``token``.

    Args:
        token: the version asked for.
        oldest: the token of the oldest retained version (the snapshot).

    Returns:
        :class:`StaleBase` for a version compacted away, else :class:`UnknownBase`.
    """
    if token <= oldest:
        return StaleBase(
            "this version is older than the retained history (compacted away)",
            details={"token": str(token), "oldest": str(oldest)},
        )
    return UnknownBase("this state never had exactly this version", details={"token": str(token)})
