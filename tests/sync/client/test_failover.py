"""A room served by several hubs: the client fails over between their URLs (issue 11).

Real hubs on loopback. Two :class:`hubs.RestartableHub` on the same SQLite file stand
for a cluster whose hubs take over from each other (one runs at a time, so the file is
handed over); the hub deduplicates re-sent merges on (writer, request id).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from collections import Counter
from pathlib import Path

import pytest
from hubs import FAST, SECRET, RestartableHub, eventually, free_port

import sync
from crdt_state import MergeResult, Retry, resolvers
from sync.client._offline import PendingMerge
from sync.client.remote import RemoteState


class _NoJitter(random.Random):
    """Backoff that always waits its cap (so a test sees whether it waited at all)."""

    def uniform(self, a: float, b: float) -> float:
        return b


SLOW = Retry(attempts=1, base_delay=60.0, max_delay=60.0, rng=_NoJitter())
"""A backoff of a minute: a client that waited would miss every timeout below."""


async def test_a_dead_first_url_moves_to_the_second_at_once(hub: sync.Hub) -> None:
    dead = f"ws://127.0.0.1:{free_port()}/room"
    live = hub.url("room")
    async with sync.connect([dead, live], agent="a", reconnect=SLOW, timeout=5) as remote:
        assert remote.connected and remote.url == live and remote.urls == (dead, live)
        async with remote.fork() as branch:
            branch["x"] = 1
        assert (await hub.room("room")).state.snapshot() == {"x": 1}


async def test_every_url_dead_backs_off_then_gives_up_at_the_timeout() -> None:
    urls = [f"ws://127.0.0.1:{free_port()}/room" for _ in range(3)]
    with pytest.raises(ConnectionError) as info:
        async with sync.connect(urls, agent="a", reconnect=FAST, timeout=0.5):
            pass
    assert all(url in str(info.value) for url in urls)


@pytest.mark.parametrize(
    "urls",
    [
        [],
        ["ws://127.0.0.1:1/room", "http://127.0.0.1:2/room"],
        ["ws://127.0.0.1:1/room", "ws://127.0.0.1:2/other"],
        ["ws://127.0.0.1:1/room", "ws:///room"],
        # a hub serves "room/" apart from "room": a failover would write to another room
        ["ws://127.0.0.1:1/t/room", "ws://127.0.0.1:2/t/room/"],
        ["ws://127.0.0.1:1/t/room#frag"],  # websockets quoted it, the token with it
        ["ws://[::1/room"],  # an unclosed bracket: a bare ValueError
    ],
)
async def test_every_url_is_checked_up_front(urls: list[str]) -> None:
    with pytest.raises(sync.InvalidHubURL) as info:
        async with sync.connect(urls, agent="a", token="s3cr3t-t0ken"):
            pass
    assert info.value.code == "invalid_url" and "s3cr3t-t0ken" not in str(info.value)
    with pytest.raises(sync.InvalidHubURL):
        sync.connect_blocking(urls, agent="a")


async def test_hub_a_stops_with_merges_in_flight_hub_b_takes_over(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    a, b = RestartableHub(db), RestartableHub(db)
    await a.start()
    n = 200
    remote = RemoteState(
        [a.url("room"), b.url("room")],
        agent="x",
        resolvers={"n": resolvers.counter},
        reconnect=FAST,
    )
    await remote.start()
    acked: list[MergeResult] = []
    sent: Counter[int] = Counter()  # request id -> frames sent for it
    frame_for = remote._core.frame_for

    def counting(merge: PendingMerge) -> bytes | None:
        frame = frame_for(merge)
        if frame is not None:
            sent[merge.request_id] += 1
        return frame

    remote._core.frame_for = counting  # type: ignore[method-assign]

    async def one(i: int) -> MergeResult:
        branch = remote.fork()
        branch["n"] = branch.get("n", 0) + 1
        branch.append("log", i)
        result = await branch.amerge()
        if not result.pending:
            acked.append(result)
        return result

    try:
        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await eventually(lambda: len(acked) >= 10)
        await a.stop()  # merges still in flight: their callers get "pending"
        results = await asyncio.gather(*tasks)
        unacked = [r for r in results if r.pending]
        assert unacked, "the hub answered every merge before it stopped"
        assert remote.snapshot()["log"] == list(range(n))  # read-your-writes while offline
        await b.start()  # the same file: the stand-in knows what A applied
        await remote.wait_idle()
        await eventually(lambda: remote.connected)
        assert remote.url == b.url("room")
        state = await b.state("room")
        # every merge once: acknowledged ones not applied again, the others re-sent once
        assert sorted(state["log"]) == list(range(n))
        assert len(sent) == n and set(sent.values()) == {1, 2}
        assert sum(1 for count in sent.values() if count == 2) == len(unacked)
        assert state["n"] == n
        assert remote.failed == [] and remote.conflicted == []
        await eventually(lambda: remote.snapshot() == state)
    finally:
        await remote.close()
        await b.stop()
        await a.stop()


async def test_the_client_goes_round_the_urls_again_after_the_last_one(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    a, b = RestartableHub(db), RestartableHub(db)
    await b.start()
    try:
        async with sync.connect([a.url("r"), b.url("r")], agent="x", reconnect=FAST) as remote:
            assert remote.url == b.url("r")
            async with remote.fork() as branch:
                branch["k"] = "on b"
            await b.stop()
            await a.start()  # round robin: after b comes a again
            await eventually(lambda: remote.connected)
            assert remote.url == a.url("r") and remote.get("k") == "on b"
            async with remote.fork() as branch:
                branch["k"] = "on a"
            assert (await a.state("r"))["k"] == "on a"
    finally:
        await a.stop()
        await b.stop()


class ResettingProxy:
    """A loopback TCP relay to ``port`` whose connections can be reset (RST), as a
    SIGKILLed hub's are: the client sees no close frame."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.server: asyncio.Server | None = None
        self.links: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []

    @property
    def listening(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.links.append((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                dst.write_eof()  # pass the end on, or the hub waits its close timeout

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def reset(self) -> None:
        """Reset every relayed connection (SO_LINGER 0: an RST, no FIN)."""
        for client, upstream in self.links:
            sock = client.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.transport.abort()
            upstream.transport.abort()
        self.links.clear()

    async def close(self) -> None:
        self.reset()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_synced_connection_reset_twice_moves_on_at_once_both_times(hub: sync.Hub) -> None:
    port = int(hub.url("r").split(":")[2].split("/")[0])
    a, b = ResettingProxy(port), ResettingProxy(port)
    await a.start()
    await b.start()
    urls = [f"ws://127.0.0.1:{p.listening}/r" for p in (a, b)]
    try:
        async with sync.connect(urls, agent="x", reconnect=SLOW, timeout=5) as remote:
            assert remote.url == urls[0]
            a.reset()  # the hub behind a dies: the client moves to b at once
            await eventually(lambda: remote.connected and remote.url == urls[1])
            async with remote.fork() as branch:
                branch["k"] = "via b"
            # b dies as well, after syncing: back to a at once, not after a minute's
            # backoff (a synced connection resets it, however it ended)
            b.reset()
            await eventually(lambda: remote.connected and remote.url == urls[0])
            async with remote.fork() as branch:
                branch["k"] = "via a"
            assert (await hub.room("r")).state.snapshot() == {"k": "via a"}
    finally:
        await a.close()
        await b.close()


async def test_leaving_connect_waits_for_pending_merges_while_the_client_fails_over(
    tmp_path: Path,
) -> None:
    """The README's cluster snippet: a merge cut off by a dead hub still lands at exit."""
    db = tmp_path / "hub.db"
    a, b = RestartableHub(db), RestartableHub(db)
    await a.start()
    try:
        async with sync.connect([a.url("r"), b.url("r")], agent="x", reconnect=FAST) as remote:
            async with remote.fork() as branch:
                branch["k"] = "first"
            await a.stop()  # the hub in use is gone: the next merge can only wait
            assert (await _set(remote, "k", "second")).pending
            await b.start()  # the other hub of the list comes up while the client closes
        assert remote.pending == 0
        assert (await b.state("r"))["k"] == "second"
    finally:
        await a.stop()
        await b.stop()


async def test_closing_with_merges_no_hub_took_raises_unsent_merges(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    a = RestartableHub(db)
    await a.start()
    try:
        with pytest.raises(sync.UnsentMerges) as info:
            async with sync.connect(a.url("r"), agent="x", reconnect=FAST) as remote:
                await a.stop()
                assert (await _set(remote, "k", 1)).pending
                await remote.close(timeout=0.3)  # what leaving the block does, after 10 s
        assert info.value.code == "unsent_merges" and info.value.count == 1
        assert info.value.agent == "x" and info.value.urls == (a.url("r"),)
        assert "local" in str(info.value)
        assert info.value.why is not None and f"(not connected: {info.value.why})" in str(
            info.value
        )
    finally:
        await a.stop()


async def test_unsent_merges_say_the_hub_refused_an_expired_token() -> None:
    """Found as a user: only a log line said why the merges never left."""
    async with sync.Hub(port=0, secret=SECRET) as hub:
        token = sync.mint_token(SECRET, "r", "write", 2)
        with pytest.raises(sync.UnsentMerges) as info:
            async with sync.connect(hub.url("r"), agent="x", token=token, reconnect=FAST) as remote:
                await asyncio.sleep(int(time.time()) + 2.5 - time.time())  # expired
                assert (await _set(remote, "k", 1)).pending
                await remote.close(timeout=0.5)
        assert info.value.why is not None and "expired_token" in info.value.why
        assert "expired_token" in str(info.value)


async def test_an_error_in_the_block_is_not_replaced_by_unsent_merges(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "hub.db"
    a = RestartableHub(db)
    await a.start()
    try:
        with pytest.raises(KeyError):
            async with sync.connect(a.url("r"), agent="x", reconnect=FAST) as remote:
                await a.stop()
                assert (await _set(remote, "k", 1)).pending
                raise KeyError("the agent's own error")
        assert "unsent" in caplog.text or "no hub" in caplog.text
    finally:
        await a.stop()


async def _set(remote: RemoteState, key: str, value: object) -> MergeResult:
    branch = remote.fork()
    branch[key] = value
    return await branch.amerge()


async def test_an_agent_merging_in_a_tight_loop_reconnects_meanwhile(tmp_path: Path) -> None:
    """Found trying a failover as a user: offline, ``amerge`` returned without yielding,
    so an agent merging in a loop with nothing else awaited starved its own reconnection
    (it came back only once the agent stopped). Each queued merge now lets the loop run.
    """
    db = tmp_path / "hub.db"
    a, b = RestartableHub(db), RestartableHub(db)
    await a.start()
    async with sync.connect(
        [a.url("room"), b.url("room")], agent="x", reconnect=FAST, timeout=5
    ) as remote:
        await a.stop()
        await eventually(lambda: not remote.connected)
        await b.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        merges, online = 0, False
        while not online and loop.time() < deadline:  # nothing awaited but the merge
            merges += 1
            branch = remote.fork()
            branch[f"k{merges}"] = merges
            online = not (await branch.amerge()).pending
        assert online, f"still offline after {merges} merges in 10 s"
        await remote.wait_idle(30)
        state = await b.state("room")
        assert {key: state[key] for key in state} == {f"k{i}": i for i in range(1, merges + 1)}
        assert remote.failed == [] and remote.conflicted == []


async def test_a_hub_of_the_list_that_refuses_the_token_is_passed_over() -> None:
    """One hub set up with another secret must not end the client while the others take it."""
    token = sync.mint_token("secret-one", "room", "write", 600)
    async with (
        sync.Hub(port=0, secret="secret-one") as good,
        sync.Hub(port=0, secret="secret-two") as other,
    ):
        urls = [f"ws://127.0.0.1:{other.port}/room", f"ws://127.0.0.1:{good.port}/room"]
        async with sync.connect(urls, agent="a", token=token, timeout=5) as remote:
            assert remote.url == urls[1] and remote.connected
            async with remote.fork() as branch:
                branch["x"] = 1
            assert branch.result is not None and not branch.result.pending
        # when every hub of the list refuses it, the client is told at once
        with pytest.raises(sync.AuthError) as info:
            async with sync.connect([urls[0], urls[0]], agent="a", token=token, timeout=5):
                pass
        assert info.value.code == "bad_signature"


async def test_a_frozen_hub_first_in_the_list_does_not_use_up_the_timeout(hub: sync.Hub) -> None:
    """A hub that accepts the connection and never answers (SIGSTOPped) held each attempt
    for 5 s: with two such URLs first, the third was never tried within connect's 10 s."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, reads, never answers the handshake

    frozen = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        port = frozen.sockets[0].getsockname()[1]
        urls = [f"ws://127.0.0.1:{port}/room", hub.url("room")]
        started = asyncio.get_running_loop().time()
        async with sync.connect(urls, agent="a", timeout=5) as remote:
            assert remote.url == urls[1]
            assert asyncio.get_running_loop().time() - started < 4.5
    finally:
        frozen.close()


async def test_a_token_in_the_url_and_another_given_is_refused_up_front() -> None:
    """The hub got two token parameters and refused both (``malformed_token``)."""
    with pytest.raises(sync.InvalidHubURL) as info:
        async with sync.connect("ws://127.0.0.1:1/room?token=one", agent="a", token="tw0"):
            pass
    assert "tw0" not in str(info.value) and "one" not in str(info.value)
