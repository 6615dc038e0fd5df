"""Hub cluster: 1, 2 and 3 hub processes on one Redis and one PostgreSQL database.

For each hub count, ``--rooms`` rooms and ``--agents`` agents spread round robin over the
hubs (``python -m sync.cli hub --redis ... --postgres ...``, real processes) run flat out
for ``--seconds``: each agent loops fork, set its own key, ``await amerge()``. One observer
per room, connected to a hub other than the room's first writer's, timestamps every
change it receives. Reported per hub count:

- acknowledged merges per second, p50/p99 of one fork-edit-merge round trip;
- cross-hub visibility: from a merge's acknowledgement on one hub to the observer on
  another hub seeing it (p50/p99; 0 when it was seen first);
- hub CPU microseconds per merge: the hub processes' CPU time (``/proc``) over the
  acknowledged merges, the figure that does not depend on how busy the machine is, and
  its ratio to the standalone hub's of the same run.

Hub count ``0`` (first in the default ``--hubs 0,1,2,3``) is the standalone hub, the
embedded default (``--db DIR``: one SQLite file per room, durable, no Redis or
PostgreSQL), under the same load: the row every cluster row is compared with, measured
minutes apart on the same machine (the issue's goal: a cluster's CPU per merge at most
twice a standalone hub's).

A hub's CPU per merge falls as its rate rises (bigger batches: more merges per commit,
per Redis call, per loop turn), and flat out on a 2-core machine the standalone hub runs
about twice a 3-hub cluster's rate, so the flat-out ratio mixes the hub count with the
batch size. ``--same-rate`` adds, after each flat-out cluster row, a standalone hub
paced at the rate that row reached: its ``cluster`` figure is the cluster's CPU per
merge over a single hub's doing the same merges at the same rate (it skips the SIGKILL
runs). ``--spread-owners`` sends room r's first merge to hub r % hubs, which then owns
it (7/7/6 with 3 hubs) instead of first come, first served (usually one hub for most).

Then (with 3 hubs) the owner of one room is SIGKILLed during the load: failover is the
longest time without an acknowledgement in that room, and ``lost`` counts acknowledged
merges missing from PostgreSQL afterwards (must be 0).

    PYTHONPATH=. python benchmarks/cluster.py [--seconds 5] [--rooms 20] [--agents 200]
        [--hubs 0,1,2,3] [--kind replica|wire] [--rate 0] [--failovers 1] [--no-failover]
        [--same-rate] [--spread-owners] [--logs DIR] [--pin-hubs]
        [--redis-server redis-server] [--postgres DSN]

``--kind wire`` runs protocol-level agents instead of ``sync.connect`` replicas: each
speaks the codec (merge requests out, replies in; the fork base is its last reply's
token) and drops the room's update frames unread, so the one client process costs a
fraction of a replica agent and the hubs, not the client, set the pace. ``--rate N``
paces the agents to N merges/s in all (each agent one merge every ``agents / N`` s from
a random phase; latency counts from the scheduled start, so falling behind shows);
0 runs them flat out. The observers are ``sync.connect`` replicas either way.
``--pin-hubs`` keeps every thread of a hub on one CPU (hub i on the i-th CPU this
process may use, round robin; the standalone hub on the first), as ``taskset -c``
would.

A private ``redis-server`` runs on a free loopback port (nothing on disk); a throwaway
database is created on the PostgreSQL server of ``--postgres`` and dropped at the end.
The agents share one client process, which on a small machine is the bottleneck of the
merge rate (compare the CPU per merge, not the rate, across hub counts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from _procs import cpu_seconds, pin, thread_cpu
from _reference import reference_line, reference_us
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from websockets.asyncio.client import connect as ws_connect

from sync import ChangeKind, WireChange, connect
from sync.wire import protocol

if TYPE_CHECKING:
    from sync.server.cluster.keys import KeySpace

ROOMS = f"bench-{secrets.token_hex(3)}"
"""This run's room names (``ROOMS/r0``...): runs sharing a PostgreSQL server stay apart."""
PROFILED = """
import cProfile, runpy, sys, time
out = sys.argv.pop(1)
sys.argv[0] = "sync.cli"
profile = cProfile.Profile(time.thread_time)  # the loop thread's CPU, not the wall clock
try:
    profile.runcall(runpy.run_module, "sync.cli", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    profile.dump_stats(out)
"""
"""Runs ``python -m sync.cli`` under cProfile counting the main thread's CPU time only:
time spent waiting for the CPU (other processes) or in the store's writer threads is left
out, so the figures add up to the event loop's own work."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process on port {port} exited")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


class Servers:
    """A private redis-server and a throwaway database."""

    def __init__(self, redis_binary: str, admin_dsn: str, workdir: Path) -> None:
        self.redis_port = free_port()
        self.redis = subprocess.Popen(
            [redis_binary, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.redis_port, self.redis)
        self.admin = admin_dsn
        self.dbname = f"crdt_bench_{secrets.token_hex(4)}"
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))
        self.dsn = make_conninfo(admin_dsn, dbname=self.dbname)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def close(self) -> None:
        self.redis.terminate()
        self.redis.wait(10)
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(self.dbname)
                )
            )


class HubProc:
    def __init__(
        self,
        servers: Servers,
        workdir: Path,
        name: str,
        profile: Path | None = None,
        log_level: str = "WARNING",
        standalone: bool = False,
        loop: str = "asyncio",
        cpu: int | None = None,
    ) -> None:
        self.port = free_port()
        self.clustered = not standalone
        self.log = open(workdir / f"hub-{name}.log", "ab")  # noqa: SIM115
        python = [sys.executable]
        if profile is not None:  # written when the hub exits (SIGTERM stops it cleanly)
            python += ["-c", PROFILED, str(profile / f"hub-{name}.prof")]
        else:
            python += ["-m", "sync.cli"]
        if standalone:  # the embedded default: one SQLite file per room, no cluster
            store = ["--db", str(workdir / f"db-{name}")]
        else:
            store = ["--db", "", "--redis", servers.redis_url, "--postgres", servers.dsn]
        self.proc = subprocess.Popen(
            [*python, "hub", "--port", str(self.port), *store,
             "--insecure", "--log-level", log_level, "--loop", loop],
            stdout=self.log, stderr=self.log,
        )  # fmt: skip
        if cpu is not None:
            pin(self.proc.pid, cpu)
        wait_port(self.port, self.proc)

    def url(self, room: str) -> str:
        return f"ws://127.0.0.1:{self.port}/{room}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def server_counters(servers: Servers) -> tuple[int, int]:
    """Redis commands served so far, and PostgreSQL transactions committed in the database."""
    from sync.server.cluster.clients import redis_client

    client = redis_client(servers.redis_url)
    try:
        stats: Any = await client.info("commandstats")
    finally:
        await client.aclose()
    calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    if os.environ.get("CLUSTER_BENCH_COMMANDS"):  # the breakdown, for profiling
        print({k[8:]: int(v["calls"]) for k, v in stats.items()}, file=sys.stderr)
    with psycopg.connect(servers.admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (servers.dbname,)
        ).fetchone()
    return calls, int(row[0]) if row is not None else 0


async def key_space(dsn: str) -> KeySpace:
    """The cluster's Redis key space: named by the id its database holds (hubs migrated it)."""
    from sync.server.cluster.keys import KeySpace
    from sync.server.cluster.schema import cluster_id

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return KeySpace(await cluster_id(conn))


async def owners(servers: Servers, hubs: list[HubProc], rooms: int) -> str:
    """Rooms each hub owns now, most first (``20/0/0``: one owner), from the lease keys.

    A lease's token starts with its hub's name, ``host:pid:...``. ``-`` for a hub
    outside a cluster (no leases).
    """
    if not any(h.clustered for h in hubs):
        return "-"
    from sync.server.cluster.clients import redis_client
    from sync.server.cluster.lease import lease_holder

    space = await key_space(servers.dsn)
    client = redis_client(servers.redis_url)
    try:
        holders = [await lease_holder(client, f"{ROOMS}/r{r}", space) for r in range(rooms)]
    finally:
        await client.aclose()
    counts = dict.fromkeys((h.proc.pid for h in hubs), 0)
    for token in holders:
        pid = int(token.split(":")[1]) if token and token.count(":") >= 2 else None
        if pid in counts:
            counts[pid] += 1
    return "/".join(str(n) for n in sorted(counts.values(), reverse=True))


async def wire_agent(url: str, agent: str, stack: contextlib.AsyncExitStack) -> Any:
    """A protocol-level agent on ``url``: ``merge(key, n)`` sets ``key`` to ``n``; True if ok."""
    ws = await stack.enter_async_context(ws_connect(url, compression=None, max_queue=None))
    first = protocol.decode_message(await ws.recv(decode=False))
    assert isinstance(first, protocol.SyncStep1)
    base = [first.state_vector]
    waiters: dict[int, asyncio.Future[protocol.MergeReply]] = {}
    ids = itertools.count(1)

    async def read() -> None:
        with contextlib.suppress(Exception):
            async for data in ws:
                if isinstance(data, bytes) and data[0] == protocol.MERGE_MESSAGE_TYPE:
                    reply = protocol.decode_message(data)
                    assert isinstance(reply, protocol.MergeReply)
                    waiter = waiters.pop(reply.request_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(reply)

    reader = asyncio.create_task(read())

    async def cancel() -> None:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader

    stack.push_async_callback(cancel)

    async def merge(key: str, n: int) -> bool:
        rid = next(ids)
        waiter: asyncio.Future[protocol.MergeReply] = asyncio.get_running_loop().create_future()
        waiters[rid] = waiter
        change = WireChange(ChangeKind.SET, (key,), n)
        await ws.send(protocol.encode_merge_request(rid, agent, base[0], [change]))
        reply = await asyncio.wait_for(waiter, 30)
        if reply.status is not protocol.MergeStatus.OK:
            return False
        base[0] = reply.token
        return True

    return merge


async def run_load(
    servers: Servers,
    hubs: list[HubProc],
    rooms: int,
    agents: int,
    seconds: float,
    kill: HubProc | None = None,
    tag: str = "",
    kind: str = "replica",
    rate: float = 0.0,
    spread: bool = False,
) -> dict[str, Any]:
    claims = contextlib.AsyncExitStack()
    if spread and len(hubs) > 1:  # room r's first merge on hub r % hubs: its owner
        for r in range(rooms):
            merge = await wire_agent(hubs[r % len(hubs)].url(f"{ROOMS}/r{r}"), "claim", claims)
            await merge(f"{tag}claim", 1)
    try:
        return await _run_load(servers, hubs, rooms, agents, seconds, kill, tag, kind, rate)
    finally:
        await claims.aclose()


async def _run_load(
    servers: Servers,
    hubs: list[HubProc],
    rooms: int,
    agents: int,
    seconds: float,
    kill: HubProc | None,
    tag: str,
    kind: str,
    rate: float,
) -> dict[str, Any]:
    acked: dict[tuple[str, str, int], float] = {}
    latencies: list[float] = []
    visible: list[float] = []
    ack_times: dict[str, list[float]] = {}
    stop = asyncio.Event()
    names = [f"{ROOMS}/r{r}" for r in range(rooms)]
    interval = agents / rate if rate else 0.0
    ready = asyncio.Event()
    joined = [0]
    refused = [0]

    async def agent(i: int) -> None:
        room = names[i % rooms]
        hub = hubs[i % len(hubs)]
        urls = [hub.url(room)] + [h.url(room) for h in hubs if h is not hub]
        key = f"{tag}a{i}"  # a run's own keys: a later run's counts restart at 1
        async with contextlib.AsyncExitStack() as stack:
            if kind == "wire":
                merge = await wire_agent(hub.url(room), f"agent-{i}", stack)
            else:
                remote = await stack.enter_async_context(
                    connect(urls, agent=f"agent-{i}", timeout=30)
                )

                async def merge(key: str, n: int) -> bool:
                    branch = remote.fork()
                    branch.set(key, n)
                    result = await branch.amerge()
                    if result.pending:  # between hubs: queued, sent on reconnection
                        await asyncio.sleep(0.05)
                        return False
                    return True

            joined[0] += 1
            if joined[0] == agents:
                ready.set()
            await ready.wait()
            n = 0
            scheduled = time.monotonic() + random.random() * interval
            while not stop.is_set():
                n += 1
                if interval:
                    await asyncio.sleep(max(0.0, scheduled - time.monotonic()))
                    start, scheduled = scheduled, scheduled + interval
                else:
                    start = time.monotonic()
                if stop.is_set():
                    break
                if not await merge(key, n):
                    refused[0] += 1
                    continue
                if stop.is_set():  # after the measured window
                    break
                now = time.monotonic()
                latencies.append(now - start)
                acked[(room, key, n)] = now
                ack_times.setdefault(room, []).append(now)

    async def observer(r: int) -> None:
        room = names[r]
        hub = hubs[(r + 1) % len(hubs)]  # not the hub of the room's first agent
        async with connect(hub.url(room), agent=f"observer-{r}") as remote:
            replica = remote.replica

            def seen(change: Any) -> None:
                now = time.monotonic()
                for path in change.paths:
                    key = path[0]
                    value = replica.get(key)
                    if isinstance(value, (int, float)):
                        at = acked.get((room, key, int(value)))
                        visible.append(max(0.0, now - at) if at is not None else 0.0)

            unsubscribe = replica.subscribe(seen)
            await stop.wait()
            unsubscribe()

    tasks = [asyncio.create_task(observer(r)) for r in range(rooms)]
    tasks += [asyncio.create_task(agent(i)) for i in range(agents)]
    await asyncio.wait_for(ready.wait(), 60)
    latencies.clear()
    visible.clear()
    cpu0 = sum(cpu_seconds(h.proc.pid) for h in hubs)
    threads0 = [thread_cpu(h.proc.pid) for h in hubs]
    counters0 = await server_counters(servers)
    killed_at = None
    started = time.monotonic()
    if kill is not None:
        await asyncio.sleep(seconds / 3)
        killed_at = time.monotonic()
        kill.proc.kill()
        print(f"  killed hub pid {kill.proc.pid} at {time.time():.3f}", file=sys.stderr)
        await asyncio.sleep(seconds * 2 / 3)
    else:
        await asyncio.sleep(seconds)
    elapsed = time.monotonic() - started
    cpu = sum(cpu_seconds(h.proc.pid) for h in hubs if h.proc.poll() is None) - cpu0
    if os.environ.get("CLUSTER_BENCH_THREADS"):  # each hub's threads' CPU, for profiling
        for i, (h, before) in enumerate(zip(hubs, threads0, strict=True)):
            after = thread_cpu(h.proc.pid)
            used = {t: after[t] - before.get(t, 0.0) for t in after}
            print(
                f"  hub {i}: "
                + ", ".join(
                    f"{t} {v / elapsed * 1000:.0f} ms/s"
                    for t, v in sorted(used.items(), key=lambda kv: -kv[1])
                    if v > 0
                ),
                file=sys.stderr,
            )
    owned = await owners(servers, hubs, rooms)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    await asyncio.sleep(1.0)  # PostgreSQL publishes its statistics about once a second
    counters1 = await server_counters(servers)
    merges = max(1, len(latencies))
    out: dict[str, Any] = {
        "merges": len(latencies),
        "rate": len(latencies) / elapsed,
        "p50": pct(latencies, 0.5) * 1000,
        "p99": pct(latencies, 0.99) * 1000,
        "vis50": pct(visible, 0.5) * 1000,
        "vis99": pct(visible, 0.99) * 1000,
        "cpu_us": cpu / max(1, len(latencies)) * 1e6,
        "acked": acked,
        "redis_calls": (counters1[0] - counters0[0]) / merges,
        "pg_commits": (counters1[1] - counters0[1]) / merges,
        "refused": refused[0],
        "owners": owned,
    }
    if killed_at is not None:
        gaps = []
        for acks in ack_times.values():
            since = [killed_at, *sorted(t for t in acks if t > killed_at)]
            gaps.append(
                max(b - a for a, b in itertools.pairwise(since)) if len(since) > 1 else elapsed
            )
        out["failover"] = max(gaps)
        out["gaps"] = sorted(gaps, reverse=True)
    return out


def lost_in_postgres(dsn: str, acked: dict[tuple[str, str, int], float]) -> int:
    from crdt_state import SharedState
    from crdt_state.postgres import load_stored

    newest: dict[tuple[str, str], int] = {}
    for room, key, n in acked:
        newest[(room, key)] = max(n, newest.get((room, key), 0))
    lost = 0
    for room in {room for room, _ in newest}:
        stored = load_stored(dsn, room)
        state = SharedState(follower=True)
        if stored is not None:
            state.apply_update(stored.snapshot)
            for change in stored.changes:
                state.apply_update(change.update)
        for (r, key), n in newest.items():
            if r == room and (state.get(key) or 0) < n:
                lost += 1
    return lost


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rooms", type=int, default=20)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument(
        "--hubs", default="0,1,2,3", help="hub counts, one row each (0: the standalone hub)"
    )
    parser.add_argument(
        "--kind", choices=("replica", "wire"), default="replica", help="agent kind (see above)"
    )
    parser.add_argument("--rate", type=float, default=0.0, help="paced merges/s in all (0: flat)")
    parser.add_argument(
        "--profile", type=Path, help="run the hubs under cProfile, writing hub-*.prof here"
    )
    parser.add_argument(
        "--spread-owners",
        action="store_true",
        help="room r's first merge goes to hub r %% hubs, which then owns it (7/7/6)",
    )
    parser.add_argument(
        "--same-rate",
        action="store_true",
        help="after each flat-out cluster row, a standalone hub paced at its rate",
    )
    parser.add_argument("--no-failover", action="store_true", help="skip the SIGKILL runs")
    parser.add_argument(
        "--failovers",
        type=int,
        default=1,
        help="SIGKILL runs per hub count (each kills the owner of a room; a new cluster each)",
    )
    parser.add_argument(
        "--logs", type=Path, help="keep the hubs' logs (at INFO level) in this directory"
    )
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the hubs' --loop"
    )
    parser.add_argument(
        "--pin-hubs",
        action="store_true",
        help="keep each hub's threads on one CPU (hub i on the i-th CPU, round robin)",
    )
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CRDT_STATE_TEST_POSTGRES")
        or "host=127.0.0.1 user=postgres dbname=postgres",
    )
    args = parser.parse_args()
    if args.same_rate and args.rate:
        parser.error("--same-rate follows flat-out rows: leave --rate at 0")
    conninfo_to_dict(args.postgres)  # fail early on a bad DSN
    pace = f"paced at {args.rate:.0f} merges/s" if args.rate else "flat out"
    reference = reference_us()
    print(f"{args.rooms} rooms, {args.agents} {args.kind} agents, {args.seconds} s {pace} per row")
    print(
        "| hubs | merges/s | p50 ms | p99 ms | visible p50 ms | visible p99 ms "
        "| hub CPU us/merge | x standalone | Redis calls/merge | PG commits/merge | owners |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cpus = sorted(os.sched_getaffinity(0))
    standalone_us: float | None = None
    failovers: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.logs or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        level = "INFO" if args.logs else "WARNING"
        for count in [int(c) for c in args.hubs.split(",")]:
            alone = count == 0
            kills = (
                args.failovers
                if count >= 2
                and not (args.no_failover or args.same_rate)
                and args.kind == "replica"
                else 0
            )
            for attempt in range(max(1, kills)):
                servers = Servers(args.redis_server, args.postgres, Path(tmp))
                hubs: list[HubProc] = []
                try:
                    hubs = [
                        HubProc(
                            servers,
                            workdir,
                            f"{count}-{i}-{attempt}",
                            args.profile,
                            level,
                            alone,
                            args.loop,
                            cpus[i % len(cpus)] if args.pin_hubs else None,
                        )
                        for i in range(max(1, count))
                    ]
                    row = await run_load(
                        servers,
                        hubs,
                        args.rooms,
                        args.agents,
                        args.seconds,
                        kind=args.kind,
                        rate=args.rate,
                        spread=args.spread_owners,
                    )
                    if alone:
                        standalone_us = row["cpu_us"]
                    ratio = f"{row['cpu_us'] / standalone_us:.2f}" if standalone_us else "-"
                    label = "standalone" if alone else str(count)
                    print(
                        f"| {label} | {row['rate']:.0f} | {row['p50']:.1f} | {row['p99']:.1f} | "
                        f"{row['vis50']:.1f} | {row['vis99']:.1f} | {row['cpu_us']:.0f} | "
                        f"{ratio} | {row['redis_calls']:.1f} | {row['pg_commits']:.2f} | "
                        f"{row['owners']} |"
                        + (f" refused {row['refused']}" if row["refused"] else ""),
                        flush=True,
                    )
                    if args.same_rate and not alone and not args.rate:
                        for hub in hubs:
                            hub.stop()
                        await same_rate_row(servers, workdir, args, row, f"{count}-{attempt}")
                    if kills:
                        gap, lost = await failover(servers, hubs, args, row)
                        failovers.setdefault(count, []).append(gap)
                        print(
                            f"|   owner of a room SIGKILLed ({count} hubs): longest time without "
                            f"an acknowledgement in a room {gap:.2f} s, lost {lost} |",
                            flush=True,
                        )
                finally:
                    for hub in hubs:
                        hub.stop()
                    servers.close()
    print(reference_line(reference))
    for count, gaps in failovers.items():
        print(
            f"failover with {count} hubs over {len(gaps)} runs: median "
            f"{statistics.median(gaps):.2f} s, worst {max(gaps):.2f} s"
        )


async def same_rate_row(
    servers: Servers, workdir: Path, args: argparse.Namespace, row: dict[str, Any], name: str
) -> None:
    """A standalone hub paced at the merge rate ``row`` (a flat-out cluster row) reached.

    A hub's CPU per merge falls as its batches grow with the rate, so a standalone hub
    flat out (about twice a 3-hub cluster's rate on a 2-core machine) is not the same
    work: this row is the standalone hub doing the cluster's merges at the cluster's
    rate, and its ratio compares like with like.
    """
    hub = HubProc(servers, workdir, f"same-{name}", None, "WARNING", True, args.loop)
    try:
        alone = await run_load(
            servers, [hub], args.rooms, args.agents, args.seconds, kind=args.kind,
            rate=row["rate"],
        )  # fmt: skip
    finally:
        hub.stop()
    print(
        f"|   standalone paced at that rate | {alone['rate']:.0f} | {alone['p50']:.1f} | "
        f"{alone['p99']:.1f} | - | - | {alone['cpu_us']:.0f} | "
        f"cluster {row['cpu_us'] / alone['cpu_us']:.2f} | - | - | - |",
        flush=True,
    )


async def failover(
    servers: Servers, hubs: list[HubProc], args: argparse.Namespace, row: dict[str, Any]
) -> tuple[float, int]:
    """SIGKILL the owner of room 0 under load: the longest gap, and merges lost."""
    from sync.server.cluster.clients import redis_client
    from sync.server.cluster.lease import lease_holder

    space = await key_space(servers.dsn)
    client = redis_client(servers.redis_url)
    token = await lease_holder(client, f"{ROOMS}/r0", space)
    await client.aclose()
    pid = int((token or "x:0:").split("#")[0].split(":")[1])
    victim = next((h for h in hubs if h.proc.pid == pid), hubs[0])
    kill = await run_load(servers, hubs, args.rooms, args.agents, args.seconds * 2, victim, "k")
    lost = lost_in_postgres(servers.dsn, {**row["acked"], **kill["acked"]})
    print("  gaps per room (s): " + " ".join(f"{g:.2f}" for g in kill["gaps"]), file=sys.stderr)
    return float(kill["failover"]), lost


if __name__ == "__main__":
    asyncio.run(main())
