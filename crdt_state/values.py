"""What can be stored, and the plain-data tree operations on it (pure logic).

Storable values are JSON data: ``None``, ``bool``, ``int`` (64-bit signed),
finite ``float``, ``str``, ``list``/``tuple`` of values and ``dict`` with
``str`` keys. Anything else is refused with :class:`UnsupportedValue` before
pycrdt ever sees it, so no user meets a ``PanicException``.

Numbers are normalised the way every Yjs peer sees them: a float with an
integral value below 2**63 in magnitude is read back as an ``int`` (Yjs
stores numbers as doubles), so ``2.0`` comes back as ``2`` on every replica.
Integers must lie in ``[-2**63, 2**63 - 2]``: pycrdt rounds ``2**63 - 1``.

Depth. A value is stored at most :data:`MAX_DEPTH` levels deep: the number of
keys of its path plus the maps and lists nested in it (a scalar adds 0,
``{"x": 1}`` and ``[1]`` add 1, ``[[1]]`` adds 2; see :func:`depth_of`).
pycrdt writes and reads nested values recursively and fails half-way through
a value a few hundred levels deep; the limit keeps every write, read and copy
well inside Python's recursion limit, and a deeper value is refused with
:class:`UnsupportedValue` before anything is written.

The helpers ``tree_get``/``tree_set``/``tree_delete`` work on nested plain
dicts and are used for the in-memory mirror of the document and for branch
views.
"""

from __future__ import annotations

import math
from typing import Any, Final

from .errors import PathNotFound, UnsupportedValue, WrongType
from .paths import Path, lone_surrogate

__all__ = [
    "MAX_DEPTH",
    "MISSING",
    "Missing",
    "check_depth",
    "copy_value",
    "depth_of",
    "nesting",
    "normalize",
    "same",
    "tree_delete",
    "tree_get",
    "tree_set",
]

INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 2  # pycrdt stores 2**63 - 1 as a (rounded) double
_INTEGRAL_LIMIT: Final = 2.0**63

MAX_DEPTH: Final = 64
"""How deep a value may be stored: path keys plus nested maps and lists (see :func:`depth_of`)."""


class Missing:
    """The type of :data:`MISSING`: the value of a path that does not exist."""

    _instance: Missing | None = None

    def __new__(cls) -> Missing:
        """The one instance, :data:`MISSING` (a singleton, compared with ``is``)."""
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final = Missing()
"""Stands for "no value here": an absent key in conflicts, a deletion in changes."""


def normalize(value: object, path: Path = (), *, level: int | None = None) -> Any:
    """Validate ``value`` and return a fresh, canonical deep copy of it.

    Tuples become lists, integral floats below 2**53 become ints. Raises
    :class:`UnsupportedValue` (with the offending sub-path) for anything that
    is not storable, including a value that would sit deeper than
    :data:`MAX_DEPTH` (``details``: ``depth`` and ``limit``). ``level`` is how
    deep the value itself sits (default ``len(path)``; an item appended to
    the list at ``path`` sits at ``len(path) + 1``).
    """
    start = len(path) if level is None else level
    try:
        return _normalize(value, path, start)
    except _TooDeep:
        raise _too_deep(path, start + nesting(value)) from None


class _TooDeep(Exception):
    """Internal: a value goes deeper than :data:`MAX_DEPTH` (measured, then reported)."""


def _normalize(value: object, path: Path, level: int) -> Any:
    if value is None or isinstance(value, (bool, str)):
        if level > MAX_DEPTH:
            raise _TooDeep
        if type(value) is str and lone_surrogate(value) is not None:
            raise _lone_surrogate(path, "a string", value)
        return value
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise UnsupportedValue(
                "integers must lie in [-2**63, 2**63 - 2]",
                path=path or None,
                details={"value": str(value)},
            )
        if level > MAX_DEPTH:
            raise _TooDeep
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnsupportedValue(
                "NaN and infinities cannot be stored",
                path=path or None,
                details={"value": repr(value)},
            )
        if level > MAX_DEPTH:
            raise _TooDeep
        return normalize_number(value)
    if isinstance(value, (dict, list, tuple)) and level >= MAX_DEPTH:
        raise _TooDeep  # a map or list opens one more level
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UnsupportedValue(
                    f"map keys must be str, got {type(key).__name__}",
                    path=path or None,
                    details={"key": repr(key)},
                )
            if lone_surrogate(key) is not None:
                raise _lone_surrogate(path, "a map key", key)
            out[key] = _normalize(item, (*path, key), level + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_normalize(item, path, level + 1) for item in value]
    raise UnsupportedValue(
        f"{type(value).__name__} is not JSON data (use dict, list, str, int, float, bool, None)",
        path=path or None,
        details={"type": type(value).__name__, "value": _short_repr(value)},
    )


def _lone_surrogate(path: Path, what: str, text: str) -> UnsupportedValue:
    at = lone_surrogate(text)
    return UnsupportedValue(
        f"{what} holds a lone surrogate ({ascii(at) if at else '?'}): not Unicode text, "
        "so it cannot be stored (decode the bytes it came from with errors='replace')",
        path=path or None,
        details={"value": ascii(text[:60])},
    )


def nesting(value: Any, *, budget: int = 1_000_000) -> int:
    """How many levels of maps and lists ``value`` holds (0 for a scalar); no recursion.

    Walks at most ``budget`` containers (a self-referencing list is endless)
    and then answers with the deepest level seen so far.
    """
    if not isinstance(value, (dict, list, tuple)):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack and budget > 0:
        budget -= 1
        node, level = stack.pop()
        if level > deepest:
            deepest = level
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, level + 1))
    return deepest


def depth_of(path: Path, value: Any = MISSING) -> int:
    """How deep ``value`` stored at ``path`` goes: ``len(path)`` plus :func:`nesting`."""
    if value is MISSING or not isinstance(value, (dict, list, tuple)):
        return len(path)
    return len(path) + nesting(value)


def check_depth(path: Path, value: Any = MISSING) -> int:
    """:func:`depth_of`, or :class:`UnsupportedValue` when it exceeds :data:`MAX_DEPTH`."""
    depth = depth_of(path, value)
    if depth > MAX_DEPTH:
        raise _too_deep(path, depth)
    return depth


def _too_deep(path: Path, depth: int) -> UnsupportedValue:
    how = (
        f"{depth} levels deep"
        if depth < 100_000
        else "too deep to measure (a map or list that contains itself?)"
    )
    return UnsupportedValue(
        f"the value would be stored {how}; at most {MAX_DEPTH} levels are allowed "
        "(path keys plus nested maps and lists)",
        path=path or None,
        details={"depth": depth, "limit": MAX_DEPTH},
    )


def normalize_number(value: Any) -> Any:
    """An integral float in ``[-2**63, 2**63)`` becomes an ``int``; anything else is kept.

    Yjs stores numbers as doubles; this is how every replica reads them back,
    so a value written and a value received normalise the same way. (``-2**63``
    is included: it is a valid int64 and a replica receives it as a double.)
    """
    if (
        isinstance(value, float)
        and value.is_integer()
        and -_INTEGRAL_LIMIT <= value < _INTEGRAL_LIMIT
    ):
        return int(value)
    return value


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def copy_value(value: Any) -> Any:
    """Deep copy of already-normalised plain data (faster than ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value


def tree_get(root: Any, path: Path) -> Any:
    """The value at ``path`` inside ``root`` (nested dicts), or :data:`MISSING` (no copy made)."""
    node: Any = root
    for key in path:
        if not isinstance(node, dict):
            return MISSING
        node = node.get(key, MISSING)
        if node is MISSING:
            return MISSING
    return node


def tree_set(root: dict[str, Any], path: Path, value: Any, *, force: bool = False) -> None:
    """Store ``value`` at ``path``, creating missing intermediate maps.

    An intermediate value that is not a map raises :class:`WrongType`, unless
    ``force`` is true, in which case it is replaced by a map.
    """
    node = root
    for i, key in enumerate(path[:-1]):
        child = node.get(key, MISSING)
        if not isinstance(child, dict):
            if child is not MISSING and not force:
                raise WrongType(
                    f"cannot write below a {type(child).__name__} value",
                    path=path[: i + 1],
                    details={"value": child, "write_path": list(path)},
                )
            child = {}
            node[key] = child
        node = child
    node[path[-1]] = value


def tree_delete(root: dict[str, Any], path: Path, *, missing_ok: bool = False) -> Any:
    """Remove and return the value at ``path``; :class:`PathNotFound` if absent."""
    parent = tree_get(root, path[:-1]) if len(path) > 1 else root
    if not isinstance(parent, dict) or path[-1] not in parent:
        if missing_ok:
            return MISSING
        raise PathNotFound("nothing to delete", path=path)
    return parent.pop(path[-1])


def patch(value: Any, rest: Path, new: Any) -> Any:
    """A copy of ``value`` with relative path ``rest`` set to ``new`` (or removed if MISSING).

    ``rest`` must be non-empty. A non-map on the way is replaced by a map.
    """
    base: dict[str, Any] = dict(value) if isinstance(value, dict) else {}
    key = rest[0]
    if len(rest) == 1:
        if new is MISSING:
            base.pop(key, None)
        else:
            base[key] = new
        return base
    child = patch(base.get(key, MISSING), rest[1:], new)
    base[key] = child
    return base


def same(a: Any, b: Any) -> bool:
    """Strict equality of plain data: ``True`` is not ``1``, ``MISSING`` only equals itself."""
    if a is b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(same(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    if a is MISSING or b is MISSING:
        return False
    return bool(a == b) and isinstance(a, str) == isinstance(b, str)
