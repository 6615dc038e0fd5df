"""A process that contends for one room and holds it, driven by the cluster tests.

    python tests/cluster/lease_holder.py --redis URL --postgres DSN --room R --ttl S --name N

Waits until it owns the room (``sync.server.cluster.acquire``), then obeys one command per stdin
line and reports each event as one JSON line on stdout:

- ``{"event": "acquired", "fence": F, "token": T}`` once it owns the room;
- ``{"event": "lost", "reason": R}`` when its lease keeper reports the loss;
- ``write N``: an insert of ``N`` into ``holder_writes`` through the ownership's
  transaction (checks the keeper, then the fence);
- ``write-raw N``: the same insert through ``fenced_transaction`` alone, ignoring what
  the keeper knows (a deposed owner that has not noticed yet);
  both answer ``{"event": "wrote", ...}`` or ``{"event": "error", "code": C, ...}``;
- ``release``: gives the room up (``{"event": "released"}``); ``quit`` exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from sync.server.cluster import (
    ClusterError,
    LeaseLost,
    Ownership,
    acquire,
    fenced_transaction,
    postgres_pool,
    redis_client,
)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def insert(conn: Any, owned: Ownership, n: int) -> None:
    await conn.execute(
        "INSERT INTO holder_writes (room, fence, owner, n) VALUES (%s, %s, %s, %s)",
        (owned.room, owned.fence.value, owned.token, n),
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--room", required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()

    redis = redis_client(args.redis, timeout=args.ttl)
    pool = await postgres_pool(args.postgres, max_size=2)

    def lost(loss: LeaseLost) -> None:
        emit("lost", reason=loss.reason.value)

    owned = await acquire(redis, pool, args.room, owner=args.name, ttl=args.ttl, on_lost=lost)
    emit("acquired", fence=owned.fence.value, token=owned.token)

    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        command, _, arg = line.partition(" ")
        try:
            if command == "write":
                async with owned.transaction() as conn:
                    await insert(conn, owned, int(arg))
                emit("wrote", n=int(arg), fence=owned.fence.value)
            elif command == "write-raw":
                async with pool.connection() as conn, fenced_transaction(conn, owned.fence):
                    await insert(conn, owned, int(arg))
                emit("wrote", n=int(arg), fence=owned.fence.value)
            elif command == "release":
                await owned.release()
                emit("released")
            elif command == "quit":
                break
            else:
                emit("error", code="unknown_command", command=line)
        except ClusterError as exc:
            emit("error", code=exc.code, details=exc.details)
    await owned.release()
    await pool.close()
    await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
