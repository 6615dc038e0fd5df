"""Hub processes of a test cluster: ``python -m sync.cli hub --redis ... --postgres ...``.

Each :class:`HubProcess` runs one real hub on a free loopback port; :class:`HubCluster`
starts several on the same Redis and PostgreSQL and stops (or kills) every one of them at
the end, waiting for each. Every wait is bounded. :func:`start_refused` starts a hub in
this process that must refuse its configuration.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
from cluster_servers import ServerProcess, free_port

from sync import Hub, HubConfigError

_LAUNCH = (
    "import faulthandler, signal, sys\n"
    "faulthandler.register(signal.SIGUSR1)  # the test may ask where every thread is\n"
    "from sync.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
"""``python -m sync.cli`` that dumps every thread's stack to its log on SIGUSR1 (and, as
every hub, on a crash of the interpreter: ``sync.cli`` enables ``faulthandler``)."""


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class HubProcess(ServerProcess):
    """One hub process of the cluster; ``start`` returns once it accepts connections."""

    stop_timeout = 10.0

    def __init__(self, redis: str, postgres: str, logdir: Path, *, name: str) -> None:
        super().__init__()
        self.redis = redis
        self.postgres = postgres
        self.name = name
        self.port = free_port()
        self.log = logdir / f"hub-{name}.log"

    @property
    def base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def url(self, room: str) -> str:
        return f"{self.base}/{room}"

    def start(self, timeout: float = 20.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        cmd = [
            sys.executable,
            "-c",
            _LAUNCH,
            "hub",
            "--port",
            str(self.port),
            "--db",
            "",
            "--redis",
            self.redis,
            "--postgres",
            self.postgres,
            "--log-level",
            "INFO",
            "--insecure",  # no secret: the test hubs listen on loopback only
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=dict(os.environ)
            )
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"hub {self.name} did not start:\n{self.tail()}")
            time.sleep(0.05)

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def dump_stacks(self) -> None:
        """Ask the hub to write every thread's stack to its log.

        For a test that has already failed: ``faulthandler`` reads the other threads'
        frames while they run, and can crash the interpreter doing so (a hub dumped after
        every burst once died of a segmentation fault in a PostgreSQL writer thread's
        frame, failing the test that asked).
        """
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGUSR1)


class HubCluster:
    """``count`` hub processes on one Redis and one PostgreSQL database."""

    def __init__(self, redis: str, postgres: str, logdir: Path, count: int) -> None:
        self.hubs = [
            HubProcess(redis, postgres, logdir, name=chr(ord("a") + i)) for i in range(count)
        ]

    def __getitem__(self, index: int) -> HubProcess:
        return self.hubs[index]

    def start(self) -> None:
        for hub in self.hubs:
            hub.start()

    def stop(self) -> None:
        for hub in self.hubs:
            hub.stop()

    def logs(self) -> str:
        return "\n".join(f"--- hub {h.name} ---\n{h.tail()}" for h in self.hubs)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def start_refused(redis: str, postgres: str) -> HubConfigError:
    """Start a hub in this process on ``redis`` and ``postgres``: the configuration error it
    is refused with (the test fails if it starts); whatever it opened is closed."""
    hub = Hub(port=0, redis=redis, postgres=postgres)
    try:
        with pytest.raises(HubConfigError) as info:
            await hub.start()
    finally:
        await hub.stop()
    return info.value
