"""Real servers for the cluster tests: private redis-server processes, throwaway databases.

Used by ``conftest.py``. Every process started here is stopped and waited for by its
owner; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from throwaway_postgres import (  # re-exported: the throwaway databases live with all tests
    DEFAULT_POSTGRES,
    create_database,
    drop_database,
    postgres_admin_dsn,
)

__all__ = [
    "DEFAULT_POSTGRES",
    "RedisServer",
    "create_database",
    "drop_database",
    "free_port",
    "postgres_admin_dsn",
    "redis_pings",
    "redis_url",
]

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def redis_url() -> str:
    """The machine's Redis for the tests: ``CRDT_STATE_TEST_REDIS`` or 127.0.0.1:6379."""
    return os.environ.get("CRDT_STATE_TEST_REDIS") or DEFAULT_REDIS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_pings(port: int, timeout: float = 0.5) -> bool:
    """True when a Redis on 127.0.0.1:``port`` answers PING (raw socket, no client retry)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class ServerProcess:
    """A server subprocess the tests start, pause, kill and stop (``proc`` while started)."""

    stop_timeout = 5.0
    """Seconds :meth:`stop` waits after SIGTERM before SIGKILL."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (after SIGCONT, in case it is paused) and wait."""
        if self.alive:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, wait up to :attr:`stop_timeout`, then SIGKILL."""
        if self.alive:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class RedisServer(ServerProcess):
    """A private ``redis-server`` on a free loopback port, keeping nothing on disk."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test.sh installs it)")
        super().__init__()
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start (or start again, on the same port) and wait until it answers PING."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log = self.workdir / f"redis-{self.port}.log"
        options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "save": "",
            "appendonly": "no",
            "dir": str(self.workdir),
            "logfile": str(log),
        }
        self.proc = subprocess.Popen(
            [self.binary, *(arg for k, v in options.items() for arg in (f"--{k}", v))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not redis_pings(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server on port {self.port} did not start: {log}")
            time.sleep(0.02)

    def restart(self) -> None:
        """Kill it (losing every key: nothing is on disk) and start it on the same port."""
        self.kill()
        self.start()
