"""Paths into the state and the patterns that select them (pure logic).

A path is a non-empty tuple of string keys, one per level of nested maps.
Users may write it as a dotted string (``"customer.tier"``) or as a tuple of
keys when a key itself holds a dot (``("customer", "a.b")``). Paths only
traverse maps; a list is a leaf (it can be replaced, or appended to).

Patterns select paths for resolvers: ``*`` matches exactly one key, ``**``
matches any number of keys (zero or more). When several patterns match a path
the most specific one wins: more literal keys first, then fewer ``**``, then
fewer ``*``, then the longer pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from .errors import InvalidPath

__all__ = [
    "Path",
    "PathLike",
    "Pattern",
    "format_path",
    "is_prefix",
    "lone_surrogate",
    "parse_path",
    "related",
]

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """The first UTF-16 surrogate standing alone in ``text``, or ``None`` (the usual case).

    Such text is not Unicode: neither UTF-8 nor Yjs can hold it, so keys, values and
    agent names with one are refused before anything stores them.
    """
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.group()


Path: TypeAlias = tuple[str, ...]
PathLike: TypeAlias = "str | tuple[str, ...] | list[str]"


def parse_path(path: object) -> Path:
    """Turn a dotted string or a sequence of keys into a :data:`Path`.

    Raises :class:`InvalidPath` for an empty path, an empty key or a non-str key.
    """
    if isinstance(path, str):
        keys: tuple[object, ...] = tuple(path.split("."))
    elif isinstance(path, (tuple, list)):
        keys = tuple(path)
    else:
        raise InvalidPath(
            f"a path is a dotted string or a tuple of keys, not {type(path).__name__}",
            details={"value": repr(path)},
        )
    if not keys:
        raise InvalidPath("a path needs at least one key", details={"value": repr(path)})
    for key in keys:
        if not isinstance(key, str):
            raise InvalidPath(
                f"path keys must be str, got {type(key).__name__}",
                details={"value": repr(path), "key": repr(key)},
            )
        if not key:
            raise InvalidPath("a path key must not be empty", details={"value": repr(path)})
        if lone_surrogate(key) is not None:
            raise InvalidPath(
                "a path key holds a lone surrogate: not Unicode text",
                details={"value": ascii(path)[:80]},
            )
    return keys  # type: ignore[return-value]


def format_path(path: Path) -> str:
    """The dotted form of ``path`` when it is unambiguous, else its tuple repr."""
    if any("." in key for key in path):
        return repr(path)
    return ".".join(path)


def is_prefix(prefix: Path, path: Path) -> bool:
    """True when ``prefix`` equals ``path`` or is one of its ancestors."""
    return len(prefix) <= len(path) and path[: len(prefix)] == prefix


def related(a: Path, b: Path) -> bool:
    """True when the two paths overlap: equal, or one is an ancestor of the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


@dataclass(frozen=True)
class Pattern:
    """A compiled path pattern; ``Pattern.parse("tags.*")``."""

    keys: tuple[str, ...]

    @classmethod
    def parse(cls, pattern: object) -> Pattern:
        """``pattern`` as a :class:`Pattern` (keys may be ``*`` and ``**``; a pattern passes as is).

        Raises:
            InvalidPath: ``pattern`` is not a valid path.
        """
        if isinstance(pattern, Pattern):
            return pattern
        keys = parse_path(pattern)
        for i, key in enumerate(keys):
            if key == "**" and i + 1 < len(keys) and keys[i + 1] == "**":
                raise InvalidPath("'**' must not follow '**'", details={"pattern": repr(pattern)})
        return cls(keys)

    @property
    def specificity(self) -> tuple[int, int, int, int]:
        """Sort key: larger means more specific."""
        literal = sum(1 for k in self.keys if k not in ("*", "**"))
        deep = sum(1 for k in self.keys if k == "**")
        single = sum(1 for k in self.keys if k == "*")
        return (literal, -deep, -single, len(self.keys))

    def matches(self, path: Path) -> bool:
        """True when the pattern selects ``path``."""
        return _match(self.keys, 0, path, 0)

    def __str__(self) -> str:
        return format_path(self.keys)


def _match(pat: tuple[str, ...], i: int, path: Path, j: int) -> bool:
    while i < len(pat):
        key = pat[i]
        if key == "**":
            return any(_match(pat, i + 1, path, k) for k in range(j, len(path) + 1))
        if j >= len(path) or (key != "*" and key != path[j]):
            return False
        i += 1
        j += 1
    return j == len(path)


def most_specific(patterns: Iterable[Pattern], path: Path) -> Pattern | None:
    """The most specific of ``patterns`` that matches ``path``, or ``None``."""
    best: Pattern | None = None
    for pattern in patterns:
        if pattern.matches(path) and (best is None or pattern.specificity > best.specificity):
            best = pattern
    return best
