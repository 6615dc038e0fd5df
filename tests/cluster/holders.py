"""Drive ``lease_holder.py`` processes from a test: start, command, signal, read events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("lease_holder.py")


class Holder:
    """One lease-holder process; ``events`` keeps every JSON line it printed, in order."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc = proc
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._taken: set[int] = set()
        self._changed = asyncio.Condition()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, *, redis: str, postgres: str, room: str, ttl: float, name: str) -> Holder:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            *("--redis", redis, "--postgres", postgres, "--room", room),
            *("--ttl", str(ttl), "--name", name),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc, name)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            event = json.loads(line)
            event["at"] = time.monotonic()
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        async with self._changed:
            self.events.append({"event": "exited", "at": time.monotonic()})
            self._changed.notify_all()

    def has(self, event: str) -> bool:
        return any(e["event"] == event for e in self.events)

    async def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        """The first ``event`` not returned before, waiting up to ``timeout`` seconds."""
        async with asyncio.timeout(timeout), self._changed:
            while True:
                for i, seen in enumerate(self.events):
                    if seen["event"] == event and i not in self._taken:
                        self._taken.add(i)
                        return seen
                if self.events and self.events[-1]["event"] == "exited" and event != "exited":
                    raise AssertionError(f"{self.name} exited; events: {self.events}")
                await self._changed.wait()

    async def command(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    async def close(self) -> None:
        """Kill (after SIGCONT) unless it already exited, and wait for it."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
        async with asyncio.timeout(10):
            await self.proc.wait()
            with contextlib.suppress(Exception):
                await self._reader
