"""What a fork and a merge cost, next to raw pycrdt doing the same work in the same run.

For states of 10, 1,000 and 100,000 keys it times:

- fork: ``SharedState.fork()`` against the raw pycrdt way to fork a document,
  ``Doc()`` + ``apply_update(base bytes)``;
- merge: ``Branch.merge()`` of a branch holding a 1-key edit, against raw
  pycrdt applying a 1-key update to the document;

and, on a 100-key state, the rate of whole fork-edit-merge cycles, next to a
plain dict updated under a ``threading.Lock`` and to a raw pycrdt cycle
(copy the document, edit, send the update back).

Then list writes of 1,000, 10,000 and 100,000 items, of two shapes (plain
values only; plain values with one small dict in eight): raw pycrdt
``Array(list)`` (super-linear: run in a subprocess and given up after 20 s),
``SharedState.commit`` of the list, a branch appending n items to an existing
n-item list, a typed state's commit, a replica's ``apply_update`` of the
list, and raw pycrdt applying a Yjs update carrying the same items (the floor).

Then fan-outs: N branches forked from one base, each merged in turn, so the
k-th merge has k-1 merges since its base: each branch setting its own key,
each incrementing one counter (``resolvers.counter``), each appending to one
list. A merge is judged on the entries that touched its paths, so its cost
should not grow with N. With ``--against DIR`` (a checkout of another
revision, e.g. made with ``git worktree add DIR REV``) the same fan-outs also
run on that revision's library, printed side by side with the ratio.

Machines are noisy, so every figure is a median over repeated runs and the
goals are checked as ratios measured in the same run. Run it with
``python benchmarks/merge_cost.py`` (``--quick`` for a shorter run,
``--lists`` for the list table alone, ``--fanout`` for the fan-out table
alone, ``--against DIR`` to compare the fan-outs with another checkout).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pycrdt import Array, Doc, Map
from pydantic import BaseModel

from crdt_state import SharedState, resolvers

SIZES = (10, 1_000, 100_000)
CYCLE_KEYS = 100
GOAL_FORK = 1.5  # crdt_state fork / raw fork
GOAL_MERGE = 3.0  # crdt_state merge / raw apply
GOAL_FLAT = 2.0  # merge at 100k keys / merge at 10 keys
GOAL_CYCLES = 10_000  # fork-edit-merge cycles per second on a 100-key state

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 5
LIST_SIZES = (1_000, 10_000, 100_000)
LIST_GOAL_S = 1.0  # writing or appending 100,000 items, in seconds
RAW_CAP_S = 20.0  # raw pycrdt is not run where it is expected to take longer
FANOUT_SIZES = (1_000, 10_000)
FANOUT_SHAPES = ("own key", "one counter", "one list")
GOAL_FANOUT = 2.0  # mean merge at the largest fan-out / at the smallest
FANOUT_CAP_S = 900.0  # a fan-out run on another checkout is given up after this


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def timed(fn: Callable[[], object], count: int) -> list[float]:
    """Per-call durations of ``count`` calls of ``fn``."""
    clock = time.perf_counter
    out = []
    for _ in range(count):
        start = clock()
        fn()
        out.append(clock() - start)
    return out


def rounds(measure: Callable[[], float]) -> float:
    """The median of ``ROUNDS`` repetitions of a measurement (each itself a median)."""
    results = []
    for _ in range(ROUNDS):
        gc.collect()
        results.append(measure())
    return statistics.median(results)


# -- raw pycrdt -----------------------------------------------------------------------
def raw_doc(keys: int) -> Doc[Any]:
    doc: Doc[Any] = Doc()
    root = doc.get("state", type=Map)
    with doc.transaction():
        for i in range(keys):
            root[f"k{i}"] = i
    return doc


def raw_fork_us(base: bytes, count: int) -> float:
    def fork() -> None:
        copy: Doc[Any] = Doc()
        copy.apply_update(base)

    return median_us(timed(fork, count))


def raw_apply_us(doc: Doc[Any], base: bytes, count: int) -> float:
    """Apply ``count`` 1-key updates made by another client (made beforehand, not timed)."""
    writer: Doc[Any] = Doc()
    writer.apply_update(base)
    root = writer.get("state", type=Map)
    updates = []
    for i in range(count):
        before = writer.get_state()
        root["k1"] = -i
        updates.append(writer.get_update(before))
    pending = iter(updates)
    return median_us(timed(lambda: doc.apply_update(next(pending)), count))


def raw_edit_apply_us(doc: Doc[Any], base: bytes, count: int) -> float:
    """Edit one key on a branch document, encode the edit, apply it to ``doc``: all timed.

    This is the whole of what a crdt_state merge does for a 1-key branch (it
    writes the edit into the document at merge time), so it is the like-for-like
    raw figure; ``raw_apply_us`` times the last step alone.
    """
    writer: Doc[Any] = Doc(client_id=11)
    writer.apply_update(base)
    root = writer.get("state", type=Map)

    def one(i: int) -> None:
        before = writer.get_state()
        root["k1"] = i
        doc.apply_update(writer.get_update(before))

    counter = iter(range(count))
    return median_us(timed(lambda: one(next(counter)), count))


def edit_merge_us(state: SharedState, count: int) -> float:
    """Median time of ``Branch.set`` of one key plus ``Branch.merge()``."""
    clock = time.perf_counter
    out = []
    for i in range(count):
        branch = state.fork("agent")
        start = clock()
        branch.set("k1", -i)
        branch.merge()
        out.append(clock() - start)
    return median_us(out)


# -- crdt_state -------------------------------------------------------------------------
def filled_state(keys: int) -> SharedState:
    state = SharedState()
    state.commit({f"k{i}": i for i in range(keys)}, state.token, "loader")
    return state


def fork_us(state: SharedState, count: int) -> float:
    return median_us(timed(lambda: state.fork("agent"), count))


def merge_us(state: SharedState, count: int) -> float:
    """Median time of ``Branch.merge()`` for branches holding one edited key."""
    clock = time.perf_counter
    out = []
    for i in range(count):
        branch = state.fork("agent")
        branch.set("k1", i)
        start = clock()
        branch.merge()
        out.append(clock() - start)
    return median_us(out)


def cycles_per_s(state: SharedState, count: int) -> float:
    clock = time.perf_counter
    start = clock()
    for i in range(count):
        branch = state.fork("agent")
        branch.set("k1", i)
        branch.merge()
    return count / (clock() - start)


def locked_dict_per_s(count: int) -> float:
    lock = threading.Lock()
    data = {f"k{i}": i for i in range(CYCLE_KEYS)}
    clock = time.perf_counter
    start = clock()
    for i in range(count):
        with lock:
            data["k1"] = i
    return count / (clock() - start)


def raw_cycles_per_s(count: int) -> float:
    """Raw pycrdt: copy the document, edit one key, apply the edit back."""
    doc = raw_doc(CYCLE_KEYS)
    clock = time.perf_counter
    start = clock()
    for i in range(count):
        branch: Doc[Any] = Doc(client_id=7)  # a stable client id per agent keeps the doc small
        branch.apply_update(doc.get_update())
        before = branch.get_state()
        branch.get("state", type=Map)["k1"] = i
        doc.apply_update(branch.get_update(before))
    return count / (clock() - start)


# -- list writes ------------------------------------------------------------------------
class Record(BaseModel):
    i: int
    tag: str


class Listed(BaseModel):
    items: list[int | float | str | bool | Record | None] = []


SHAPES = ("plain", "dicts")


def list_items(shape: str, n: int) -> list[Any]:
    """``n`` plain values (ints, floats, strings, bools, None); for ``"dicts"``, one
    value in eight is a small dict instead."""
    kinds: tuple[Callable[[int], Any], ...] = (
        lambda i: i,
        lambda i: f"item-{i}",
        lambda i: i / 3,
        (lambda i: {"i": i, "tag": "t"}) if shape == "dicts" else (lambda i: 2**40 + i),
        lambda i: i % 2 == 0,
        lambda i: None,
        lambda i: -i,
        lambda i: f"é-{i}",
    )
    return [kinds[i % len(kinds)](i) for i in range(n)]


def once(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_of(fn: Callable[[], float], runs: int) -> float:
    """The median of ``runs`` measurements (each sets up its own fresh state)."""
    return statistics.median(fn() for _ in range(runs))


def raw_array_s(items: list[Any]) -> float:
    doc: Doc[Any] = Doc()
    root = doc.get("state", type=Map)
    prelim = Array([Map(v) if isinstance(v, dict) else v for v in items])

    def write() -> None:
        with doc.transaction():
            root["l"] = prelim

    return once(write)


def raw_array_capped_s(shape: str, n: int) -> float | None:
    """``raw_array_s`` in a subprocess (this script with ``--raw``); None past the cap."""
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--raw", shape, str(n)],
            capture_output=True,
            text=True,
            timeout=RAW_CAP_S,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout)


def commit_s(items: list[Any]) -> float:
    state = SharedState()
    return once(lambda: state.commit({"l": items}, state.token, "w"))


def append_s(items: list[Any]) -> float:
    state = SharedState()
    state.commit({"l": items}, state.token, "w")

    def append() -> None:
        with state.fork("w") as branch:
            branch.extend("l", items)

    return once(append)


def typed_commit_s(items: list[Any]) -> float:
    state = SharedState(schema=Listed)
    return once(lambda: state.commit({"items": items}, state.token, "w"))


def replica_s(update: bytes) -> float:
    replica = SharedState()
    return once(lambda: replica.apply_update(update))


def raw_update_s(update: bytes) -> float:
    return once(lambda: Doc().apply_update(update))


def fmt_s(seconds: float | None) -> str:
    return f"n/a (>{RAW_CAP_S:.0f} s)" if seconds is None else f"{seconds:.3f}"


def list_table() -> list[tuple[str, bool]]:
    """Print the list-write table; return its verdicts."""
    runs = 3 if QUICK else 5
    print(f"writing an n-item list (seconds, median of {runs}; raw pycrdt run once)")
    header = (
        f"{'shape':>6} | {'items':>8} | {'raw Array(list)':>15} | {'commit':>7} | "
        f"{'append n':>8} | {'typed':>7} | {'replica':>7} | {'raw update':>10} | "
        f"{'raw/commit':>10} | {'commit/update':>13}"
    )
    print(header)
    print("-" * len(header))
    verdicts: list[tuple[str, bool]] = []
    for shape in SHAPES:
        raw: float | None = 0.0
        for n in LIST_SIZES:
            items = list_items(shape, n)
            # quadratic at least: 10x the items, 100x the time; skip what cannot finish
            run_raw = raw is not None and raw * 100 <= 5 * RAW_CAP_S
            raw = raw_array_capped_s(shape, n) if run_raw else None
            commit = best_of(lambda: commit_s(items), runs)  # noqa: B023
            append = best_of(lambda: append_s(items), runs)  # noqa: B023
            typed = best_of(lambda: typed_commit_s(items), runs)  # noqa: B023
            source = SharedState()
            source.commit({"l": items}, source.token, "w")
            update = source.get_update()
            replica = best_of(lambda: replica_s(update), runs)  # noqa: B023
            floor = best_of(lambda: raw_update_s(update), runs)  # noqa: B023
            speedup = "n/a" if raw is None else f"{raw / commit:.0f}x"
            print(
                f"{shape:>6} | {n:>8,} | {fmt_s(raw):>15} | {commit:>7.3f} | "
                f"{append:>8.3f} | {typed:>7.3f} | {replica:>7.3f} | {floor:>10.4f} | "
                f"{speedup:>10} | {commit / floor:>12.1f}x"
            )
            if n == LIST_SIZES[-1]:
                for label, seconds in (("commit", commit), ("append", append), ("typed", typed)):
                    verdicts.append(
                        (
                            f"{label} of {n:,} {shape} items under {LIST_GOAL_S:.0f} s"
                            f" ({seconds:.2f} s)",
                            seconds < LIST_GOAL_S,
                        )
                    )
    return verdicts


# -- fan-outs: N branches from one base -------------------------------------------------
def fanout_run(shape: str, n: int) -> dict[str, float]:
    """Fork ``n`` branches from one base, edit each, merge them in turn; time the merges."""
    state = SharedState(resolvers={"n": resolvers.counter}, history=2 * n)
    state.commit({"n": 0, "l": []}, state.token, "seed")
    branches = [state.fork(f"agent{i}") for i in range(n)]
    for i, branch in enumerate(branches):
        if shape == "own key":
            branch.set(f"k{i}", i)
        elif shape == "one counter":
            branch.set("n", branch.get("n") + 1)
        else:
            branch.append("l", i)
    gc.collect()
    clock = time.perf_counter
    durations = []
    for branch in branches:
        start = clock()
        branch.merge()
        durations.append(clock() - start)
    final = state.snapshot()
    expected = {"own key": n, "one counter": 0, "one list": 0}[shape]
    assert len(final) - 2 == expected and final["n"] in (0, n) and len(final["l"]) in (0, n)
    return {
        "total_s": sum(durations),
        "mean_us": statistics.fmean(durations) * 1e6,
        "last_us": statistics.median(durations[-max(n // 100, 1) :]) * 1e6,
    }


def fanout_in(checkout: str | None, shape: str, n: int) -> dict[str, float] | None:
    """``fanout_run`` in a subprocess on the library of ``checkout`` (this one: None).

    None when it ran past :data:`FANOUT_CAP_S`.
    """
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = str(Path(checkout).resolve())
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--fanout-run", shape, str(n)],
            capture_output=True,
            text=True,
            timeout=FANOUT_CAP_S,
            check=True,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return None
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def fanout_table(against: str | None) -> list[tuple[str, bool]]:
    """Print the fan-out table (and the other checkout's figures); return its verdicts."""
    print("N branches forked from one base, each merged in turn (merge time only)")
    print(
        "mean = mean merge (us); last = median of the last 1% of merges (us), "
        "those with the most merges since their base"
    )
    header = f"{'shape':<12} | {'N':>7} | {'total s':>8} | {'mean':>8} | {'last':>8}"
    if against is not None:
        header += f" || {'other: total s':>14} | {'mean':>8} | {'last':>8} | {'other/this':>10}"
    print(header)
    print("-" * len(header))
    verdicts: list[tuple[str, bool]] = []
    for shape in FANOUT_SHAPES:
        means: dict[int, float] = {}
        for n in FANOUT_SIZES:
            ours = fanout_in(None, shape, n)
            assert ours is not None, "this checkout ran past the cap"
            means[n] = ours["mean_us"]
            line = (
                f"{shape:<12} | {n:>7,} | {ours['total_s']:>8.2f} | "
                f"{ours['mean_us']:>8.1f} | {ours['last_us']:>8.1f}"
            )
            if against is not None:
                other = fanout_in(against, shape, n)
                if other is None:
                    line += f" || {'> ' + format(FANOUT_CAP_S, '.0f'):>14} |"
                else:
                    line += (
                        f" || {other['total_s']:>14.2f} | {other['mean_us']:>8.1f} | "
                        f"{other['last_us']:>8.1f} | "
                        f"{other['total_s'] / ours['total_s']:>9.1f}x"
                    )
            print(line, flush=True)
        small, large = FANOUT_SIZES[0], FANOUT_SIZES[-1]
        growth = means[large] / means[small]
        verdicts.append(
            (
                f"{shape}: mean merge at N={large:,} within {GOAL_FANOUT}x of N={small:,}"
                f" ({growth:.2f}x)",
                growth <= GOAL_FANOUT,
            )
        )
    return verdicts


def main() -> int:
    if "--raw" in sys.argv:  # the capped raw measurement, in its own process
        shape, n = sys.argv[sys.argv.index("--raw") + 1 :][:2]
        print(raw_array_s(list_items(shape, int(n))))
        return 0
    if "--fanout-run" in sys.argv:  # one fan-out, in its own process (see fanout_in)
        shape, n = sys.argv[sys.argv.index("--fanout-run") + 1 :][:2]
        print(json.dumps(fanout_run(shape, int(n))))
        return 0
    against = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
    if "--fanout" in sys.argv:
        fan_verdicts = fanout_table(against)
        print()
        for text, ok in fan_verdicts:
            print(f"{'PASS' if ok else 'FAIL'}  {text}")
        return 0 if all(ok for _, ok in fan_verdicts) else 1
    if "--lists" in sys.argv:
        list_verdicts = list_table()
        print()
        for text, ok in list_verdicts:
            print(f"{'PASS' if ok else 'FAIL'}  {text}")
        return 0 if all(ok for _, ok in list_verdicts) else 1
    print("fork + 1-key edit + merge, crdt_state vs raw pycrdt (medians, microseconds)")
    header = (
        f"{'keys':>8} | {'raw fork':>9} | {'fork':>7} | {'ratio':>6} | "
        f"{'raw apply':>9} | {'merge':>7} | {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    verdicts: list[tuple[str, bool]] = []
    merges: dict[int, float] = {}
    for keys in SIZES:
        doc = raw_doc(keys)
        base = doc.get_update()
        fork_count = 10 if keys >= 100_000 else 200 if keys >= 1_000 else 2_000
        op_count = 500 if QUICK else 2_000
        rf = rounds(lambda: raw_fork_us(base, fork_count))  # noqa: B023
        ra = rounds(lambda: raw_apply_us(doc, base, op_count))  # noqa: B023
        state = filled_state(keys)
        cf = rounds(lambda: fork_us(state, op_count))  # noqa: B023
        cm = rounds(lambda: merge_us(state, op_count))  # noqa: B023
        merges[keys] = cm
        print(
            f"{keys:>8,} | {rf:>9.2f} | {cf:>7.2f} | {cf / rf:>5.2f}x | "
            f"{ra:>9.2f} | {cm:>7.2f} | {cm / ra:>5.2f}x"
        )
        verdicts.append(
            (f"fork within {GOAL_FORK}x of raw pycrdt at {keys:,} keys", cf / rf <= GOAL_FORK)
        )
        verdicts.append(
            (
                f"1-key merge within {GOAL_MERGE}x of raw apply at {keys:,} keys",
                cm / ra <= GOAL_MERGE,
            )
        )
    print()
    print("the same work: 1-key edit + merge vs raw edit + encode + apply (medians, us)")
    print(f"{'keys':>8} | {'raw edit+apply':>14} | {'set+merge':>9} | {'ratio':>6}")
    for keys in SIZES:
        doc = raw_doc(keys)
        base = doc.get_update()
        state = filled_state(keys)
        op_count = 500 if QUICK else 2_000
        rw = rounds(lambda: raw_edit_apply_us(doc, base, op_count))  # noqa: B023
        ours_em = rounds(lambda: edit_merge_us(state, op_count))  # noqa: B023
        print(f"{keys:>8,} | {rw:>14.2f} | {ours_em:>9.2f} | {ours_em / rw:>5.2f}x")
    flat = merges[SIZES[-1]] / merges[SIZES[0]]
    verdicts.append(
        (
            f"merge flat in state size ({SIZES[-1]:,} keys / {SIZES[0]} keys = {flat:.2f}x,"
            f" goal {GOAL_FLAT}x)",
            flat <= GOAL_FLAT,
        )
    )

    count = 5_000 if QUICK else 20_000
    state = filled_state(CYCLE_KEYS)
    ours = rounds(lambda: cycles_per_s(state, count))
    locked = rounds(lambda: locked_dict_per_s(count))
    raw = rounds(lambda: raw_cycles_per_s(max(count // 10, 500)))
    print()
    print(f"fork-edit-merge cycles per second on a {CYCLE_KEYS}-key state (median of {ROUNDS})")
    print(f"{'crdt_state fork/set/merge':<40} {ours:>12,.0f}")
    print(f"{'raw pycrdt copy/edit/apply':<40} {raw:>12,.0f}")
    print(f"{'dict update under threading.Lock':<40} {locked:>12,.0f}  (no branches, no detection)")
    verdicts.append(
        (f"at least {GOAL_CYCLES:,} cycles/s (measured {ours:,.0f})", ours >= GOAL_CYCLES)
    )

    print()
    verdicts += list_table()
    print()
    verdicts += fanout_table(against)

    print()
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
