"""A minimal y-websocket client in Python: raw ``websockets`` + ``sync.wire.protocol`` + pycrdt.

It exists to prove that our codec interoperates with real Yjs peers; the library's own
remote client lives in ``sync``. It is synchronous and single-threaded: nothing happens
until :meth:`PycrdtClient.pump` (or a method that pumps) reads from the socket, so tests
wait by pumping with a deadline, never by sleeping.

Protocol behaviour (the same as a stock ``WebsocketProvider``): on connect send sync step 1;
answer every sync step 1 with sync step 2; apply sync step 2 and updates; count the first
sync step 2 as "synced"; send each local transaction as one update message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlencode

import pycrdt
from websockets.sync.client import ClientConnection, connect

from sync.wire.protocol import (
    Message,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_message,
    encode_sync_step1,
    encode_sync_step2,
    encode_update,
)

DEFAULT_TIMEOUT = 15.0


class PycrdtClient:
    """A pycrdt ``Doc`` kept in sync with one room of a y-websocket server.

    ``state`` is the root map named ``state``. Construction connects and sends sync step 1;
    call :meth:`wait_synced` before relying on the remote content.
    """

    def __init__(
        self, url: str, room: str, *, token: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.timeout = timeout
        self.doc: pycrdt.Doc[Any] = pycrdt.Doc()
        self.state: pycrdt.Map[Any] = self.doc.get("state", type=pycrdt.Map)
        self.synced = False
        self.received: list[Message] = []
        self._applying_remote = False
        self._outbox: list[bytes] = []
        self._subscription = self.doc.observe(self._on_transaction)
        query = f"?{urlencode({'token': token})}" if token else ""
        self._exit_stack = ExitStack()
        self.ws: ClientConnection = self._exit_stack.enter_context(
            connect(f"{url}/{quote(room)}{query}", open_timeout=timeout, proxy=None)
        )
        self.ws.send(encode_sync_step1(self.doc.get_state()))

    def _on_transaction(self, event: pycrdt.TransactionEvent) -> None:
        if not self._applying_remote:
            self._outbox.append(event.update)

    def _apply_remote(self, update: bytes) -> None:
        self._applying_remote = True
        try:
            self.doc.apply_update(update)
        finally:
            self._applying_remote = False

    def _flush(self) -> None:
        while self._outbox:
            self.ws.send(encode_update(self._outbox.pop(0)))

    def pump(self, timeout: float) -> Message | None:
        """Receive and handle at most one message; ``None`` if none came within ``timeout``."""
        try:
            data = self.ws.recv(timeout=max(timeout, 0.0))
        except TimeoutError:
            return None
        assert isinstance(data, bytes), "y-websocket sends binary messages only"
        message = decode_message(data)
        self.received.append(message)
        match message:
            case SyncStep1(state_vector):
                self.ws.send(encode_sync_step2(self.doc.get_update(state_vector)))
            case SyncStep2(update):
                self._apply_remote(update)
                self.synced = True
            case SyncUpdate(update):
                self._apply_remote(update)
            case _:
                pass  # awareness and the rest: recorded only
        return message

    def pump_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Pump messages until ``predicate()`` holds; False if ``timeout`` s pass first."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.pump(remaining)
        return True

    def wait_synced(self) -> bool:
        return self.pump_until(lambda: self.synced)

    def wait(self, key: str, value: Any, timeout: float | None = None) -> bool:
        """True once ``state[key] == value`` (pumping meanwhile); False on timeout."""
        return self.pump_until(lambda: self.get().get(key) == value, timeout)

    def get(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = self.state.to_py() or {}
        return snapshot

    def set(self, key: str, value: Any) -> None:
        """Write ``state[key] = value`` locally and send the transaction's update."""
        self.state[key] = value
        self._flush()

    def send_raw(self, data: bytes) -> None:
        self.ws.send(data)

    def close(self) -> None:
        self.doc.unobserve(self._subscription)
        self._exit_stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
