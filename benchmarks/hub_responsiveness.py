"""Hub responsiveness: small merges in room B while big merges go into room A.

A hub runs in its own process (``python -m sync.cli hub --insecure``, in memory, or
durable with ``--db``). One raw websocket client sends small merges into room B, one at a
time, and times each round trip (request sent -> merge result received). Meanwhile,
in the loaded runs, another client sends big merges (just under the hub's 4 MiB message
limit) into room A, one after the other, each on the token of the previous result:

- ``list``: one change setting a path to a list of many small items;
- ``changes``: a huge change set (many ``set`` changes on distinct paths);
- ``accepted``: a list of 19,000 items (within the default per-merge limits, so judged).

Reported per run: p50/p99/max of room B's round trips, room B merges acknowledged, and
room A's big merges answered, with their status (ok, or the error code of a refusal).

    PYTHONPATH=. python benchmarks/hub_responsiveness.py [--seconds 6] [--db]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange

MAX_MESSAGE = 4 * 2**20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def big_changes(kind: str) -> list[WireChange]:
    """Changes whose merge request is just under the hub's message limit."""
    if kind == "accepted":  # within the default per-merge limits: judged on the loop
        numbers: Any = list(range(19_000))
        return [WireChange(ChangeKind.SET, ("big",), numbers)]
    if kind == "list":
        items: Any = list(range(100_000, 100_000 + 560_000))  # 7 bytes per item in JSON
        return [WireChange(ChangeKind.SET, ("big",), items)]
    return [WireChange(ChangeKind.SET, ("many", f"k{i}"), i) for i in range(70_000)]


async def reply_of(ws: ClientConnection, request_id: int) -> p.MergeReply:
    while True:
        data = await ws.recv()
        assert isinstance(data, bytes)
        message = p.decode_message(data)
        if isinstance(message, p.MergeReply) and message.request_id == request_id:
            return message


async def big_sender(url: str, kind: str, stop: Any, outcomes: Any) -> None:
    """Send big merges into room A until ``stop`` is set (in its own process: encoding
    and receiving megabytes must not slow down the measuring client)."""
    frame = p.encode_merge_request(1, "big", b"\x00", big_changes(kind))  # encoded once
    assert len(frame) < MAX_MESSAGE, len(frame)
    async with ws_connect(url, compression=None, max_size=None) as ws:
        while not stop.is_set():
            await ws.send(frame)
            reply = await reply_of(ws, 1)
            code = reply.error.code if reply.error else reply.status.name.lower()
            outcomes[code] = outcomes.get(code, 0) + 1


def big_sender_process(url: str, kind: str, stop: Any, outcomes: Any) -> None:
    asyncio.run(big_sender(url, kind, stop, outcomes))


async def small_merges(url: str, seconds: float) -> list[float]:
    times: list[float] = []
    async with ws_connect(url, compression=None, max_size=None) as ws:
        token, request_id = b"\x00", 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            request_id += 1
            change = WireChange(ChangeKind.SET, ("n",), request_id)
            start = time.perf_counter()
            await ws.send(p.encode_merge_request(request_id, "small", token, [change]))
            reply = await reply_of(ws, request_id)
            times.append(time.perf_counter() - start)
            token = reply.token
            await asyncio.sleep(0.005)
    return times


async def run(base: str, load: str | None, seconds: float, tag: str) -> tuple[str, ...]:
    manager = mp.Manager()
    stop, outcomes = manager.Event(), manager.dict()
    sender = None
    if load is not None:
        target, url = big_sender_process, f"{base}/a-{tag}"
        sender = mp.Process(target=target, args=(url, load, stop, outcomes))
        sender.start()
        await asyncio.sleep(2.0)  # the big merges are under way
    times = await small_merges(f"{base}/b-{tag}", seconds)
    stop.set()
    if sender is not None:
        sender.join(30)
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    big = ", ".join(f"{k}={v}" for k, v in sorted(dict(outcomes).items())) or "-"
    manager.shutdown()
    return (
        load or "none",
        f"{statistics.median(ms):.1f}",
        f"{p99:.1f}",
        f"{ms[-1]:.1f}",
        str(len(ms)),
        big,
    )


def table(rows: Sequence[tuple[str, ...]]) -> str:
    head = ("big merges in A", "B p50 ms", "B p99 ms", "B max ms", "B merges", "A results")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in (head, *rows)]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--port", str(port)]
        command += ["--db", f"{tmp}/db" if args.db else "", "--log-level", "WARNING"]
        hub = subprocess.Popen(command)
        try:
            for _ in range(200):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                await asyncio.sleep(0.05)
            base = f"ws://127.0.0.1:{port}"
            rows = [await run(base, None, args.seconds, "idle")]
            for kind in ("list", "changes", "accepted"):
                rows.append(await run(base, kind, args.seconds, kind))
        finally:
            hub.terminate()
            hub.wait(10)
    print(f"hub {'durable' if args.db else 'in memory'}, {args.seconds:.0f} s per run")
    print(table(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--db", action="store_true", help="a durable hub (SQLite files)")
    asyncio.run(main(parser.parse_args()))
