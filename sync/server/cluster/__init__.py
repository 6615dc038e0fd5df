"""Several hubs, one owner per room: leases in Redis, fencing numbers in PostgreSQL.

Needs the ``cluster`` extra (``pip install 'crdt-state[cluster]'``: redis-py, psycopg 3
and its pool). The pieces, from the bottom:

- :mod:`~sync.server.cluster.keys`: Redis key names, ``crdt:<cluster>:{room}:<part>``, one
  :class:`KeySpace` per cluster (its id is in PostgreSQL), one hash tag per room;
- :class:`RedisLease`: ``SET NX PX``, compare-and-extend, compare-and-delete;
- :class:`LeaseKeeper`: renews at ttl/6, reports the loss (``taken`` or ``expired``) once;
- :func:`claim_fence`, :func:`check_fence`, :func:`fenced_transaction`: the fencing number
  in ``crdt_rooms``, bumped by every claim and checked inside every write transaction;
- :func:`migrate`, :func:`cluster_id`: the cluster's PostgreSQL schema, its id;
- :func:`try_acquire` / :func:`acquire` -> :class:`Ownership`: all of the above for one room;
- :func:`redis_client`, :func:`postgres_pool`: clients configured for lease deadlines.
"""

from sync.server.cluster.clients import postgres_pool, redis_client
from sync.server.cluster.errors import (
    ClusterError,
    ClusterSchemaError,
    ClusterUnavailable,
    Fenced,
    LeaseLost,
    LossReason,
)
from sync.server.cluster.fence import (
    Fence,
    check_fence,
    claim_fence,
    current_fence,
    fenced_transaction,
)
from sync.server.cluster.keeper import LeaseKeeper, lease_deadline
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace, room_key
from sync.server.cluster.lease import RedisLease, lease_holder, new_token
from sync.server.cluster.ownership import Ownership, acquire, try_acquire
from sync.server.cluster.schema import (
    MIGRATIONS,
    Migration,
    cluster_id,
    migrate,
    schema_version,
)

__all__ = [
    "DEFAULT_SPACE",
    "MIGRATIONS",
    "ClusterError",
    "ClusterSchemaError",
    "ClusterUnavailable",
    "Fence",
    "Fenced",
    "KeySpace",
    "LeaseKeeper",
    "LeaseLost",
    "LossReason",
    "Migration",
    "Ownership",
    "RedisLease",
    "acquire",
    "check_fence",
    "claim_fence",
    "cluster_id",
    "current_fence",
    "fenced_transaction",
    "lease_deadline",
    "lease_holder",
    "migrate",
    "new_token",
    "postgres_pool",
    "redis_client",
    "room_key",
    "schema_version",
    "try_acquire",
]
