"""What the hub benchmarks measure of and do to a process: CPU time (Linux ``/proc``), CPU pinning.

Shared by ``hub_throughput.py`` and ``cluster.py`` so their CPU figures are read alike.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CLK_TCK", "cpu_seconds", "pin", "thread_cpu"]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int | None, thread: int | None = None) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc; 0 elsewhere).

    With ``thread``: of that thread of the process only (``thread=pid``: its main thread).
    """
    where = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        fields = Path(where).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def pin(pid: int, cpu: int) -> None:
    """Keep every thread of process ``pid`` on ``cpu``; threads it starts later inherit it."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {cpu})


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of process ``pid``, by ``name/tid`` (Linux /proc)."""
    out: dict[str, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            name = Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
        except OSError:
            continue
        out[f"{name}/{task}"] = cpu_seconds(pid, int(task))
    return out
