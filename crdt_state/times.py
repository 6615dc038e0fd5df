"""Times given to the history filters (``since``, ``until``), read one way everywhere (pure).

A time is a unix time (a number), a :class:`~datetime.datetime` (naive: local time), or
text: ``"10m"`` / ``"2h"`` / ``"1d"`` ago, a unix time, or an ISO date-time. The CLI's
``--since`` and the Python API take the same forms; anything else is refused with
:class:`~crdt_state.errors.WrongType` (a filter that matched nothing would read as "no
changes").
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime
from typing import Final

from .errors import WrongType

__all__ = ["as_time", "span_seconds"]

_AGO: Final = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def span_seconds(text: str) -> float | None:
    """The seconds a span such as ``"30s"``, ``"10m"``, ``"2h"``, ``"1d"`` counts.

    ``None`` for text of another form. :func:`as_time` counts back from now by these.
    """
    ago = _AGO.match(text.strip())
    return float(ago.group(1)) * _UNITS[ago.group(2)] if ago else None


def as_time(value: object, name: str, *, now: float | None = None) -> float | None:
    """``value`` as a unix time (``None`` stays ``None``: no filter).

    Args:
        value: a number, a datetime, or text (see the module).
        name: the argument's name, for the error.
        now: the time ``"10m"`` counts back from (default: now).

    Raises:
        WrongType: ``value`` is none of those, or not a finite time.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value):
            return float(value)
    elif isinstance(value, str):
        text = value.strip()
        span = span_seconds(text)
        if span is not None:
            return (time.time() if now is None else now) - span
        try:
            number = float(text)
        except ValueError:
            try:
                return datetime.fromisoformat(text).timestamp()
            except ValueError:
                pass
        else:
            if math.isfinite(number):
                return number
    raise WrongType(
        f"{name} is not a time: {value!r:.60} (use a unix time, a datetime, "
        "'10m' / '2h' / '1d' ago, or an ISO date-time)",
        details={name: repr(value)[:80]},
    )
