"""The event loop a hub process runs on: uvloop where it is installed, else asyncio's.

A hub spends most of its CPU in the event loop's machinery (reading and writing
sockets, scheduling callbacks) and in the merges themselves. uvloop (libuv under a
Cython loop, a drop-in ``asyncio`` loop) does the first part with less CPU: measured
with ``benchmarks/hub_throughput.py`` (200 agents, 20 durable rooms, alternating runs)
a single hub's CPU per merge went from 222-250 µs to 195-221 (~12 % less), and a
3-hub cluster's (``benchmarks/cluster.py``) from 528-560 to 400-473 µs. It is a
dependency of the package where it builds (not on Windows, not on PyPy); the hub
falls back to asyncio's loop where it is missing.

Only the ``crdt-state hub`` command picks the loop (it owns its process). A hub
started from Python (:class:`sync.server.hub.Hub`) runs on the caller's loop: run
that with ``uvloop.run(main())`` for the same gain.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal, TypeVar, cast

from sync.server._security import HubConfigError

__all__ = ["LOOPS", "LoopChoice", "loop_name", "run"]

T = TypeVar("T")

LoopChoice = Literal["auto", "uvloop", "asyncio"]
LOOPS: Final[tuple[LoopChoice, ...]] = ("auto", "uvloop", "asyncio")
"""``--loop`` values: ``auto`` takes uvloop when it is installed."""


def _uvloop() -> Any | None:
    """The ``uvloop`` module, or ``None`` when it cannot be imported."""
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def loop_name(choice: LoopChoice) -> str:
    """The loop :func:`run` would use for ``choice``: ``"uvloop"`` or ``"asyncio"``.

    Raises:
        HubConfigError: (code ``event_loop``) ``choice`` is ``"uvloop"`` and uvloop is
            not installed, or ``choice`` is none of :data:`LOOPS`.
    """
    if choice not in LOOPS:
        raise HubConfigError(
            "event_loop", f"unknown event loop {choice!r}: one of {', '.join(LOOPS)}"
        )
    if choice == "asyncio":
        return "asyncio"
    if _uvloop() is not None:
        return "uvloop"
    if choice == "uvloop":
        raise HubConfigError(
            "event_loop",
            "--loop uvloop: uvloop is not installed here (pip install uvloop; it does not"
            " build on Windows), or use --loop asyncio",
        )
    return "asyncio"


def run(main: Callable[[], Coroutine[Any, Any, T]], choice: LoopChoice = "auto") -> T:
    """Run ``main()`` to completion on a new loop of the kind ``choice`` names.

    The loop is chosen (and a missing uvloop refused) before ``main()`` is called.

    Raises:
        HubConfigError: as :func:`loop_name`; whatever ``main()`` raises.
    """
    if loop_name(choice) == "asyncio":
        return asyncio.run(main())
    uvloop = _uvloop()
    return cast(T, uvloop.run(main()))  # type: ignore[union-attr]
