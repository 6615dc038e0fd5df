"""Increasing request ids as runs of consecutive ids (pure).

A chain of request ids is mostly one run (the ids of a writer count up), so both the
wire (:mod:`sync.wire.protocol`: :func:`encode_chain`, :func:`decode_chain`, the
layout of a merge request's chain field) and the client's local file store it as runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sync.wire.errors import ErrorCode, ProtocolError
from sync.wire.lib0 import MAX_VAR_UINT, Reader, encode_var_uint
from sync.wire.messages import MAX_CHAIN

__all__ = ["decode_chain", "encode_chain", "from_runs", "to_runs"]


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


def encode_chain(ids: Sequence[int]) -> bytes:
    """Encode strictly increasing ids as runs of consecutive ids.

    The layout is ``varuint n``, then per run ``varuint gap, varuint length``; a
    run starts ``gap`` after the end of the one before (after 0 for the first)
    and holds ``length`` (at least 1) consecutive ids.
    """
    runs = to_runs(ids)
    out = [encode_var_uint(len(runs))]
    end = 0
    for start, length in runs:
        out.append(encode_var_uint(start - end))
        out.append(encode_var_uint(length))
        end = start + length
    return b"".join(out)


def decode_chain(reader: Reader) -> tuple[int, ...]:
    """The ids of a chain field written by :func:`encode_chain`, checked.

    Raises:
        ProtocolError: runs that are empty or touch, a chain longer than
            :data:`~sync.wire.messages.MAX_CHAIN`, an id past ``2**53 - 1``.
    """
    bad = ErrorCode.INVALID_MERGE_REQUEST
    ids: list[int] = []
    end = 0
    for index in range(reader.read_var_uint()):
        gap, length = reader.read_var_uint(), reader.read_var_uint()
        if length == 0 or (index > 0 and gap == 0):
            raise ProtocolError(bad, "chain runs must be non-empty and apart")
        if len(ids) + length > MAX_CHAIN:
            raise ProtocolError(bad, f"chain longer than {MAX_CHAIN} requests")
        start = end + gap
        end = start + length
        if end - 1 > MAX_VAR_UINT:
            raise ProtocolError(bad, "chain id exceeds 2**53 - 1")
        ids.extend(range(start, end))
    return tuple(ids)
