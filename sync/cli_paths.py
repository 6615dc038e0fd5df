"""Paths on the ``crdt-state`` command line: read as typed, printed so they read back.

A path is written dotted (``plan.owner``, as :func:`crdt_state.parse_path` reads it), or,
when a key holds a dot, as a JSON array of its keys (``'["urls","example.com"]'``): an
argument that starts with ``[`` is JSON. An integer in the array is the key its digits
make, as in the dotted form (``'["a",0]'`` is ``a.0``: paths only traverse maps, whose
keys are text). :func:`path_text` prints a path in the form that reads back to it:
dotted when that is unambiguous, else the JSON array. Pure.
"""

from __future__ import annotations

import json
from typing import Final

from crdt_state import InvalidPath, parse_path
from crdt_state.paths import Path

__all__ = ["PATH_HELP", "cli_path", "path_text"]

PATH_HELP: Final = (
    "a dotted path (plan.owner), or a JSON array of keys when a key holds a dot "
    """('["urls","example.com"]')"""
)
"""What a path argument takes, for the options' help."""


def cli_path(text: str) -> Path:
    """The path ``text`` names: a JSON array of keys when it starts with ``[``, else dotted.

    Raises:
        InvalidPath: not JSON, not an array of strings and integers (>= 0), or a path
            :func:`~crdt_state.parse_path` refuses (no key, an empty key).
    """
    if not text.startswith("["):
        return parse_path(text)
    try:
        keys = json.loads(text)
    except ValueError as exc:
        raise InvalidPath(
            f"a path starting with '[' is a JSON array of keys, and {text!r:.80} is not JSON "
            f"({exc})",
            details={"value": text[:80]},
        ) from None
    if not isinstance(keys, list) or not all(_is_key(k) for k in keys):
        raise InvalidPath(
            "a path as JSON is an array of strings and integers (>= 0), "
            f'like ["urls","example.com"], not {text!r:.80}',
            details={"value": text[:80]},
        )
    return parse_path([k if isinstance(k, str) else str(k) for k in keys])


def _is_key(key: object) -> bool:
    return isinstance(key, str) or (type(key) is int and key >= 0)


def path_text(path: Path) -> str:
    """``path`` in the form :func:`cli_path` reads back to it.

    Dotted when no key holds a dot (and the first does not start with ``[``), else a
    compact JSON array.
    """
    if path and not path[0].startswith("[") and not any("." in key for key in path):
        return ".".join(path)
    return json.dumps(list(path), ensure_ascii=False, separators=(",", ":"))
