"""The exchange side of a :class:`~crdt_state.state.SharedState`: Yjs updates and listeners.

:class:`StateExchange` is a base of ``SharedState`` (with
:class:`~crdt_state._state_reads.StateReads`): what a state gives to and takes from
other replicas (any Yjs peer) and the listeners told of every change. Like the read
side it works only through the one :class:`~crdt_state._core.StateCore` the state
owns. Not API: the names are ``SharedState``'s, documented there.
"""

from __future__ import annotations

from collections.abc import Callable

from . import _replication
from ._core import Listener, StateCore
from .conflicts import MergeResult
from .errors import WrongType
from .version import VersionVector

__all__ = ["StateExchange"]


class StateExchange:
    """Yjs updates out (:meth:`get_update`) and in (:meth:`apply_update`), and listeners."""

    _core: StateCore

    def get_update(self, since: VersionVector | None = None) -> bytes:
        """A Yjs update with everything this state has beyond ``since`` (all when None)."""
        if since is not None and not isinstance(since, VersionVector):
            raise WrongType(
                f"since is a VersionVector (a token), not {type(since).__name__}",
                details={"since": repr(since)[:80]},
            )
        core = self._core
        with core.lock:
            core.shared = True
            if since is None:
                return bytes(core.doc.get_update())
            return bytes(core.doc.get_update(since.to_state()))

    def apply_update(
        self,
        update: bytes,
        *,
        agent: str | None = None,
        origin: str | None = None,
        wait: bool = True,
    ) -> MergeResult:
        """Integrate a Yjs update from another replica (any Yjs peer).

        Updates are idempotent and commutative: applying one twice, or several
        in any order, gives the same state. Writes from updates are logged, so
        branches forked earlier see them as concurrent changes.

        Args:
            update: the Yjs update.
            agent: recorded as the change's agent (in history, blame, listeners).
            origin: deprecated name of ``agent``.
            wait: ``False`` returns once the update is integrated and handed to the
                store, without waiting until it is durable (see ``when_durable``).

        Raises:
            InvalidUpdate: malformed bytes (nothing changed).
            UnsupportedValue: a value deeper than :data:`~crdt_state.values.MAX_DEPTH`
                (nothing changed).
        """
        result, ticket = _replication.apply_update(self._core, update, agent or origin)
        if wait:
            self._core.wait_durable(ticket)
        return result

    async def aapply_update(
        self, update: bytes, *, agent: str | None = None, origin: str | None = None
    ) -> MergeResult:
        """:meth:`apply_update` for asyncio code (the disk wait does not block the loop)."""
        result, ticket = _replication.apply_update(self._core, update, agent or origin)
        await self._core.await_durable(ticket)
        return result

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(StateUpdate)`` after every change, in order, under the lock.

        Returns a function that removes the listener. Listeners must be quick
        and must not call back into the state's mutating methods.
        """
        core = self._core
        with core.lock:
            core.observe_updates()
            core.listeners.append(listener)
            core.shared = True

        def unsubscribe() -> None:
            with core.lock:
                if listener in core.listeners:
                    core.listeners.remove(listener)

        return unsubscribe
