"""How fast this machine is today: a fixed workload that none of crdt-state's code runs in.

The hubs' CPU per merge moves by 1.5-2x between sessions on the shared 2-core test
machines with the code unchanged (the same commit measured 204 and 346-399 µs a merge on
two days). The benchmarks print :func:`reference_us` next to their figures so that runs
of different days can be compared: a figure that moved with the reference moved with the
machine. The workload is what a hub's merge is made of, without crdt-state: a pycrdt
transaction writing one map key, the update encoded and applied to a second document, and
some pure-Python dict and bytes work.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pycrdt import Doc, Map

__all__ = ["reference_line", "reference_us"]


def _round(n: int) -> float:
    source: Doc[Any] = Doc()
    replica: Doc[Any] = Doc()
    root = source.get("state", type=Map)
    replica.get("state", type=Map)
    began = time.process_time()
    for i in range(n):
        before = source.get_state()
        with source.transaction(origin="agent"):
            root[f"k{i % 50}"] = {"n": i, "by": "agent"}
        replica.apply_update(source.get_update(before))
        record = {"seq": i, "paths": (("k", i % 50),), "agent": "agent", "time": 0.0}
        _ = sorted(record.items(), key=lambda kv: kv[0])
        _ = bytes(repr(record), "utf-8")
    return (time.process_time() - began) / n * 1e6


def reference_us(n: int = 2_000, rounds: int = 5) -> float:
    """Median CPU µs of one step of the fixed workload over ``rounds`` rounds (~0.5 s)."""
    _round(200)  # warm up
    return statistics.median(_round(n) for _ in range(rounds))


def reference_line(before: float) -> str:
    """The line the benchmarks end with: ``before`` (taken before their runs) and now."""
    return (
        "machine reference (benchmarks/_reference.py, CPU us a step, before / after the "
        f"runs): {before:.1f} / {reference_us():.1f}"
    )


if __name__ == "__main__":
    print(f"machine reference: {reference_us():.1f} us per step")
