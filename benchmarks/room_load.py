"""Loading stored rooms: what a new cluster owner (judge) and a replica pay per change.

Builds ``--rooms`` states with ``--changes`` logged changes each (every change one agent's
merge setting its own key, as ``benchmarks/cluster.py`` does; ``keep_history`` large
enough that nothing is compacted) in a throwaway PostgreSQL database and in SQLite files,
then times loading them the way the hubs do:

- ``fetch``: the log rows as the driver returns them (one query, no checks);
- ``rows``: the store's ``load()`` (fetch plus checking and decoding every column);
- ``judge``: ``open_postgres`` / ``SharedState.open`` (load, then replay: the judge);
- ``replay``: ``judge`` minus ``rows`` (applying the changes, the mirror, the tokens and
  the change log);
- ``replica``: the cluster's replica load (``load_stored``, then a follower state applying
  the snapshot and every change);
- ``yjs``: a bare pycrdt document applying the same updates (the floor).

Per-change microseconds (median of ``--repeat`` rounds over all rooms). ``--profile``
prints the top of a cProfile of the judge loads.

    PYTHONPATH=. python benchmarks/room_load.py [--rooms 17] [--changes 1250] [--repeat 3]
        [--profile] [--postgres DSN]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pycrdt import Doc

from crdt_state import SharedState
from crdt_state.postgres import load_stored, open_postgres
from crdt_state.storage import SqliteStore
from tests.throwaway_postgres import (
    create_database,
    drop_database,
    postgres_admin_dsn,
)

AGENTS = 10


def fill(state: SharedState, changes: int) -> None:
    """``changes`` merges, each an agent setting its own key to the next count."""
    for n in range(changes):
        branch = state.fork(f"agent-{n % AGENTS}")
        branch.set(f"a{n % AGENTS}", n)
        branch.merge()


def build(dsn: str, folder: str, rooms: int, changes: int) -> list[str]:
    """The rooms' keys (PostgreSQL) and files (SQLite), filled."""
    keys = [f"room-{r}" for r in range(rooms)]
    for key in keys:
        options: dict[str, Any] = {"durability": "off", "keep_history": 10 * changes}
        for state in (
            open_postgres(dsn, key, **options),
            SharedState.open(os.path.join(folder, f"{key}.db"), **options),
        ):
            fill(state, changes)
            state.close()
    return keys


def timed(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def replica(dsn: str, key: str) -> SharedState:
    """As ``sync.server.cluster.pgstorage.PostgresRoomStorage.open_replica``."""
    stored = load_stored(dsn, key)
    state = SharedState(follower=True)
    assert stored is not None
    if stored.snapshot:
        state.apply_update(stored.snapshot, agent="cluster")
    for change in stored.changes:
        state.apply_update(change.update, agent=change.agent)
    return state


def fetch_pg(dsn: str, key: str) -> None:
    import psycopg

    from crdt_state._sql_params import LOG_COLUMNS

    with psycopg.connect(dsn) as conn:
        conn.execute(
            f"SELECT {LOG_COLUMNS} FROM crdt_store_log WHERE key = %s ORDER BY seq", (key,)
        ).fetchall()


def fetch_sqlite(path: str) -> None:
    import sqlite3

    from crdt_state._sql_params import LOG_COLUMNS

    conn = sqlite3.connect(path)
    try:
        conn.execute(f"SELECT {LOG_COLUMNS} FROM log ORDER BY seq").fetchall()
    finally:
        conn.close()


def rows_pg(dsn: str, key: str) -> None:
    load_stored(dsn, key)


def rows_sqlite(path: str) -> None:
    store = SqliteStore.open(path, read_only=True)
    try:
        store.load()
    finally:
        store.close()


def bare_yjs(updates: list[bytes]) -> None:
    doc: Doc[Any] = Doc()
    for update in updates:
        doc.apply_update(update)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=17)
    parser.add_argument("--changes", type=int, default=1250)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--postgres", default=postgres_admin_dsn())
    args = parser.parse_args()

    dsn = create_database(args.postgres)
    try:
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            keys = build(dsn, folder, args.rooms, args.changes)
            print(f"built {args.rooms} rooms x {args.changes} changes in "
                  f"{time.perf_counter() - start:.1f} s")  # fmt: skip
            files = [os.path.join(folder, f"{k}.db") for k in keys]
            stored = [load_stored(dsn, k) for k in keys]
            updates = [[c.update for c in s.changes] for s in stored if s is not None]

            def each(load: Callable[[Any], Any], places: list[Any]) -> Callable[[], None]:
                def run() -> None:
                    for place in places:
                        result = load(place)
                        if isinstance(result, SharedState):
                            result.close()

                return run

            stages: dict[str, dict[str, Callable[[], None]]] = {
                "postgres": {
                    "fetch": each(lambda k: fetch_pg(dsn, k), keys),
                    "rows": each(lambda k: rows_pg(dsn, k), keys),
                    "judge": each(lambda k: open_postgres(dsn, k), keys),
                    "replica": each(lambda k: replica(dsn, k), keys),
                    "yjs": each(bare_yjs, updates),
                },
                "sqlite": {
                    "fetch": each(fetch_sqlite, files),
                    "rows": each(rows_sqlite, files),
                    "judge": each(lambda f: SharedState.open(f, durability="off"), files),
                },
            }
            total = args.rooms * args.changes
            print(f"\nper change, µs (median of {args.repeat} rounds, {total} changes a round)")
            columns = ("fetch", "rows", "replay", "judge", "replica", "yjs")
            print(f"| store | {' | '.join(columns)} |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for engine, runs in stages.items():
                found: dict[str, float] = {}
                for name, run in runs.items():
                    seconds = statistics.median(timed(run) for _ in range(args.repeat))
                    found[name] = seconds * 1e6 / total
                found["replay"] = found["judge"] - found["rows"]
                cells = [f"{found[c]:.1f}" if c in found else "-" for c in columns]
                print(f"| {engine} | {' | '.join(cells)} |")
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                stages["postgres"]["judge"]()
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    finally:
        drop_database(args.postgres, dsn)


if __name__ == "__main__":
    main()
