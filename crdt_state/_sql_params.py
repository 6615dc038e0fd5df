"""The Python around both engines' SQL: query filters and the parameters of written rows.

The SQLite file (:mod:`crdt_state._sqlite_log`) and the PostgreSQL tables
(:mod:`crdt_state._pg_log`) keep the same columns in the same encodings; only
the SQL text differs (SQLite's ``?`` against psycopg's ``%s``, and PostgreSQL's
``key`` column, which the caller puts first). Pure functions: no SQL runs here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ._kept import kept_encoding
from ._sqlite_file import descendants_range, encode_value, path_key
from .conflicts import Conflict, StateUpdate
from .paths import Path

__all__ = [
    "CONFLICT_COLUMNS",
    "LOG_COLUMNS",
    "conflict_filters",
    "conflict_params",
    "history_filters",
    "log_params",
    "paths_json",
]

LOG_COLUMNS: Final = "seq, token, doc_update, agent, origin, time, paths"
"""The log's columns, in the order of :func:`log_params` and ``stored_change``."""
CONFLICT_COLUMNS: Final = (
    "path, base, current, incoming, current_agent, incoming_agent, policy,"
    " resolution, applied, token, time"
)
"""The audit log's columns, as ``conflict_record`` reads them."""


_encoded_paths: dict[Any, str] = {}


def _encode_paths(paths: Sequence[Path]) -> str:
    return json.dumps([list(p) for p in paths])


def paths_json(paths: Sequence[Path]) -> str:
    """The ``paths`` column of a change: a JSON list of key lists (kept once encoded)."""
    return kept_encoding(_encoded_paths, paths, _encode_paths)


def history_filters(
    agent: str | None, since: float | None, until: float | None, mark: str
) -> tuple[list[str], list[Any]]:
    """The WHERE clauses and parameters of a history query (``mark``: ``?`` or ``%s``)."""
    clauses: list[str] = []
    params: list[Any] = []
    if agent is not None:
        clauses.append(f"agent = {mark}")
        params.append(agent)
    if since is not None:
        clauses.append(f"time >= {mark}")
        params.append(since)
    if until is not None:
        clauses.append(f"time <= {mark}")
        params.append(until)
    return clauses, params


def conflict_filters(
    path: Path | None, since: float | None, mark: str
) -> tuple[list[str], list[Any]]:
    """The WHERE clauses and parameters of an audit query: at or below ``path``, from ``since``."""
    clauses: list[str] = []
    params: list[Any] = []
    if path is not None:
        low, high = descendants_range(path)
        clauses.append(f"(path = {mark} OR (path >= {mark} AND path < {mark}))")
        params.extend([path_key(path), low, high])
    if since is not None:
        clauses.append(f"time >= {mark}")
        params.append(since)
    return clauses, params


def log_params(
    changes: Sequence[StateUpdate], tokens: Sequence[bytes]
) -> list[tuple[int, bytes, bytes, str | None, str, float, str]]:
    """The log rows of ``changes`` (with their encoded ``tokens``), in :data:`LOG_COLUMNS` order."""
    return [
        (c.seq, t, c.update, c.agent, c.origin, c.time, paths_json(c.paths))
        for c, t in zip(changes, tokens, strict=True)
    ]


def conflict_params(conflicts: Iterable[Conflict], when: float) -> list[tuple[Any, ...]]:
    """The audit rows of ``conflicts`` from ``time`` to ``policy``, then ``resolution``.

    The caller adds ``applied`` and ``token`` (each engine encodes ``applied`` its own way).
    """
    return [
        (
            when,
            path_key(c.path),
            encode_value(c.base),
            encode_value(c.current),
            encode_value(c.incoming),
            c.current_agent,
            c.incoming_agent,
            c.policy,
            encode_value(c.resolution),
        )
        for c in conflicts
    ]
