"""Acknowledged merges per second: durable (SQLite, group commit) vs in memory.

Each agent is a thread that loops: fork a branch, write one field of its own
(the state has ``--keys`` fields, or one per agent when there are more),
merge. A merge counts once it has returned (for a durable state: once its
update is committed to the file with the chosen durability). The same
workload runs with 1, 10 and 50 concurrent agents on an in-memory state and
on durable states, and the table shows the ratio durable / in-memory.

    python benchmarks/durable_merges.py [--seconds 2] [--keys 20] [--modes full,normal]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

from crdt_state import SharedState


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--agents", default="1,10,50")
    parser.add_argument("--modes", default="full", help="durability modes, e.g. full,normal,off")
    args = parser.parse_args()
    counts = [int(a) for a in args.agents.split(",")]
    modes = [m for m in args.modes.split(",") if m]

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for agents in counts:
            memory = run(SharedState(), agents, args.seconds, args.keys)
            durable = {}
            for mode in modes:
                path = os.path.join(tmp, f"{mode}-{agents}.db")
                state = SharedState.open(path, durability=mode)
                try:
                    durable[mode] = run(state, agents, args.seconds, args.keys)
                finally:
                    state.close()
            rows.append((agents, memory, durable))

    header = f"{'agents':>6} {'in-memory/s':>12}"
    for mode in modes:
        header += f" {mode + '/s':>10} {mode + '/mem':>9}"
    print(header)
    for agents, memory, durable in rows:
        line = f"{agents:>6} {memory:>12,.0f}"
        for mode in modes:
            line += f" {durable[mode]:>10,.0f} {durable[mode] / memory:>9.2f}"
        print(line)


if __name__ == "__main__":
    main()
