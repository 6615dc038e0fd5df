"""How a hub process ends: the first SIGINT/SIGTERM stops it, bounded; a second at once.

``crdt-state hub`` (:mod:`sync.cli`) waits on the event :func:`stop_on_signals` returns,
then stops the hub (connections closed, a cluster hub's rooms handed over):

- the first SIGINT or SIGTERM sets the event and arms a watchdog thread: a process still
  running :data:`WATCHDOG` seconds later (a stop stuck despite its own bounds, a thread
  that never returns) says so and exits with status 1 (:func:`exit_now`);
- a second SIGINT or SIGTERM exits at once, status 1, saying so;
- a stop that abandoned work (:attr:`sync.server.Hub.abandoned`) exits with
  :func:`exit_now` too: threads blocked on a server that does not answer would keep the
  interpreter from ever exiting.

Before this, a hub whose PostgreSQL stopped answering (a dead link: no error, no answer)
never ended on SIGTERM, and ignored every later SIGTERM and SIGINT: only SIGKILL ended it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Final, NoReturn

__all__ = ["WATCHDOG", "exit_now", "stop_on_signals"]

log = logging.getLogger("crdt_state.hub")

WATCHDOG: Final = 20.0
"""Seconds from the first signal after which the process exits whatever it is doing (a
cluster hub's own stop is bounded by 10 s; closing connections takes a fraction of one)."""


def exit_now(code: int, why: str) -> NoReturn:
    """Log ``why`` (a warning), flush the standard streams and end the process with ``code``.

    ``os._exit``: no thread is waited for, no ``finally`` runs.
    """
    log.warning("%s: exiting now (status %d)", why, code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def stop_on_signals(
    loop: asyncio.AbstractEventLoop, *, watchdog: float = WATCHDOG
) -> asyncio.Event:
    """An event set by the first SIGINT or SIGTERM; see the module doc for the others."""
    stop = asyncio.Event()

    def received(sig: signal.Signals) -> None:
        if stop.is_set():
            exit_now(1, f"{sig.name} again while stopping")
        log.info("%s: stopping (a second SIGINT or SIGTERM exits at once)", sig.name)
        stop.set()
        timer = threading.Timer(
            watchdog, exit_now, (1, f"the hub did not stop within {watchdog:g} s")
        )
        timer.daemon = True
        timer.start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, received, sig)
    return stop
