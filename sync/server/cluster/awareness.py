"""Awareness between the hubs of a cluster: Redis pub/sub, one channel per room, ephemeral.

A hub publishes what each awareness update of its sessions changed in the room
(:class:`~sync.server._awareness.RoomAwareness`), and the removal of the clients a closed
connection controlled, on the room's channel, ``crdt:<cluster>:{room}:awareness`` (named
in the cluster's key space, see :mod:`~sync.server.cluster.keys`), as its hub id, a NUL
byte, then the update. :class:`AwarenessRelay` subscribes to the channels of the hub's
open rooms and applies what the other hubs publish to the room's awareness by the same
clock rules (controlled by no local connection), relaying what changed to its sessions:
a session joining later gets those states in its greeting too. Channels of another key
space (the room of the same name of a cluster on another database) are never subscribed
to, and a message on one is dropped. Redis keeps nothing: what is published while it is
down is lost, and a hub that opens a room later learns the other hubs' clients when they
next change (a stock client renews its state every 15 seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from sync.server.cluster.keys import KeySpace
from sync.server.cluster.lease import UNAVAILABLE
from sync.server.cluster.outbox import Outbox
from sync.wire import protocol as p
from sync.wire.errors import ProtocolError

if TYPE_CHECKING:
    from sync.server._room import Room
    from sync.server.cluster.cluster_room import ClusterRoom

__all__ = ["AWARENESS", "AwarenessRelay"]

AWARENESS: Final = "awareness"
"""The key part of a room's awareness channel."""


class AwarenessRelay:
    """A hub's awareness channels (see the module doc).

    Args:
        redis: the cluster's Redis (the subscriptions take a connection of their own).
        outbox: the hub's pipelined writes (publishing goes with them).
        hub_id: the hub's id (its own messages are not relayed back to it).
        rooms: the hub's open rooms, by name (shared with the node).
        space: the cluster's key space.
    """

    def __init__(
        self,
        redis: Redis,
        outbox: Outbox,
        hub_id: str,
        rooms: Mapping[str, ClusterRoom],
        space: KeySpace,
    ) -> None:
        self.redis = redis
        self.outbox = outbox
        self.rooms = rooms
        self.space = space
        self._me = hub_id.encode()
        self._pubsub: PubSub | None = None

    def channel(self, room: str) -> str:
        """The awareness channel of ``room``."""
        return self.space.key(room, AWARENESS)

    def publish(self, room: str, payload: bytes) -> None:
        """Publish ``payload`` (an awareness update) on ``room``'s channel, with the hub's id."""
        self.outbox.publish(self.channel(room), self._me + b"\x00" + payload)

    async def subscribe(self, room: str) -> None:
        """Relay what the other hubs publish on ``room``'s channel (not if Redis is down)."""
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub()
        with contextlib.suppress(*UNAVAILABLE):
            await self._pubsub.subscribe(self.channel(room))

    async def resubscribe(self) -> None:
        """Subscribe again to every open room's channel (after a Redis restart)."""
        if self._pubsub is not None and self.rooms:
            with contextlib.suppress(*UNAVAILABLE):
                await self._pubsub.subscribe(*[self.channel(name) for name in self.rooms])

    async def run(self) -> None:
        """Relay the other hubs' messages to the rooms' sessions, until cancelled."""
        while True:
            pubsub = self._pubsub
            if pubsub is None or not pubsub.subscribed:
                await asyncio.sleep(0.1)
                continue
            try:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except UNAVAILABLE:
                await asyncio.sleep(0.2)
                await self.resubscribe()
                continue
            if message is None or message.get("type") != "message":
                continue
            sender, _, payload = bytes(message["data"]).partition(b"\x00")
            if sender == self._me:
                continue
            channel = message["channel"]
            try:
                name, _ = self.space.parse(
                    channel.decode() if isinstance(channel, bytes) else channel
                )
            except ValueError:
                continue
            cluster_room = self.rooms.get(name)
            if cluster_room is not None:
                self.take(cluster_room.room, payload)

    @staticmethod
    def take(room: Room, payload: bytes) -> None:
        """Apply another hub's awareness update to ``room``; relay what changed to its sessions.

        Its clients are controlled by no connection of this hub: their states go when
        that hub publishes their removal (its connection closed). A malformed update is
        dropped.
        """
        try:
            changed = room.awareness.receive(payload, None)
        except ProtocolError:
            return
        if changed is not None:
            room.broadcast(p.encode_awareness(changed))

    async def aclose(self) -> None:
        """Close the subscriptions' connection."""
        if self._pubsub is not None:
            await self._pubsub.aclose()
