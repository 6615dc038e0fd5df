"""The blocking client: threads merging through a real hub."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from crdt_state import ConflictError, resolvers
from sync import Hub, connect_blocking


@pytest.fixture
def hub_url() -> Iterator[str]:
    """A hub on its own event loop thread (the test itself is plain threads)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, object] = {}

    async def run() -> None:
        async with Hub(port=0) as hub:
            holder["url"] = f"ws://{hub.host}:{hub.port}"
            holder["stop"] = stop = asyncio.Event()
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(10)
    yield str(holder["url"])
    stop = holder["stop"]
    assert isinstance(stop, asyncio.Event)
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


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
