"""The client layer: remote agents working on a hub room.

- :mod:`sync.client.remote`: :func:`connect` and :class:`RemoteState` (asyncio);
- :mod:`sync.client.blocking`: :func:`connect_blocking`, the same for threaded code;
- :mod:`sync.client.branch`: :class:`RemoteBranch` and :class:`RemoteToken`.

It never imports :mod:`sync.server`: what both need lives in :mod:`sync.wire`.
"""

from sync.client.blocking import BlockingBranch, BlockingRemote, connect_blocking
from sync.client.branch import RemoteBranch, RemoteToken
from sync.client.remote import RemoteError, RemoteState, connect

__all__ = [
    "BlockingBranch",
    "BlockingRemote",
    "RemoteBranch",
    "RemoteError",
    "RemoteState",
    "RemoteToken",
    "connect",
    "connect_blocking",
]
