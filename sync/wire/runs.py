"""Increasing request ids as runs of consecutive ids (pure).

A chain of request ids is mostly one run (the ids of a writer count up), so both the
wire (:mod:`sync.wire.protocol`) and the client's local file store it as runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["from_runs", "to_runs"]


def to_runs(ids: Iterable[int]) -> list[tuple[int, int]]:
    """Increasing ids as ``(first, length)`` runs of consecutive ids."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def from_runs(runs: Iterable[Sequence[int]]) -> tuple[int, ...]:
    """The inverse of :func:`to_runs`."""
    return tuple(i for first, length in runs for i in range(first, first + length))
