"""One client overwriting a large value again and again cannot grow a hub room's memory.

Each merge kept the value it overwrote in the room's change log, up to 10,000 entries: a
client sending merges of just under the 1 MiB merge limit could make one room hold ~10 GB.
The log is bounded in bytes (64 MiB by default): this client sends ~70 MiB of overwrites
through a real websocket, and the room keeps under the budget, the oldest entries gone.
"""

from __future__ import annotations

from crdt_state._sizes import HISTORY_BYTES
from sync.client.remote import connect
from sync.server.hub import Hub

VALUE = 900 * 1024  # under the hub's 1 MiB merge limit once encoded
MERGES = 80  # ~70 MiB of overwritten values: over the 64 MiB budget


async def test_overwrites_of_a_large_value_keep_the_room_history_within_its_budget(
    hub: Hub,
) -> None:
    name = "big/overwrites"
    async with connect(hub.url(name), agent="flood") as remote:
        for n in range(MERGES):
            async with remote.fork() as branch:
                branch.set("doc", str(n % 10) * VALUE)
        assert remote.get("doc") == str((MERGES - 1) % 10) * VALUE
        replica_log = remote.replica._core.log
        assert replica_log.retained_bytes <= HISTORY_BYTES
    room = await hub.room(name)
    log = room.state._core.log
    assert MERGES * VALUE > HISTORY_BYTES  # without the bound, every copy would stay
    assert log.retained_bytes <= HISTORY_BYTES
    assert len(list(log.entries())) < MERGES
    assert room.state.get("doc") == str((MERGES - 1) % 10) * VALUE
