"""Locks of files that one user at a time may hold: the helpers other packages reuse.

A durable state holds its file with an exclusive ``flock`` on a descriptor of its own
(:mod:`crdt_state._file_lock`); ``sync``'s client holds its ``local`` file the same way.
This module gives such packages what they share with it, so that a second user of a
file is refused alike everywhere:

- :func:`lock_holder`: the pid of the process holding an ``flock`` on a file, where
  the system tells (Linux ``/proc/locks``), else ``None``;
- :class:`NoProcessLock`: the warning given where there is no ``flock`` (Windows), so
  a file is not locked against other processes.
"""

from __future__ import annotations

from ._file_lock import NoProcessLock, lock_holder

__all__ = ["NoProcessLock", "lock_holder"]
