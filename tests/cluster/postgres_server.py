"""A private PostgreSQL server for the tests that stop and restart PostgreSQL.

A fresh cluster (``initdb``, trust authentication, ``fsync=off``: the tests crash it on
purpose and keep nothing) in a temporary directory, its ``postgres`` process started by
the test on a free loopback port. The binaries are ``CRDT_STATE_TEST_POSTGRES_BIN`` (a
directory holding ``initdb`` and ``postgres``) or the newest ``/usr/lib/postgresql/*/bin``
(Debian's layout; ``scripts/test-services.sh`` installs it), else ``initdb`` on ``PATH``.
PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user.
Every wait is bounded; :meth:`PostgresServer.remove` stops the server and deletes its
files.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from cluster_servers import ServerProcess, free_port

__all__ = ["PostgresServer", "postgres_bin"]


def postgres_bin() -> Path:
    """The directory of ``initdb`` and ``postgres`` (see the module's docstring)."""
    named = os.environ.get("CRDT_STATE_TEST_POSTGRES_BIN")
    if named:
        return Path(named)
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if debian:
        return Path(debian[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError(
            "PostgreSQL's initdb is not installed (scripts/test.sh installs it; or set "
            "CRDT_STATE_TEST_POSTGRES_BIN)"
        )
    return Path(initdb).parent


class PostgresServer(ServerProcess):
    """A private PostgreSQL cluster on a free port: :meth:`start`, :meth:`crash`, :meth:`remove`."""

    def __init__(self) -> None:
        super().__init__()
        self.bin = postgres_bin()
        self.port = free_port()
        self.user: str | None = None
        where: str | None = None
        if os.geteuid() == 0:  # postgres will not run as root
            self.user = "postgres"
            where = "/tmp"  # the postgres user must reach it: not under root's own TMPDIR
        self.dir = Path(tempfile.mkdtemp(prefix="crdt-state-pg-", dir=where))
        self.data = self.dir / "data"
        try:
            if self.user is not None:
                try:
                    entry = pwd.getpwnam(self.user)
                except KeyError:
                    raise RuntimeError(
                        "running as root, the private PostgreSQL needs the OS user "
                        "'postgres' (Debian's postgresql package creates it)"
                    ) from None
                os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust"]
            self._run([*initdb, "-U", "postgres", "--no-sync", "-E", "UTF8"])
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, user=self.user, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.decode(errors='replace')}")

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn, connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def start(self, timeout: float = 20.0) -> None:
        """Start (or start again, on the same port and files) and wait until it answers."""
        assert not self.alive, "already running"
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.dir),
            "fsync": "off",
            "max_connections": "100",
        }
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 (the child holds it)
        with log:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data)]
                + [arg for k, v in options.items() for arg in ("-c", f"{k}={v}")],
                user=self.user,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"postgres on port {self.port} did not start: {self.dir}")
            time.sleep(0.05)

    def crash(self) -> None:
        """Immediate shutdown (SIGQUIT): every session cut, no checkpoint, as in a crash.

        The next :meth:`start` recovers from the write-ahead log, as after a power cut.
        """
        self._signal(signal.SIGQUIT)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions cut, a clean checkpoint)."""
        self._signal(signal.SIGINT)

    def _signal(self, sig: signal.Signals) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def remove(self) -> None:
        """Stop the server and delete its files."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
