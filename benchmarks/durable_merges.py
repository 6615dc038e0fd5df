"""Acknowledged merges per second: durable (SQLite or PostgreSQL, group commit) vs in memory.

Each agent is a thread that loops: fork a branch, write one field of its own
(the state has ``--keys`` fields, or one per agent when there are more),
merge. A merge counts once it has returned (for a durable state: once its
update is committed to the file with the chosen durability). The same
workload runs with 1, 10 and 50 concurrent agents on an in-memory state and
on durable states, and the table shows the ratio durable / in-memory.

``--stores sqlite,postgres`` adds PostgreSQL columns (:mod:`crdt_state.postgres`): the
states are keys in a throwaway database created on the server of ``--dsn`` (default
``CRDT_STATE_BENCH_POSTGRES``, else a local server as user postgres) and dropped after.

    python benchmarks/durable_merges.py [--seconds 2] [--keys 20] [--modes full,normal]
        [--stores sqlite,postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from crdt_state import SharedState

DEFAULT_DSN = "host=127.0.0.1 user=postgres dbname=postgres"


def run(state: SharedState, agents: int, seconds: float, keys: int) -> float:
    """Merges per second acknowledged by ``agents`` threads during ``seconds``."""
    state.commit({f"field{k}": 0 for k in range(max(keys, agents))}, state.token, "setup")
    stop = threading.Event()
    counts = [0] * agents
    start = threading.Barrier(agents + 1)

    def agent(i: int) -> None:
        name = f"agent{i}"
        field = f"field{i}"  # disjoint writes: every merge applies, none conflicts
        start.wait()
        n = 0
        while not stop.is_set():
            branch = state.fork(name)
            branch[field] = n
            branch.merge()
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(agents)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    return sum(counts) / elapsed


@contextlib.contextmanager
def throwaway_database(admin_dsn: str) -> Iterator[str]:
    """A fresh database on the server of ``admin_dsn`` (its DSN), dropped afterwards."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"crdt_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--agents", default="1,10,50")
    parser.add_argument("--modes", default="full", help="durability modes, e.g. full,normal,off")
    parser.add_argument("--stores", default="sqlite", help="sqlite, postgres or sqlite,postgres")
    parser.add_argument("--dsn", default=os.environ.get("CRDT_STATE_BENCH_POSTGRES", DEFAULT_DSN))
    args = parser.parse_args()
    counts = [int(a) for a in args.agents.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    stores = [s for s in args.stores.split(",") if s]
    columns = [(store, mode) for store in stores for mode in modes]

    rows = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        dsn = stack.enter_context(throwaway_database(args.dsn)) if "postgres" in stores else ""

        def opener(store: str, mode: str, agents: int) -> Callable[[], SharedState]:
            if store == "postgres":
                from crdt_state.postgres import open_postgres

                return lambda: open_postgres(dsn, f"{mode}-{agents}", durability=mode)
            return lambda: SharedState.open(
                os.path.join(tmp, f"{mode}-{agents}.db"), durability=mode
            )

        for agents in counts:
            memory = run(SharedState(), agents, args.seconds, args.keys)
            durable = {}
            for store, mode in columns:
                state = opener(store, mode, agents)()
                try:
                    durable[store, mode] = run(state, agents, args.seconds, args.keys)
                finally:
                    state.close()
            rows.append((agents, memory, durable))

    header = f"{'agents':>6} {'in-memory/s':>12}"
    for store, mode in columns:
        label = f"{store[:2]}-{mode}" if len(stores) > 1 else mode
        header += f" {label + '/s':>13} {label + '/mem':>12}"
    print(header)
    for agents, memory, durable in rows:
        line = f"{agents:>6} {memory:>12,.0f}"
        for column in columns:
            line += f" {durable[column]:>13,.0f} {durable[column] / memory:>12.2f}"
        print(line)


if __name__ == "__main__":
    main()
