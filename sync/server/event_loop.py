"""The event loop a ``crdt-state hub`` process runs on: asyncio's, or uvloop on request.

``--loop uvloop`` runs the hub on uvloop (libuv under a Cython loop, a drop-in
``asyncio`` loop; ``pip install 'crdt-state[uvloop]'``, not on Windows or PyPy). It is
an option, not the default, because on the 2-core test machine it showed no clear gain:
``benchmarks/hub_throughput.py --loops asyncio,uvloop`` (200 agents, 20 rooms, flat
out, alternating runs) gave durable hubs 218-235 µs of CPU a merge on asyncio's loop
and 227-233 on uvloop (medians of two sets of 5-6 pairs), in memory 106-111 and 117-119;
single runs scatter by ±15 %, more than the two loops differ. Measure on your own
machine before choosing it. Nothing in the hub uses the asyncio loop's private parts:
the whole test suite passes with every hub process on uvloop.

A hub started from Python (:class:`sync.server.hub.Hub`) runs on the caller's loop.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal, TypeVar, cast

from sync.server._security import HubConfigError

__all__ = ["LOOPS", "LoopChoice", "run"]

T = TypeVar("T")

LoopChoice = Literal["asyncio", "uvloop"]
LOOPS: Final[tuple[LoopChoice, ...]] = ("asyncio", "uvloop")
"""``--loop`` values, the default first."""


def run(main: Callable[[], Coroutine[Any, Any, T]], choice: LoopChoice = "asyncio") -> T:
    """Run ``main()`` to completion on a new loop of the kind ``choice`` names.

    The loop is chosen (and a missing uvloop refused) before ``main()`` is called.

    Raises:
        HubConfigError: (code ``event_loop``) ``choice`` is ``"uvloop"`` and uvloop
            cannot be imported, or ``choice`` is none of :data:`LOOPS`; whatever
            ``main()`` raises.
    """
    if choice not in LOOPS:
        raise HubConfigError(
            "event_loop", f"unknown event loop {choice!r}: one of {', '.join(LOOPS)}"
        )
    if choice == "asyncio":
        return asyncio.run(main())
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        raise HubConfigError(
            "event_loop",
            "--loop uvloop: uvloop is not installed here (pip install 'crdt-state[uvloop]';"
            " it does not build on Windows), or leave --loop at asyncio",
        ) from None
    return cast(T, uvloop.run(main()))
