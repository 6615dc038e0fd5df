"""Run ``crdt-state hub`` on a slow disk: ``python slow_disk_hub.py SECONDS hub --port ...``.

Every group commit of every room's state file first sleeps ``SECONDS``, so
changes stay in memory, not yet durable, for that long: a crash test that
kills this process hits that window every time instead of only under load.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from crdt_state import storage
from sync.cli import main


def slow_down(delay: float) -> None:
    """Make every commit of a :class:`~crdt_state.storage.Store` take ``delay`` s more."""
    commit = storage.Store._commit

    def slow_commit(self: storage.Store, batch: Any) -> None:
        time.sleep(delay)
        commit(self, batch)

    storage.Store._commit = slow_commit  # type: ignore[method-assign]


if __name__ == "__main__":
    slow_down(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
