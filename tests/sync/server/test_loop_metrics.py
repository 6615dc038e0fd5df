"""The hub's per-merge metrics kept in plain numbers export what prometheus_client did.

:class:`~sync.server.observe.metrics.HubMetrics` counts merges, latencies and bytes in
plain numbers on the event-loop thread and builds the samples at each scrape. These
tests feed the same events to it and to the ``prometheus_client`` counters and
histograms it used before, and compare the whole ``/metrics`` text (only the
``_created`` timestamps may differ); and they check the byte counters against the
bytes a real connection moved through a counting TCP relay.
"""

from __future__ import annotations

import asyncio
import math
import re

from hubs import eventually
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sync.client.remote import connect
from sync.server.hub import Hub
from sync.server.observe.metrics import _LATENCY_BUCKETS, HubMetrics, LoopHistogram


class _Reference:
    """The metrics as ``prometheus_client`` objects, as :class:`HubMetrics` had them."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.merges = Counter("crdt_state_merges", "Merges judged by the hub, by result.",
                              ["status"], registry=r)  # fmt: skip
        self.merge_errors = Counter("crdt_state_merge_errors",
                                    "Merges that wrote nothing, by their error's code.",
                                    ["code"], registry=r)  # fmt: skip
        self.conflicts = Counter(
            "crdt_state_conflicts",
            "Conflicts met by judged merges, by the policy that settled them.",
            ["policy"],
            registry=r,
        )
        self.merge_seconds = Histogram("crdt_state_merge_seconds", "Time to judge one merge.",
                                       buckets=_LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.durable_seconds = Histogram(
            "crdt_state_durable_commit_seconds",
            "Time from a judged merge until its change is durable.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.connections = Gauge("crdt_state_connections", "Open websocket connections.",
                                 ["kind"], registry=r)  # fmt: skip
        rooms = Gauge("crdt_state_rooms_loaded", "Rooms held in memory.", registry=r)
        rooms.set_function(lambda: 0.0)
        held = Gauge(
            "crdt_state_held_update_bytes",
            "Bytes of peers' updates held until what they build on arrives (rooms judged here).",
            registry=r,
        )
        held.set_function(lambda: 0.0)
        self.received = Counter("crdt_state_received_bytes", "Bytes received on all connections.",
                                registry=r)  # fmt: skip
        self.sent = Counter("crdt_state_sent_bytes", "Bytes sent on all connections.", registry=r)
        self.refused = Counter("crdt_state_refused_connections", "Handshakes refused, by reason.",
                               ["reason"], registry=r)  # fmt: skip

    def merge_judged(
        self, status: str, policies: list[str], seconds: float | None, code: str | None
    ) -> None:
        self.merges.labels(status=status).inc()
        if status == "error":
            self.merge_errors.labels(code=code or "other").inc()
        for policy in policies:
            self.conflicts.labels(policy=policy).inc()
        if seconds is not None:
            self.merge_seconds.observe(seconds)


_CREATED = re.compile(r"^(\S+_created(?:\{[^}]*\})?) \S+$", re.MULTILINE)


def _without_created_values(text: bytes) -> str:
    return _CREATED.sub(r"\1 T", text.decode())


_seconds = st.one_of(
    st.none(),
    st.sampled_from([0.0, *_LATENCY_BUCKETS, math.inf]),  # on the bounds
    st.floats(min_value=0.0, max_value=10.0),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
_event = st.one_of(
    st.tuples(
        st.just("merge"),
        st.sampled_from(["ok", "conflict", "error"]),
        st.lists(st.sampled_from(["counter", "unresolved", "lww"]), max_size=3),
        _seconds,
        st.sampled_from(["conflict", "merge_too_large", None]),
    ),
    st.tuples(st.just("durable"), st.floats(allow_nan=False, width=64)),
    st.tuples(st.just("received"), st.integers(0, 1 << 20)),
    st.tuples(st.just("sent"), st.integers(0, 1 << 20)),
    st.tuples(st.just("refused"), st.sampled_from(["missing_token", "503"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_event, max_size=60))
def test_the_metrics_text_is_what_prometheus_client_exported(events: list[tuple]) -> None:  # type: ignore[type-arg]
    ref, new = _Reference(), HubMetrics()
    for event in events:
        kind = event[0]
        if kind == "merge":
            ref.merge_judged(*event[1:])
            new.merge_judged(*event[1:])
        elif kind == "durable":
            ref.durable_seconds.observe(event[1])
            new.durable_after(event[1])
        elif kind == "received":
            ref.received.inc(event[1])
            new.received.value += event[1]
        elif kind == "sent":
            ref.sent.inc(event[1])
            new.sent.value += event[1]
        else:
            ref.refused.labels(reason=event[1]).inc()
            new.refused_connection(event[1])
    ref.connections.labels(kind="room").inc()
    new.connections.labels(kind="room").inc()
    assert _without_created_values(new.render()) == _without_created_values(
        generate_latest(ref.registry)
    )


def test_a_nan_latency_goes_to_the_sum_only_as_prometheus_client_does() -> None:
    registry = CollectorRegistry()
    ref = Histogram("h", "h", buckets=(1.0,), registry=registry)
    new = LoopHistogram("h", "h", (1.0,), registry=CollectorRegistry())
    for value in (0.5, math.nan, 2.0):
        ref.observe(value)
        new.observe(value)
    ours = [(s.name, s.labels, s.value) for m in new.collect() for s in m.samples]
    theirs = [(s.name, s.labels, s.value) for m in ref.collect() for s in m.samples]
    ours, theirs = ([x for x in xs if not x[0].endswith("_created")] for xs in (ours, theirs))
    assert [x[:2] for x in ours] == [x[:2] for x in theirs]
    assert [x[2] for x in ours if not math.isnan(x[2])] == [
        x[2] for x in theirs if not math.isnan(x[2])
    ]


class _CountingRelay:
    """A TCP relay to ``port`` that counts the bytes it carries each way."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.up = 0  # client to hub
        self.down = 0  # hub to client
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hub_reader, hub_writer = await asyncio.open_connection("127.0.0.1", self.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            while data := await src.read(65536):
                if up:
                    self.up += len(data)
                else:
                    self.down += len(data)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

        await asyncio.gather(pipe(reader, hub_writer, True), pipe(hub_reader, writer, False))
        writer.close()
        hub_writer.close()


async def test_the_byte_counters_count_every_byte_on_the_wire() -> None:
    async with Hub(port=0) as hub:
        relay = _CountingRelay(hub.port)
        port = await relay.start()
        metrics = hub.inspector.metrics
        async with connect(f"ws://127.0.0.1:{port}/bytes", agent="a") as a:
            for i in range(5):
                await a.acommit({"x": i, "text": "y" * (50 * i)}, a.token)
        await eventually(lambda: hub._connections == 0 and relay.down > 0)
        await eventually(
            lambda: (metrics.received.value, metrics.sent.value) == (relay.up, relay.down)
        )
        assert relay.server is not None
        relay.server.close()
