"""The ``crdt-state`` command's argument checks: numbers in bounds, durations, room globs.

Each is an argparse ``type`` (a bad value is an argparse error: exit status 2, one line
naming the option) or, for ``--room``, a function that says what is wrong. Pure.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Final, TypeVar

from crdt_state.times import span_seconds
from sync.wire.rooms import BAD_ROOM_NAME, is_room_name

__all__ = ["duration", "number", "room_glob_problem"]

_Number = TypeVar("_Number", int, float)


def number(
    kind: type[int] | type[float], low: float, high: float | None = None
) -> Callable[[str], int | float]:
    """An argparse ``type`` accepting ``kind`` values in ``[low, high]`` (an error otherwise)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind.__name__}: {text!r}") from None
        return _bounded(value, text, low, high)

    parse.__name__ = kind.__name__  # argparse names the type in its errors
    return parse


def duration(low: float, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type`` for seconds in ``[low, high]``, spans as ``--since`` reads them.

    ``3600``, or ``30s`` / ``10m`` / ``2h`` / ``1d`` (:func:`crdt_state.times.span_seconds`).
    """

    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            seconds = _span(text)
        return _bounded(seconds, text, low, high)

    parse.__name__ = "duration"
    return parse


def _span(text: str) -> float:
    """The seconds of a span (``10m``, ``2h``); an argparse error for anything else."""
    seconds = span_seconds(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (use seconds, or 30s, 10m, 2h, 1d)"
        )
    return seconds


def _bounded(value: _Number, text: str, low: float, high: float | None) -> _Number:
    if value != value or value < low or (high is not None and value > high):  # NaN too
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
    return value


_GLOB: Final = re.compile(r"\[!?|[]*?]")
"""What a glob adds to a room name (:func:`fnmatch.fnmatchcase`): ``*``, ``?``, ``[...]``."""


def room_glob_problem(pattern: str) -> str | None:
    """Why no hub would take a token's room ``pattern``, or ``None`` (the usual case).

    The pattern is a room name (:func:`sync.wire.rooms.is_room_name`, the rule the hub
    applies at the handshake), or a glob of one; ``*`` alone is the admin room.
    """
    literal = _GLOB.sub("", pattern)
    if is_room_name(literal) or (pattern and not literal):
        return None
    return (
        "not a room name a hub accepts (A-Z a-z 0-9 . _ ~ - /, not empty; a glob may add "
        f"* ? [ ]): every hub refuses it at the handshake (400 {BAD_ROOM_NAME})"
    )
