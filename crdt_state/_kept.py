"""Encodings kept once made, for values that recur: the stored forms of paths.

A state writes the same few paths over and over; the writer threads encoded each
again with ``json`` (~1 µs) where a look-up takes ~0.05. Pure: no SQL, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["KEPT_CHARS", "KEPT_MAX", "kept_encoding"]

KEPT_MAX: Final = 4_096
"""Encodings :func:`kept_encoding` keeps at most per table (a state writes the same few
paths over and over; encoding one took ~1 µs, a look-up ~0.05). Emptied when full."""
KEPT_CHARS: Final = 256
"""Encodings longer than this are not kept (a client sending huge keys cannot make the
kept ones take more than a few megabytes)."""


def kept_encoding(kept: dict[Any, str], value: Any, encode: Callable[[Any], str]) -> str:
    """``encode(value)``, kept in ``kept`` for the next equal ``value`` (any thread).

    For encodings that equal values share (paths: tuples of str). An unhashable
    ``value`` (a list) is encoded and not kept, and so is an encoding longer than
    :data:`KEPT_CHARS`; ``kept`` is emptied once it holds :data:`KEPT_MAX`.
    """
    try:
        found = kept.get(value)
    except TypeError:
        return encode(value)
    if found is None:
        found = encode(value)
        if len(found) <= KEPT_CHARS:
            if len(kept) >= KEPT_MAX:
                kept.clear()
            kept[value] = found
    return found
