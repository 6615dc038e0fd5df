"""Prometheus metrics of one hub: a small object the hub calls at a few points.

Every :class:`HubMetrics` owns its own :class:`prometheus_client.CollectorRegistry`
(several hubs in one process, as in the tests, never share counters), rendered
in the Prometheus text format by :meth:`HubMetrics.render` for ``GET /metrics``.

The metrics (all prefixed ``crdt_state_``):

- ``merges_total{status}``: merges judged by the hub, by result (ok, conflict, error);
- ``conflicts_total{policy}``: conflicts met by those merges, by the policy that settled
  them (``unresolved`` when none did);
- ``merge_seconds``: time to judge a merge (histogram);
- ``durable_commit_seconds``: time from a judged merge until its change is durable;
- ``connections``: open websocket connections (rooms and inspector feeds, by ``kind``);
- ``rooms_loaded``: rooms held in memory;
- ``received_bytes_total`` / ``sent_bytes_total``: bytes in/out on every connection;
- ``refused_connections_total{reason}``: handshakes refused, by reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from websockets.asyncio.server import ServerConnection

__all__ = ["CONTENT_TYPE", "HubMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The media type of :meth:`HubMetrics.render`'s output."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class HubMetrics:
    """The counters, gauges and histograms of one hub, in a registry of their own.

    Args:
        rooms_loaded: tells how many rooms the hub holds (read at each scrape).
    """

    def __init__(self, rooms_loaded: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.merges = Counter(
            "crdt_state_merges", "Merges judged by the hub, by result.", ["status"], registry=r
        )
        self.conflicts = Counter(
            "crdt_state_conflicts",
            "Conflicts met by judged merges, by the policy that settled them.",
            ["policy"],
            registry=r,
        )
        self.merge_seconds = Histogram(
            "crdt_state_merge_seconds",
            "Time to judge one merge.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.durable_seconds = Histogram(
            "crdt_state_durable_commit_seconds",
            "Time from a judged merge until its change is durable.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.connections = Gauge(
            "crdt_state_connections", "Open websocket connections.", ["kind"], registry=r
        )
        self.rooms = Gauge("crdt_state_rooms_loaded", "Rooms held in memory.", registry=r)
        self.rooms.set_function(lambda: float(rooms_loaded()))
        self.received = Counter(
            "crdt_state_received_bytes", "Bytes received on all connections.", registry=r
        )
        self.sent = Counter("crdt_state_sent_bytes", "Bytes sent on all connections.", registry=r)
        self._merges_by_status: dict[str, Counter] = {}
        self.refused = Counter(
            "crdt_state_refused_connections",
            "Handshakes refused, by reason.",
            ["reason"],
            registry=r,
        )

    # -- what the hub calls -------------------------------------------------------------
    def merge_judged(self, status: str, policies: list[str], seconds: float | None) -> None:
        """Count one judged merge (``status``: ok/conflict/error) and its conflicts' policies.

        ``seconds`` (its latency) is observed unless ``None`` (unknown).
        """
        counter = self._merges_by_status.get(status)
        if counter is None:  # labels() takes a lock and builds a key: once per status
            counter = self._merges_by_status[status] = self.merges.labels(status=status)
        counter.inc()
        for policy in policies:
            self.conflicts.labels(policy=policy).inc()
        if seconds is not None:
            self.merge_seconds.observe(seconds)

    def durable_after(self, seconds: float) -> None:
        """Record the time a judged merge took to become durable."""
        self.durable_seconds.observe(seconds)

    def refused_connection(self, reason: str) -> None:
        """Count a refused handshake (``reason``: a short stable word or phrase)."""
        self.refused.labels(reason=reason).inc()

    def render(self) -> bytes:
        """Every metric in the Prometheus text exposition format."""
        return generate_latest(self.registry)

    def connection_class(self) -> type[ServerConnection]:
        """Make a :class:`ServerConnection` subclass that counts the bytes it moves.

        It counts what it receives and sends; give it to
        ``websockets.serve(create_connection=...)``.
        """
        metrics = self

        class MeteredConnection(ServerConnection):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                counted = _CountingTransport(cast(asyncio.Transport, transport), metrics.sent)
                super().connection_made(cast(asyncio.Transport, counted))

            def data_received(self, data: bytes) -> None:
                metrics.received.inc(len(data))
                super().data_received(data)

        return MeteredConnection


class _CountingTransport:
    """A transport that counts the bytes written through it and delegates everything else."""

    def __init__(self, inner: asyncio.Transport, sent: Counter) -> None:
        self._inner = inner
        self._sent = sent

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._sent.inc(len(data))
        self._inner.write(data)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
