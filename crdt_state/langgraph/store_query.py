"""The pure parts of :class:`~crdt_state.langgraph.CrdtStore`: layout, filters, namespaces.

Layout. An item lives at the path ``(*root, "a.b", key)`` for namespace
``("a", "b")``: LangGraph forbids dots in namespace labels, so the dotted
namespace is one unambiguous map key, and items of different keys are
different paths (they never conflict). The item is the map
``{"value": {...}, "created_at": ISO-8601, "updated_at": ISO-8601}``.

Filters follow LangGraph's stores: ``{"field": value}`` matches equal
values (nested dicts match key by key, lists element by element), and
``{"field": {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": value}}`` compares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import Item, MatchCondition, SearchItem

from ..errors import WrongType

__all__ = [
    "item_from_record",
    "list_namespaces",
    "matches_filter",
    "namespace_key",
    "namespace_matches",
    "new_record",
    "search_items",
]


def namespace_key(namespace: Sequence[str]) -> str:
    """The map key holding a namespace's items (its labels joined with dots)."""
    return ".".join(namespace)


def new_record(value: Mapping[str, Any], previous: object, now: datetime) -> dict[str, Any]:
    """The stored form of a put: ``created_at`` kept from ``previous`` when there was one.

    Raises:
        WrongType: ``value`` is not a dict (LangGraph's stores keep dicts).
    """
    if not isinstance(value, Mapping):
        raise WrongType(
            f"a store item's value is a dict, not {type(value).__name__}",
            details={"value": repr(value)[:80]},
        )
    stamp = now.isoformat()
    created = stamp
    if isinstance(previous, Mapping) and isinstance(previous.get("created_at"), str):
        created = previous["created_at"]
    return {"value": dict(value), "created_at": created, "updated_at": stamp}


def item_from_record(
    namespace: tuple[str, ...], key: str, record: object, *, search: bool = False
) -> Item | None:
    """The LangGraph item stored in ``record`` (``None`` when it is not an item)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("value"), dict):
        return None
    created = _time(record.get("created_at"))
    updated = _time(record.get("updated_at"))
    if search:
        return SearchItem(namespace, key, record["value"], created, updated)
    return Item(
        value=record["value"],
        key=key,
        namespace=namespace,
        created_at=created,
        updated_at=updated,
    )


def _time(value: object) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return datetime.fromtimestamp(0, UTC)


def _namespaces(root: object) -> Iterable[tuple[tuple[str, ...], Mapping[str, Any]]]:
    if not isinstance(root, Mapping):
        return
    for ns_key, items in root.items():
        if isinstance(items, Mapping) and items:
            yield tuple(ns_key.split(".")), items


def search_items(
    root: object,
    prefix: Sequence[str],
    filter: Mapping[str, Any] | None,
    limit: int,
    offset: int,
) -> list[SearchItem]:
    """Items under namespace ``prefix`` matching ``filter``: newest update first, then by name."""
    wanted = tuple(prefix)
    found: list[SearchItem] = []
    for namespace, items in _namespaces(root):
        if namespace[: len(wanted)] != wanted:
            continue
        for key, record in items.items():
            item = item_from_record(namespace, key, record, search=True)
            if item is not None and (not filter or matches_filter(item.value, filter)):
                assert isinstance(item, SearchItem)
                found.append(item)
    found.sort(key=lambda i: (i.namespace, i.key))
    found.sort(key=lambda i: i.updated_at, reverse=True)
    return found[offset : offset + limit]


def matches_filter(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """True when the item value satisfies every condition of ``filter``."""
    return all(_compare(value.get(k), wanted) for k, wanted in filter.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, Mapping) and all(
            _compare(actual.get(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(actual), float(operand)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"unsupported filter operator {op!r}")


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's prefix/suffix match of a namespace, ``"*"`` matching any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)


def list_namespaces(
    root: object,
    conditions: Sequence[MatchCondition] | None,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[tuple[str, ...]]:
    """Namespaces holding at least one item, matching every condition, sorted."""
    names = [ns for ns, _ in _namespaces(root)]
    if conditions:
        names = [ns for ns in names if all(namespace_matches(c, ns) for c in conditions)]
    listed = sorted({ns[:max_depth] for ns in names} if max_depth is not None else set(names))
    return listed[offset : offset + limit]
