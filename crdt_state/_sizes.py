"""About how many bytes a change-log entry keeps alive (pure).

A :class:`~crdt_state._changelog.ChangeLog` entry keeps the values its change
overwrote (its ``undo``), so that older versions can be read and judged. A log
bounded only by its number of entries lets a writer that overwrites one large
value again and again hold one copy per entry (10,000 merges of 1 MiB: 10 GB);
:func:`undo_bytes` is what the log counts against its byte budget instead.

The figure is an estimate of the Python objects' size, not ``sys.getsizeof``
summed exactly: strings and bytes count their length plus a small header,
other scalars a fixed few bytes, containers a header and a slot per item. It
walks each value once (iteratively: a deep value cannot overflow the stack),
so counting costs about what writing the value did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

__all__ = ["HISTORY_BYTES", "SCALAR_BYTES", "oldest_to_drop", "undo_bytes", "value_bytes"]

HISTORY_BYTES: Final = 64 * 2**20
"""The default byte budget of a change log's undo values (``SharedState(history_bytes=)``)."""
SCALAR_BYTES: Final = 32
"""What a number, a boolean, ``None`` or a marker counts for."""
_HEADER: Final = 56
"""A string's, bytes' or container's own header."""
_SLOT: Final = 16
"""One item of a list or one key/value of a dict, beside the item itself."""


def value_bytes(value: Any) -> int:
    """About how many bytes ``value`` (a JSON-like value) keeps alive."""
    kind = type(value)
    if kind is str or kind is bytes:
        return _HEADER + len(value)
    if kind is not dict and kind is not list:
        return SCALAR_BYTES
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            total += _HEADER + _SLOT * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            total += _HEADER + _SLOT * len(item)
            stack.extend(item)
        elif kind is str or kind is bytes:
            total += _HEADER + len(item)
        else:
            total += SCALAR_BYTES
    return total


def undo_bytes(undo: Sequence[tuple[Any, Any]]) -> int:
    """About how many bytes the ``(path, value before)`` records of an entry keep alive."""
    total = 0
    for _, before in undo:
        total += _SLOT + value_bytes(before)
    return total


def oldest_to_drop(
    sizes: Sequence[int], over: int, limit_bytes: int, total: int | None = None
) -> int:
    """How many of the oldest entries a log drops (``sizes``: their bytes, oldest first).

    At least ``over`` (the entries beyond the log's length limit); when ``sizes`` sum
    to more than ``limit_bytes``, as many more as bring them to 3/4 of it (room for
    the next entries before the next trim), but never the newest entry. ``total`` is
    ``sum(sizes)`` when the caller keeps it already.
    """
    drop = min(max(0, over), len(sizes) - 1)
    if total is None:
        total = sum(sizes)
    if total > limit_bytes:
        goal = total - limit_bytes * 3 // 4
        freed = sum(sizes[:drop])
        while freed < goal and drop < len(sizes) - 1:
            freed += sizes[drop]
            drop += 1
    return drop
