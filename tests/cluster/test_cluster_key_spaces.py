"""Two clusters on one Redis, each on a PostgreSQL database of its own, stay apart.

Every Redis key was ``crdt:{room}:<part>``: the hubs of two deployments sharing a Redis
server (staging and production of one app, or two apps) with a room of the same name
shared its lease, its streams and its awareness channel, so a hub of one cluster could
own the room and commit the other cluster's writes into its own database. Each cluster now
names its keys in a key space of its own, ``crdt:<cluster id>:{room}:<part>``, the id
made by the migration that creates ``crdt_cluster`` in its database.

One hub per cluster here, in this process, on a private redis-server and two throwaway
databases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_servers import RedisServer, create_database, drop_database, postgres_admin_dsn

from crdt_state import SharedState, resolvers
from crdt_state.postgres import load_stored
from sync import Hub, connect
from sync.client import RemoteState
from sync.server.cluster import DEFAULT_SPACE, KeySpace, lease_holder, redis_client
from sync.server.cluster.keys import hash_tag

pytestmark = pytest.mark.slow

ROOM = "main"
COUNTER = {"count": resolvers.counter}


@pytest.fixture
def two_databases() -> Iterator[tuple[str, str]]:
    """Two empty databases (not migrated: each cluster's first hub does it)."""
    admin = postgres_admin_dsn()
    made: list[str] = []
    try:
        made.append(create_database(admin))
        made.append(create_database(admin))
        yield made[0], made[1]
    finally:
        for dsn in made:
            drop_database(admin, dsn)


def stored(dsn: str, room: str) -> dict[str, Any] | None:
    """The room's state as the database holds it (snapshot and log), ``None`` if never written."""
    found = load_stored(dsn, room)
    if found is None:
        return None
    state = SharedState(follower=True)
    state.apply_update(found.snapshot)
    for change in found.changes:
        state.apply_update(change.update)
    snapshot = state.snapshot()
    state.close()
    return snapshot


async def write(remote: RemoteState, who: str, times: int) -> None:
    """``who`` in the room's ``who`` field, then ``times`` increments of ``count``."""
    await remote.acommit({"who": who}, remote.token)
    for _ in range(times):
        branch = remote.fork()
        branch.set("count", (branch.get("count") or 0) + 1)
        result = await branch.amerge()
        assert result.applied == (("count",),)


async def published(pubsub: Any) -> list[tuple[str, bytes]]:
    """The (channel, message) pairs the pattern subscription got so far."""
    got: list[tuple[str, bytes]] = []
    while (message := await pubsub.get_message(timeout=0.5)) is not None:
        if message["type"] == "pmessage":
            got.append((message["channel"].decode(), bytes(message["data"])))
    return got


async def test_two_clusters_on_one_redis_keep_a_room_of_one_name_apart(
    private_redis: RedisServer, two_databases: tuple[str, str]
) -> None:
    x_dsn, y_dsn = two_databases
    watcher = redis_client(private_redis.url)
    pubsub = watcher.pubsub()
    await pubsub.psubscribe("crdt:*")  # every awareness message of both clusters
    try:
        async with (
            asyncio.timeout(90),
            Hub(port=0, redis=private_redis.url, postgres=x_dsn) as x,
            Hub(port=0, redis=private_redis.url, postgres=y_dsn) as y,
            connect(x.url(ROOM), agent="on-x", resolvers=COUNTER, timeout=10) as on_x,
            connect(y.url(ROOM), agent="on-y", resolvers=COUNTER, timeout=10) as on_y,
        ):
            await write(on_x, "x", 5)
            await write(on_y, "y", 3)
            await asyncio.sleep(0.3)  # anything crossing over would arrive by now
            assert on_x.snapshot() == {"who": "x", "count": 5}
            assert on_y.snapshot() == {"who": "y", "count": 3}
            assert await asyncio.to_thread(stored, x_dsn, ROOM) == {"who": "x", "count": 5}
            assert await asyncio.to_thread(stored, y_dsn, ROOM) == {"who": "y", "count": 3}
            x_node, y_node = x._cluster, y._cluster
            assert x_node is not None and y_node is not None
            # each hub owns its cluster's room: neither forwards to the other
            assert x_node.rooms[ROOM].owner is not None
            assert y_node.rooms[ROOM].owner is not None
            x_space, y_space = x_node.key_space, y_node.key_space
            assert len({x_space, y_space, DEFAULT_SPACE}) == 3
            x_lease = await lease_holder(watcher, ROOM, x_space)
            y_lease = await lease_holder(watcher, ROOM, y_space)
            assert x_lease is not None and x_lease.startswith(x_node.hub_id + "#")
            assert y_lease is not None and y_lease.startswith(y_node.hub_id + "#")
            assert await lease_holder(watcher, ROOM) is None  # nothing in the default space
            # every key of the room is one cluster's: lease and out (in: each owner's own
            # hub hands its writes over directly)
            spaces = {"x": x_space, "y": y_space}
            parts: dict[str, set[str]] = {"x": set(), "y": set()}
            async for raw in watcher.scan_iter("crdt:*"):
                if hash_tag(key := raw.decode()) == ROOM:
                    name, part = _owner_of(spaces, key)
                    parts[name].add(part)
            assert parts["x"] >= {"owner", "out"} and parts["y"] >= {"owner", "out"}
            # awareness (each agent's presence) went on its own cluster's channel only
            hubs = {"x": x_node.hub_id.encode(), "y": y_node.hub_id.encode()}
            senders: dict[str, set[bytes]] = {"x": set(), "y": set()}
            for channel, data in await published(pubsub):
                if hash_tag(channel) != ROOM:
                    continue
                name, part = _owner_of(spaces, channel)
                assert part == "awareness", channel
                senders[name].add(data.partition(b"\x00")[0])
            assert senders == {"x": {hubs["x"]}, "y": {hubs["y"]}}
    finally:
        await pubsub.aclose()
        await watcher.aclose()


def _owner_of(spaces: dict[str, KeySpace], key: str) -> tuple[str, str]:
    """``(name, part)``: the one space of ``spaces`` that ``key`` (a key of ``ROOM``) is in."""
    found = []
    for name, space in spaces.items():
        try:
            room, part = space.parse(key)
        except ValueError:
            continue
        if room == ROOM:
            found.append((name, part))
    assert len(found) == 1, f"{key!r} is a key of {len(found)} of the spaces"
    return found[0]
