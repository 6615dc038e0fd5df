"""The PostgreSQL privileges a hub's role needs: checked at start, told as what to grant.

A hub's role needs, once the tables exist (the first hub of a release creates or
migrates them, which takes ``CREATE`` on the schema, or owning the tables it alters):

==========================  =================================================================
``crdt_schema``             ``SELECT`` (the cluster's schema version)
``crdt_cluster``            ``SELECT`` (the cluster's id: its Redis key space)
``crdt_rooms``              ``SELECT, INSERT, UPDATE`` (fencing numbers, positions)
``crdt_store_schema``       ``SELECT`` (the room store's format version)
``crdt_store_snapshot``,    ``SELECT, INSERT, UPDATE, DELETE`` (the rooms' states, written by
``crdt_store_log``,         the owner hub, compacted)
``crdt_store_blame``,
``crdt_store_conflicts``,
``crdt_store_requests``
``crdt_store_requests_n``   ``USAGE`` (a sequence)
==========================  =================================================================

and all hubs of a cluster connect as one role (a new owner ends the sessions of a
deposed one's stalled writes with ``pg_terminate_backend``: the same role, or one granted
``pg_signal_backend``). The room store's tables (``crdt_store_*``, see
``crdt_state.postgres``) are created when the first room is opened: while they are
missing the role also needs ``CREATE`` on the schema.

:func:`check_privileges` reads them all in two queries (``has_table_privilege``...) and
raises one :class:`~sync.server.HubConfigError` (code ``postgres_privileges``) naming
every privilege missing and the ``GRANT`` statements that give them;
:func:`privilege_error` is the same error for a statement the server refused
(``InsufficientPrivilege``), as while migrating. The rest is pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import psycopg

from sync.server._security import HubConfigError

__all__ = [
    "NEEDS",
    "STORE_TABLES",
    "Need",
    "check_privileges",
    "grant_statements",
    "missing_privileges",
    "privilege_error",
]


@dataclass(frozen=True)
class Need:
    """``privileges`` a hub's role needs on ``relation`` (a ``table`` or a ``sequence``)."""

    relation: str
    kind: Literal["table", "sequence"]
    privileges: tuple[str, ...]


STORE_TABLES: Final = (
    "crdt_store_snapshot",
    "crdt_store_log",
    "crdt_store_blame",
    "crdt_store_conflicts",
    "crdt_store_requests",
)
"""The room store's data tables (``crdt_state._pg_schema``; a test keeps the two equal)."""

_WRITE: Final = ("SELECT", "INSERT", "UPDATE", "DELETE")

NEEDS: Final[tuple[Need, ...]] = (
    Need("crdt_schema", "table", ("SELECT",)),
    Need("crdt_cluster", "table", ("SELECT",)),
    Need("crdt_rooms", "table", ("SELECT", "INSERT", "UPDATE")),
    Need("crdt_store_schema", "table", ("SELECT",)),
    *(Need(table, "table", _WRITE) for table in STORE_TABLES),
    Need("crdt_store_requests_n", "sequence", ("USAGE",)),
)
"""Every privilege a hub's role needs once the tables exist (the module's table)."""

_CHECK: Final = """
SELECT n.relation, n.kind, n.privilege,
       CASE WHEN to_regclass(n.relation) IS NULL THEN NULL
            WHEN n.kind = 'sequence'
            THEN has_sequence_privilege(to_regclass(n.relation)::oid, n.privilege)
            ELSE has_table_privilege(to_regclass(n.relation)::oid, n.privilege) END
FROM unnest(%s::text[], %s::text[], %s::text[]) AS n(relation, kind, privilege)
"""

_PLAIN_NAME: Final = re.compile(r"[a-z_][a-z0-9_$]*")


def quote_name(name: str) -> str:
    """``name`` as an SQL identifier (double-quoted unless plain lower case)."""
    return name if _PLAIN_NAME.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def _grouped(needs: Iterable[Need]) -> list[tuple[str, tuple[str, ...], list[str]]]:
    """``needs`` as ``(kind, privileges, relations)``, one per kind and privileges, in order."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for need in needs:
        grouped.setdefault((need.kind, need.privileges), []).append(need.relation)
    return [(kind, privileges, relations) for (kind, privileges), relations in grouped.items()]


def grant_statements(role: str, needs: Iterable[Need]) -> list[str]:
    """The ``GRANT`` statements that give ``role`` every privilege of ``needs``.

    Relations needing the same privileges share one statement, in ``needs``' order.
    """
    return [
        f"GRANT {', '.join(privileges)} ON {'SEQUENCE ' if kind == 'sequence' else ''}"
        f"{', '.join(relations)} TO {quote_name(role)};"
        for kind, privileges, relations in _grouped(needs)
    ]


def missing_privileges(
    rows: Iterable[tuple[str, str, str, bool | None]], needs: Sequence[Need] = NEEDS
) -> tuple[list[Need], list[str]]:
    """What ``rows`` (relation, kind, privilege, held: ``None`` if absent) lack.

    Returns the privileges missing on existing relations (as :class:`Need`, in
    ``needs``' order) and the relations that do not exist.
    """
    lacking: dict[str, list[str]] = {}
    absent: list[str] = []
    for relation, _, privilege, held in rows:
        if held is None:
            if relation not in absent:
                absent.append(relation)
        elif not held:
            lacking.setdefault(relation, []).append(privilege)
    missing = [
        Need(n.relation, n.kind, tuple(p for p in n.privileges if p in lacking[n.relation]))
        for n in needs
        if n.relation in lacking
    ]
    return missing, absent


async def check_privileges(conn: psycopg.AsyncConnection[Any]) -> None:
    """Raise unless ``conn``'s role holds every privilege a hub needs (see the module doc).

    Run once the cluster's schema is migrated. Missing store tables (no room opened
    yet) are fine when the role may create them.

    Raises:
        HubConfigError: code ``postgres_privileges``, naming what is missing and the
            statements that grant it.
    """
    cur = await conn.execute(
        "SELECT current_user, current_schema(),"
        " coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)"
    )
    row = await cur.fetchone()
    assert row is not None
    role, schema, may_create = str(row[0]), row[1], bool(row[2])
    columns: tuple[list[str], list[str], list[str]] = ([], [], [])
    for need in NEEDS:
        for privilege in need.privileges:
            for column, value in zip(columns, (need.relation, need.kind, privilege), strict=True):
                column.append(value)
    cur = await conn.execute(_CHECK, columns)
    missing, absent = missing_privileges(await cur.fetchall())
    if absent and may_create:
        absent = []  # the first room opened creates them
    if not missing and not absent:
        return
    wanted: list[str] = []
    if missing:
        lists = "; ".join(
            f"{', '.join(privileges)} on {', '.join(relations)}"
            for _, privileges, relations in _grouped(missing)
        )
        wanted.append(f"lacks {lists}")
    grants = grant_statements(role, missing)
    if absent:
        where = schema or "public"
        wanted.append(f"may not create {', '.join(absent)} (missing) in schema {where}")
        grants.append(f"GRANT CREATE ON SCHEMA {quote_name(where)} TO {quote_name(role)};")
    raise HubConfigError(
        "postgres_privileges",
        f"the PostgreSQL role {role!r} {' and '.join(wanted)}: as the owner of the tables "
        f"(and the schema), run {' '.join(grants)}",
    )


def privilege_error(role: str, doing: str, exc: psycopg.Error) -> HubConfigError:
    """The :class:`HubConfigError` for ``exc``, a privilege the server refused ``role``.

    ``doing`` says what the hub was doing (``"create the cluster's tables"``). The advice
    follows the server's words: ``permission denied for schema S`` -> grant ``CREATE``
    on it; ``for table T`` -> grant what a hub needs on ``T``; ``must be owner`` -> migrate
    as the tables' owner.
    """
    primary = (exc.diag.message_primary or str(exc)).strip()
    schema = re.search(r"permission denied for schema (\S+)", primary)
    table = re.search(r"permission denied for (?:table|relation|sequence) (\S+)", primary)
    if schema is not None:
        advice = (
            f"grant it as the database's owner: GRANT CREATE ON SCHEMA {schema[1]} TO "
            f"{quote_name(role)}; or start one hub as a role that may create tables there "
            "(the database's owner), after which this role needs only: "
            + " ".join(grant_statements(role, NEEDS))
        )
    elif table is not None:
        needs = [n for n in NEEDS if n.relation == table[1]] or list(NEEDS)
        advice = "grant it as the table's owner: " + " ".join(grant_statements(role, needs))
    elif "must be owner" in primary:
        advice = (
            "start the first hub of this release as the tables' owner (it upgrades the "
            "schema); other hubs need only: " + " ".join(grant_statements(role, NEEDS))
        )
    else:
        advice = "a hub's role needs: " + " ".join(grant_statements(role, NEEDS))
    return HubConfigError(
        "postgres_privileges", f"the PostgreSQL role {role!r} may not {doing} ({primary}): {advice}"
    )
