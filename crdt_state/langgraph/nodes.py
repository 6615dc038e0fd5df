"""branch_node: a LangGraph node that edits a branch of a shared state.

``branch_node(fn, state=state)`` is a node: it forks a branch (named after
the node, or ``agent``), runs ``fn(branch, graph_state)``, and merges the
branch when ``fn`` returns; the node returns what ``fn`` returned (updates
for the graph's other keys, or ``None``). A conflict whose policy asks for a
retry re-runs ``fn`` on a fresh branch (capped, jittered backoff; the
semantics of :meth:`crdt_state.SharedState.transact`), so only the
conflicting node runs again, never the graph step. Other unresolved
conflicts raise :class:`~crdt_state.ConflictError`; an exception in ``fn``
discards the branch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from langgraph.config import get_config

from ..retry import Retry
from .binding import Binding

__all__ = ["branch_node"]


def _node_name(fallback: str) -> str:
    """The running LangGraph node's name, or ``fallback`` outside a graph."""
    try:
        config = get_config()
    except RuntimeError:
        return fallback
    name = config.get("metadata", {}).get("langgraph_node")
    return name if isinstance(name, str) and name else fallback


def branch_node(
    fn: Callable[[Any, Any], object],
    *,
    state: object,
    agent: str | None = None,
    retry: Retry | None = None,
    resolvers: Mapping[Any, object] | None = None,
    default: object | None = None,
) -> Callable[[Any], Any]:
    """Wrap ``fn(branch, graph_state)`` as a LangGraph node that merges its branch.

    Args:
        fn: edits the branch (``get``/``set``/``append``/``delete``...); may be async.
        state: a ``SharedState``, ``sync.connect(...)`` (async nodes) or
            ``sync.connect_blocking(...)``.
        agent: the branch's agent name (default: the node's name in the graph).
        retry: attempts and backoff for retry conflicts (default ``Retry()``).
        resolvers: conflict policies for this node's merges, before the state's.
        default: policy for conflicts no pattern matches.

    Returns:
        A node function (async when ``fn`` is) for ``StateGraph.add_node``.
    """
    binding = Binding(state)
    fallback: str = agent or str(getattr(fn, "__name__", "node"))

    if inspect.iscoroutinefunction(fn):

        async def async_node(graph_state: Any) -> Any:
            result = await binding.atransact(
                lambda branch: fn(branch, graph_state),
                agent=agent or _node_name(fallback),
                retry=retry,
                resolvers=resolvers,
                default=default,
            )
            return result.value

        return _named(async_node, fn)

    def node(graph_state: Any) -> Any:
        result = binding.transact(
            lambda branch: fn(branch, graph_state),
            agent=agent or _node_name(fallback),
            retry=retry,
            resolvers=resolvers,
            default=default,
        )
        return result.value

    return _named(node, fn)


def _named(node: Callable[[Any], Any], fn: object) -> Callable[[Any], Any]:
    """Give ``node`` the name of ``fn`` (``add_node(node)`` names the node after it).

    Not ``functools.wraps``: LangGraph reads a node's signature, and must see
    the node's own one argument, not ``fn``'s two.
    """
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(fn, attr, None)
        if value is not None:
            setattr(node, attr, value)
    return node
