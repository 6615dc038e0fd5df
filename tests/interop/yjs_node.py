"""Drive real Node.js Yjs peers from Python tests: the reference server and stock clients.

* :class:`ReferenceServer` runs ``node_modules/y-websocket/bin/server.js`` (y-websocket
  1.5.4) on ``127.0.0.1`` and a free port.
* :class:`NodeYjsClient` runs ``yclient.mjs`` (a stock ``WebsocketProvider``) and talks to it
  with JSON lines; every call waits for its one-line answer with a timeout, never a sleep.

Install the Node side first: ``npm ci --prefix tests/interop``. :func:`node_missing_reason`
tells a test to skip when it is absent (or to fail, when ``CRDT_STATE_REQUIRE_INTEROP=1``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from hubs import free_port

INTEROP_DIR = Path(__file__).resolve().parent
SERVER_JS = INTEROP_DIR / "node_modules" / "y-websocket" / "bin" / "server.js"
YCLIENT_JS = INTEROP_DIR / "yclient.mjs"
LOOPBACK = "127.0.0.1"
DEFAULT_TIMEOUT = 15.0


class NodeHarnessError(RuntimeError):
    """A Node process died, answered badly, or did not answer in time."""


def node_missing_reason() -> str | None:
    """Why the Node interop harness cannot run here, or ``None`` if it can."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not SERVER_JS.exists():
        return "Node packages missing: run `npm ci --prefix tests/interop`"
    return None


def interop_required() -> bool:
    """True when a missing harness must fail the run instead of skipping."""
    return os.environ.get("CRDT_STATE_REQUIRE_INTEROP") == "1"


class _LinePump:
    """Reads a text stream on a daemon thread; lines are taken with a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.history: list[str] = []
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: IO[str]) -> None:
        for line in stream:
            self.history.append(line.rstrip("\n"))
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of stream

    def join(self, timeout: float) -> None:
        """Wait for end of stream (the process has exited)."""
        self._thread.join(timeout)

    def next_line(self, timeout: float) -> str | None:
        """The next line, ``None`` at end of stream; raise on timeout."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise NodeHarnessError(f"no output within {timeout} s") from None


class _NodeProcess:
    """A Node subprocess with stdout and stderr pumped by threads."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            ["node", *args],
            cwd=INTEROP_DIR,
            env={**os.environ, **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.stdout = _LinePump(self.proc.stdout)
        self.stderr = _LinePump(self.proc.stderr)

    def diagnostics(self) -> str:
        out = "\n".join(self.stdout.history[-20:])
        err = "\n".join(self.stderr.history[-20:])
        return f"exit={self.proc.poll()}\n--- stdout\n{out}\n--- stderr\n{err}"

    def stop(self, timeout: float = 5.0) -> None:
        """Close stdin, then terminate, then kill; always reaps the process."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)
        for pump, stream in ((self.stdout, self.proc.stdout), (self.stderr, self.proc.stderr)):
            pump.join(timeout)
            if stream is not None:
                stream.close()


class ReferenceServer:
    """The reference y-websocket 1.5.4 server on the loopback address.

    Use as a context manager; ``url`` is ``ws://127.0.0.1:<port>`` (append ``/<room>``).
    Start-up waits for the server's "running at" line, retrying on another port if the
    chosen one was taken meanwhile.
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self.port = 0
        self._node: _NodeProcess | None = None

    @property
    def url(self) -> str:
        return f"ws://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        last = ""
        for _ in range(3):
            self.port = free_port()
            node = _NodeProcess([str(SERVER_JS)], env={"HOST": LOOPBACK, "PORT": str(self.port)})
            line = node.stdout.next_line(self.timeout)
            if line is not None and "running at" in line:
                self._node = node
                return
            last = node.diagnostics()
            node.stop()
        raise NodeHarnessError(f"reference server did not start:\n{last}")

    def stop(self) -> None:
        if self._node is not None:
            self._node.stop()
            self._node = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class NodeYjsClient:
    """A stock Yjs ``WebsocketProvider`` in a Node subprocess (``yclient.mjs``).

    Construction returns once the provider reports its first sync; every method sends one
    JSON command and returns its one JSON answer, raising :class:`NodeHarnessError` if the
    process dies or stays silent past ``timeout`` seconds.
    """

    def __init__(
        self,
        url: str,
        room: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.timeout = timeout
        args = [str(YCLIENT_JS), url, room] + ([token] if token else [])
        self._node = _NodeProcess(args, env={"SYNC_TIMEOUT_MS": str(int(timeout * 1000))})
        hello = self._read()
        if hello.get("event") != "synced":
            self.close()
            raise NodeHarnessError(f"client did not sync: {hello}")
        self.provider_url: str = hello["url"]
        self.client_id: int = hello["clientID"]

    def _read(self) -> dict[str, Any]:
        line = self._node.stdout.next_line(self.timeout + 5)
        if line is None:
            raise NodeHarnessError(f"client exited:\n{self._node.diagnostics()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def command(self, **cmd: Any) -> dict[str, Any]:
        """Send one command, return its answer (raise if the answer says ``ok: false``
        for anything but a wait timeout)."""
        stdin = self._node.proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(cmd) + "\n")
            stdin.flush()
        except OSError as exc:
            raise NodeHarnessError(f"client stdin closed: {exc}") from exc
        answer = self._read()
        if not answer.get("ok") and answer.get("error") != "timeout":
            raise NodeHarnessError(f"command {cmd} failed: {answer}")
        return answer

    def set(self, key: str, value: Any) -> None:
        self.command(op="set", key=key, value=value)

    def delete(self, key: str) -> None:
        self.command(op="delete", key=key)

    def sideload(self, update: bytes) -> None:
        """Apply a Yjs ``update`` as if the server had sent it (the provider does not send it).

        What a document that also syncs through another provider (WebRTC, IndexedDB) holds:
        the hub never saw ``update``, and the client's next write depends on it.
        """
        self.command(op="sideload", update=base64.b64encode(update).decode())

    def get(self) -> dict[str, Any]:
        state: dict[str, Any] = self.command(op="get")["state"]
        return state

    def set_awareness(self, state: dict[str, Any]) -> None:
        """Replace the provider's local awareness state (bumps its awareness clock)."""
        self.command(op="awareness", state=state)

    def peers(self) -> dict[int, Any]:
        """The other clients' awareness states the provider holds, by client id."""
        peers: dict[str, Any] = self.command(op="peers")["peers"]
        return {int(client): state for client, state in peers.items()}

    def wait(self, key: str, value: Any, timeout: float | None = None) -> bool:
        """True once ``state[key]`` deep-equals ``value``; False after ``timeout`` s."""
        ms = int((self.timeout if timeout is None else timeout) * 1000)
        return bool(self.command(op="wait", key=key, value=value, timeout=ms)["ok"])

    def kill(self) -> None:
        """Kill the process (SIGKILL): its connection drops without a goodbye."""
        self._node.proc.kill()
        self._node.stop()

    def close(self) -> None:
        """Ask the client to quit; kill it if it does not."""
        if self._node.proc.poll() is None:
            with contextlib.suppress(NodeHarnessError, ValueError):
                self.command(op="quit")
        self._node.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
