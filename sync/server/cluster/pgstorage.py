"""Room states in PostgreSQL (placeholder until the PostgreSQL store is merged)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sync.server.cluster.storage import StreamReplayStorage

if TYPE_CHECKING:
    from sync.server.cluster.node import ClusterNode

__all__ = ["PostgresRoomStorage"]


class PostgresRoomStorage(StreamReplayStorage):
    def __init__(self, node: ClusterNode) -> None:
        super().__init__(node.redis)
