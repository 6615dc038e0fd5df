"""What an offline agent's queued merges cost the judge: chained against unchained.

An agent that keeps merging while its hub is away queues its merges; each builds on
every merge queued before it (a *chain*, ``SharedState.commit(builds_on=...)``), and
all share the fork base the agent last had from the hub. When they are sent, merge ``k``
names ``k - 1`` earlier requests, so the judge's work per merge grows with ``k``. This
times N such merges (each setting one key, all on one base) committed in one process:

- ``unchained``: the same N merges each on the newest token, no chain (the floor);
- ``chained``: as an agent's queue arrives, merge ``k`` building on merges ``1..k-1``;

and prints both totals, their ratio, and the chained merge's cost at the queue's tail.
With ``--against DIR`` (a checkout of another revision, e.g. made with ``git worktree
add DIR REV``) the chained run is also timed on that revision's library, side by side.
Run it with ``python benchmarks/chains.py`` (``--sizes 1000,3000``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ONE_RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from crdt_state import SharedState
n, chained = int(sys.argv[2]), sys.argv[3] == "chained"
state = SharedState()
base = state.token
tail = []
started = time.perf_counter()
for k in range(1, n + 1):
    t = time.perf_counter()
    if chained:
        state.commit({"n": k}, base, "w", request_id=k, writer="w", builds_on=range(1, k))
    else:
        state.commit({"n": k}, state.token, "w", request_id=k, writer="w")
    if k > n - 50:
        tail.append(time.perf_counter() - t)
total = time.perf_counter() - started
assert state.read()[0] == {"n": n}
print(json.dumps({"total": total, "tail": sorted(tail)[len(tail) // 2]}))
"""


def run(root: str, n: int, kind: str) -> dict[str, float]:
    """One run in a fresh interpreter on the library at ``root``: total and tail seconds."""
    out = subprocess.run(
        [sys.executable, "-c", ONE_RUN, root, str(n), kind],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="500,1000,2000,4000", help="queue lengths")
    parser.add_argument("--against", help="another checkout's root, timed side by side")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1])
    head = "| queued | unchained s | chained s | chained / unchained | tail ms a merge |"
    if args.against:
        head += " against: chained s | against / this |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in (int(s) for s in args.sizes.split(",")):
        plain = run(here, n, "unchained")
        chained = run(here, n, "chained")
        row = (
            f"| {n:,} | {plain['total']:.2f} | {chained['total']:.2f} |"
            f" {chained['total'] / plain['total']:.1f} | {chained['tail'] * 1000:.2f} |"
        )
        if args.against:
            other = run(args.against, n, "chained")
            row += f" {other['total']:.2f} | {other['total'] / chained['total']:.1f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
