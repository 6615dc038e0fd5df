"""LangGraph integration: shared state for graph nodes, without lost updates.

Install with ``pip install 'crdt-state[langgraph]'``.

- :class:`SharedChannel`: a channel (``Annotated[dict, SharedChannel(state)]``)
  whose writes of one superstep merge against the step's token: parallel
  nodes and ``Send`` fan-outs writing disjoint fields all land, overlapping
  writes go to the policies, and unresolved ones raise
  :class:`GraphConflictError` (a LangGraph ``InvalidUpdateError``).
- :func:`branch_node`: a node that edits a :class:`~crdt_state.Branch`,
  merged when it returns, re-run alone when a policy says retry.
- :class:`CrdtStore`: LangGraph's ``BaseStore`` on a shared state, where
  get -> put from two runs is a conflict, not a silent overwrite.

Everything binds to a :class:`~crdt_state.SharedState` or to a remote state
of a hub room (``sync.connect_blocking`` / ``sync.connect``). Over a hub, a write
the hub has not confirmed (it cannot be reached, or the connection dropped before
its answer) raises :class:`MergeNotConfirmed`: a step never looks landed when it
may not be.
"""

from __future__ import annotations

from .binding import MergeNotConfirmed, SupportsBranches
from .channel import GraphConflictError, SharedChannel
from .nodes import branch_node
from .store import CrdtStore

__all__ = [
    "CrdtStore",
    "GraphConflictError",
    "MergeNotConfirmed",
    "SharedChannel",
    "SupportsBranches",
    "branch_node",
]
