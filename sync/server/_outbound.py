"""The frames waiting to be sent to one client, bounded in bytes (pure asyncio, no I/O).

A client that reads slower than its room changes makes its frames pile up in
the hub. :class:`Outbox` counts them in bytes, not frames (one frame may be a
few bytes of awareness or megabytes of sync answer): past ``max_bytes`` a
frame is refused, and the hub then drops the client (close 1013) and clears its
outbox, so its memory is freed at once. A frame is always taken when the
outbox is empty, so a single frame larger than the bound (a large document's
sync answer) still reaches a client that keeps up.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Outbox"]


class Outbox:
    """A FIFO of frames bounded by their total size in bytes (event-loop thread only).

    Args:
        max_bytes: the most bytes held (a frame arriving at an empty outbox is
            always taken).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self._frames: deque[bytes] = deque()
        self._bytes = 0
        self._closed = False
        self._wakeup = asyncio.Event()

    @property
    def size(self) -> int:
        """Total size of the frames held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def empty(self) -> bool:
        return not self._frames

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, frame: bytes) -> bool:
        """Hold ``frame`` after the others; False (and nothing held) past the bound or closed."""
        if self._closed:
            return False
        if self._frames and self._bytes + len(frame) > self.max_bytes:
            return False
        self._frames.append(frame)
        self._bytes += len(frame)
        self._wakeup.set()
        return True

    def get_nowait(self) -> bytes | None:
        """The oldest frame, or ``None`` if there is none."""
        if not self._frames:
            return None
        frame = self._frames.popleft()
        self._bytes -= len(frame)
        return frame

    async def get(self) -> bytes | None:
        """The oldest frame, waiting for one; ``None`` once the outbox is closed."""
        while not self._frames:
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
        return self.get_nowait()

    def close(self) -> None:
        """Drop every frame held (freeing them) and refuse new ones; wakes :meth:`get`."""
        self._closed = True
        self._frames.clear()
        self._bytes = 0
        self._wakeup.set()
