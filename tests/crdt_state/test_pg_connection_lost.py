"""Which psycopg errors a PostgreSQL store reports as ``"unavailable"`` (pure)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from crdt_state._pg_connect import connection_lost


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (psycopg.OperationalError("consuming input failed: server closed the connection"), True),
        (errors.lookup("08006")("connection failure"), True),
        (errors.lookup("08003")("connection does not exist"), True),
        (errors.lookup("57P01")("terminating connection due to administrator command"), True),
        (errors.lookup("57P02")("crash shutdown"), True),
        (errors.lookup("57P03")("the database system is starting up"), True),
        (errors.lookup("57014")("canceling statement due to statement timeout"), False),
        (errors.lookup("23505")("duplicate key value violates unique constraint"), False),
        (errors.lookup("40001")("could not serialize access"), False),
        (psycopg.ProgrammingError("the query has 2 placeholders but 1 parameters"), False),
        (psycopg.InterfaceError("the connection is closed"), False),
    ],
)
def test_connection_lost_tells_a_gone_server_from_a_failed_statement(
    error: psycopg.Error, lost: bool
) -> None:
    assert connection_lost(error) is lost
