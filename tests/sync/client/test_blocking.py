"""The blocking client: threads merging through a real hub."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hubs import FAST, RestartableHub

from crdt_state import ConflictError, StateUpdate, WriteInListener, resolvers
from sync import connect_blocking

T = TypeVar("T")


def test_threads_merge_through_the_hub(hub_url: str) -> None:
    url = f"{hub_url}/threads"
    with connect_blocking(url, agent="setup") as setup:
        setup.commit({"calls": 0}, setup.token)

    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with connect_blocking(url, agent=f"w{i}", resolvers={"calls": resolvers.counter}) as r:
                for n in range(5):
                    with r.fork() as branch:
                        branch.set(("done", f"w{i}-{n}"), n)
                        branch.set("calls", (branch.get("calls") or 0) + 1)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    with connect_blocking(url, agent="check") as check:
        state = check.snapshot()
    assert state["calls"] == 40
    assert len(state["done"]) == 40


def test_blocking_conflicts_and_context_manager(hub_url: str) -> None:
    url = f"{hub_url}/conflicts"
    with connect_blocking(url, agent="a") as a, connect_blocking(url, agent="b") as b:
        a.commit({"owner": "nobody"}, a.token)
        one, two = a.fork(), b.fork()
        one.set("owner", "a")
        two.set("owner", "b")
        one.merge()
        with pytest.raises(ConflictError):
            two.merge()
        assert two.status == "open"
        two.merge(resolvers={"owner": resolvers.first_writer_wins})
        with pytest.raises(RuntimeError), a.fork() as branch:
            branch.set("owner", "never")
            raise RuntimeError("agent failed")
        assert a.get("owner") == "a"


class HubThread:
    """A restartable hub (see ``hubs.RestartableHub``) on its own event-loop thread."""

    def __init__(self, db: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.hub = RestartableHub(db)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self) -> None:
        self.call(self.hub.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_blocking_offline_steps_read_their_own_merges(tmp_path: Path) -> None:
    hub = HubThread(tmp_path / "hub.db")
    try:
        hub.call(hub.hub.start())
        url = hub.hub.url("blocking/offline")
        with connect_blocking(url, agent="a", local=tmp_path / "a.sqlite", reconnect=FAST) as r:
            r.commit({"n": 0, "status": "new"}, r.token)
            hub.call(hub.hub.stop())
            deadline = time.monotonic() + 5
            while r.remote.connected and time.monotonic() < deadline:
                time.sleep(0.01)
            for i in range(3):
                with r.fork() as branch:
                    assert branch.get("n") == i
                    branch.set("n", branch.get("n") + 1)
            for status in ("triaged", "resolved"):
                with r.fork() as branch:
                    branch.set("status", status)
            assert r.get("n") == 3 and r.snapshot() == {"n": 3, "status": "resolved"}
            hub.call(hub.hub.start())
            r.wait_idle()
            assert hub.call(hub.hub.state("blocking/offline")) == {"n": 3, "status": "resolved"}
            assert r.remote.failed == []
    finally:
        hub.close()


def test_a_listener_that_merges_through_its_blocking_client_is_refused_not_stuck(
    hub_url: str,
) -> None:
    """It waited on the client's own thread for itself: the client hung for good."""
    seen: list[BaseException] = []

    with connect_blocking(f"{hub_url}/echo", agent="a") as remote:

        def echo(update: StateUpdate) -> None:
            try:
                remote.commit({"echo": 1}, remote.token)
            except BaseException as exc:
                seen.append(exc)

        remote.subscribe(echo)
        remote.commit({"a": 1}, remote.token)
        remote.wait_idle()
        assert [type(e) for e in seen][:1] == [WriteInListener]
        assert remote.get("a") == 1 and remote.get("echo") is None
        remote.commit({"b": 2}, remote.token)  # the client goes on
        assert remote.get("b") == 2
