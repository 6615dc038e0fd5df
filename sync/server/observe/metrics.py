"""Prometheus metrics of one hub: a small object the hub calls at a few points.

Every :class:`HubMetrics` owns its own :class:`prometheus_client.CollectorRegistry`
(several hubs in one process, as in the tests, never share counters), rendered
in the Prometheus text format by :meth:`HubMetrics.render` for ``GET /metrics``.

The metrics (all prefixed ``crdt_state_``):

- ``merges_total{status}``: merges judged by the hub, by result (ok, conflict, error);
- ``merge_errors_total{code}``: the merges of ``status="error"`` (nothing written), by
  their error's stable code (``conflict`` or ``retry`` for a conflict no policy settled,
  ``merge_too_large``, ``read_only``, ...), so that an alert on errors can leave ordinary
  conflicts out;
- ``conflicts_total{policy}``: conflicts met by those merges, by the policy that settled
  them (``unresolved`` when none did);
- ``merge_seconds``: time to judge a merge (histogram);
- ``durable_commit_seconds``: time from a judged merge until its change is durable;
- ``connections``: open websocket connections (rooms and inspector feeds, by ``kind``);
- ``rooms_loaded``: rooms held in memory;
- ``held_update_bytes``: bytes of peers' updates the rooms this hub judges hold until what
  they build on arrives (see :attr:`crdt_state.SharedState.held_bytes`);
- ``received_bytes_total`` / ``sent_bytes_total``: bytes in/out on every connection;
- ``refused_connections_total{reason}``: handshakes refused, by reason.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import prometheus_client.metrics as _prometheus_metrics
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString
from websockets.asyncio.server import ServerConnection

__all__ = ["CONTENT_TYPE", "MAX_ERROR_CODES", "HubMetrics", "LoopCounter", "LoopHistogram"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The media type of :meth:`HubMetrics.render`'s output."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


MAX_ERROR_CODES = 64
"""Most ``code`` values of ``merge_errors_total``: ``MAX_ERROR_CODES - 1`` codes, then ``other``."""

_ERROR_CODE = re.compile(r"[a-z][a-z0-9_]{0,47}")


def _error_label(code: str | None, known: dict[str, list[float]]) -> str:
    """The ``code`` label of a merge error: the code itself if it is a stable code's shape."""
    if code is None or _ERROR_CODE.fullmatch(code) is None:
        return "other"
    if code not in known and len(known) - ("other" in known) >= MAX_ERROR_CODES - 1:
        return "other"  # MAX_ERROR_CODES - 1 codes kept apart, and "other"
    return code


def _created_series() -> bool:
    """Whether ``prometheus_client`` exports ``_created`` samples (it may be told not to)."""
    return bool(getattr(_prometheus_metrics, "_use_created", True))


class LoopCounter:
    """A Prometheus counter kept in plain numbers, for one thread (the hub's event loop).

    ``prometheus_client``'s counters take a lock and check their arguments on every
    ``inc``; the hub counts several things per merge, all on its event-loop thread. This
    counter adds to a plain number (``value``, or ``children[label]``) and builds the
    samples only when the registry is collected (a scrape). The exported metric is the
    one a ``prometheus_client.Counter`` of the same name, help, labels and increments
    exports (same samples, in the same order; ``_created`` is when the series began).

    Not thread-safe: increment from one thread only (collecting from another is fine:
    it reads numbers).

    Args:
        name: the metric's name, without ``_total``.
        documentation: its help text.
        label: the name of its one label (``None``: no label; use ``value``).
        registry: where to register it.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str | None = None,
        *,
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.value = 0.0
        """The count of a counter without a label."""
        self.children: dict[str, list[float]] = {}
        """By label value: ``[count, created]`` (see :meth:`child`)."""
        self._created = _now()
        registry.register(self)

    def child(self, value: str) -> list[float]:
        """The ``[count, created]`` pair of the series labelled ``value`` (made on first use).

        Add to ``pair[0]`` to count.
        """
        pair = self.children.get(value)
        if pair is None:
            pair = self.children[value] = [0.0, _now()]
        return pair

    def describe(self) -> Iterable[Metric]:
        """The metric without samples (for the registry's name check)."""
        return [Metric(self.name, self.documentation, "counter")]

    def collect(self) -> Iterable[Metric]:
        """The metric with its samples, as ``prometheus_client.Counter`` builds them."""
        metric = Metric(self.name, self.documentation, "counter")
        created = _created_series()
        if self.label is None:
            series: list[tuple[dict[str, str], float, float]] = [({}, self.value, self._created)]
        else:
            label = self.label
            series = [({label: k}, v[0], v[1]) for k, v in list(self.children.items())]
        for labels, value, since in series:
            metric.add_sample(self.name + "_total", labels, float(value))
            if created:
                metric.add_sample(self.name + "_created", labels, since)
        return [metric]


class LoopHistogram:
    """A Prometheus histogram without labels kept in plain numbers, for one thread.

    As :class:`LoopCounter`: :meth:`observe` adds to a bucket count and the sum (the
    sum is added to in the same order as ``prometheus_client.Histogram`` adds to its
    own, so the exported values are the same to the last bit); the samples are built
    when the registry is collected.

    Not thread-safe: observe from one thread only.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Iterable[float],
        *,
        registry: CollectorRegistry,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("buckets not in sorted order")
        if not bounds or bounds[-1] != float("inf"):
            bounds.append(float("inf"))
        self.name = name
        self.documentation = documentation
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        """Observations by bucket (not cumulative): the first bound they are at most."""
        self.sum = 0.0
        self._created = _now()
        self._labels = [str(floatToGoString(b)) for b in bounds]  # type: ignore[no-untyped-call,unused-ignore]
        registry.register(self)

    def observe(self, amount: float) -> None:
        """Count one observation of ``amount`` (a NaN is added to the sum only)."""
        self.sum += amount
        if amount == amount:  # not NaN: prometheus_client puts a NaN in no bucket
            self.counts[bisect.bisect_left(self.bounds, amount)] += 1

    def describe(self) -> Iterable[Metric]:
        """The metric without samples (for the registry's name check)."""
        return [Metric(self.name, self.documentation, "histogram")]

    def collect(self) -> Iterable[Metric]:
        """The metric with its samples, as ``prometheus_client.Histogram`` builds them."""
        metric = Metric(self.name, self.documentation, "histogram")
        acc = 0.0
        for label, count in zip(self._labels, list(self.counts), strict=True):
            acc += count
            metric.add_sample(self.name + "_bucket", {"le": label}, acc)
        metric.add_sample(self.name + "_count", {}, acc)
        if self.bounds[0] >= 0:
            metric.add_sample(self.name + "_sum", {}, self.sum)
        if _created_series():
            metric.add_sample(self.name + "_created", {}, self._created)
        return [metric]


def _now() -> float:
    return time.time()


class HubMetrics:
    """The counters, gauges and histograms of one hub, in a registry of their own.

    The metrics counted per merge or per socket read and write (merges, latencies,
    bytes) are :class:`LoopCounter` and :class:`LoopHistogram`: plain numbers updated
    on the event-loop thread, turned into samples at each scrape. Call the methods
    that update them from the hub's event-loop thread only.

    Args:
        rooms_loaded: tells how many rooms the hub holds (read at each scrape).
        held_bytes: tells how many bytes of peers' updates the rooms it judges hold (the same).
    """

    def __init__(
        self,
        rooms_loaded: Callable[[], int] = lambda: 0,
        held_bytes: Callable[[], int] = lambda: 0,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.merges = LoopCounter(
            "crdt_state_merges", "Merges judged by the hub, by result.", "status", registry=r
        )
        self.merge_errors = LoopCounter(
            "crdt_state_merge_errors",
            "Merges that wrote nothing, by their error's code.",
            "code",
            registry=r,
        )
        self.conflicts = Counter(
            "crdt_state_conflicts",
            "Conflicts met by judged merges, by the policy that settled them.",
            ["policy"],
            registry=r,
        )
        self.merge_seconds = LoopHistogram(
            "crdt_state_merge_seconds",
            "Time to judge one merge.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.durable_seconds = LoopHistogram(
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
        self.held = Gauge(
            "crdt_state_held_update_bytes",
            "Bytes of peers' updates held until what they build on arrives (rooms judged here).",
            registry=r,
        )
        self.held.set_function(lambda: float(held_bytes()))
        self.received = LoopCounter(
            "crdt_state_received_bytes", "Bytes received on all connections.", registry=r
        )
        self.sent = LoopCounter(
            "crdt_state_sent_bytes", "Bytes sent on all connections.", registry=r
        )
        self._merges_by_status: dict[str, list[float]] = {}
        self.refused = Counter(
            "crdt_state_refused_connections",
            "Handshakes refused, by reason.",
            ["reason"],
            registry=r,
        )

    # -- what the hub calls -------------------------------------------------------------
    def merge_judged(
        self,
        status: str,
        policies: list[str],
        seconds: float | None,
        error_code: str | None = None,
    ) -> None:
        """Count one judged merge (``status``: ok/conflict/error) and its conflicts' policies.

        ``seconds`` (its latency) is observed unless ``None`` (unknown). ``error_code``: the
        code of an ``error`` result (counted under ``merge_errors_total``; a code that is not
        a short lower-case word, or one past the :data:`MAX_ERROR_CODES` first kinds, counts
        as ``other``, so the label's values stay few). Event-loop thread.
        """
        self.merges.child(status)[0] += 1
        if status == "error":
            self.merge_errors.child(_error_label(error_code, self.merge_errors.children))[0] += 1
        for policy in policies:
            self.conflicts.labels(policy=policy).inc()
        if seconds is not None:
            self.merge_seconds.observe(seconds)

    def durable_after(self, seconds: float) -> None:
        """Record the time a judged merge took to become durable (event-loop thread)."""
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
        ``websockets.serve(create_connection=...)``. Its connections run on the event
        loop's thread (as every ``websockets`` connection does).
        """
        received = self.received
        sent = self.sent

        class MeteredConnection(ServerConnection):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                counted = _CountingTransport(cast(asyncio.Transport, transport), sent)
                super().connection_made(cast(asyncio.Transport, counted))

            def data_received(self, data: bytes) -> None:
                received.value += len(data)
                super().data_received(data)

        return MeteredConnection


_DELEGATED = (
    "get_write_buffer_size",
    "is_closing",
    "get_extra_info",
    "pause_reading",
    "resume_reading",
    "is_reading",
    "close",
    "abort",
)
"""Transport methods bound once per connection (no ``__getattr__`` on each call)."""


class _CountingTransport:
    """A transport that counts the bytes written through it and delegates everything else."""

    def __init__(self, inner: asyncio.Transport, sent: LoopCounter) -> None:
        self._inner = inner
        self._sent = sent
        for name in _DELEGATED:
            method = getattr(inner, name, None)
            if method is not None:
                setattr(self, name, method)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._sent.value += len(data)
        self._inner.write(data)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
