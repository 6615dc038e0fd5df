"""Group commit in rounds: many queues' batches committed together by one writer thread.

A :class:`RoundCommit` is a :class:`~crdt_state._group_commit.GroupCommit` (the same
tickets, waiting, callbacks and closing) whose batches a :class:`Rounds` writer (the
PostgreSQL :class:`~crdt_state._pg_shared.SharedWriter`) stores: a queue with items
hands itself to the writer (once; again after its batch when more came); the writer's
thread, in one **round**, takes the batch of every queue handed in
(:meth:`RoundCommit.begin_round`: ``stage`` turns the batch into the round's part and
stays suspended for the outcome), commits all parts in one transaction, then ends each
batch (:meth:`RoundCommit.end_round`: the staged steps get the outcome, the tickets
become durable) and only then calls the durability callbacks of them all
(:meth:`RoundCommit.fire_durable`), so that no user code runs while a queue of the
round is held. The group commit's rules hold: one batch of a queue at a time, in
order; a failed part fails its queue alone; nothing is durable before the commit.

An ``after`` that ``due`` says has work (a compaction) runs on the shared writer
threads (:mod:`crdt_state._writer_pool`), the queue held till it is done, so that
one store's compaction does not hold up the round of every other store.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

from ._group_commit import GroupCommit

__all__ = ["RoundBatch", "RoundCommit", "Rounds", "Stage"]

T = TypeVar("T")

Steps = Generator[Any, "BaseException | None", None]
Stage = Callable[[list[tuple[int, T]]], Steps]
"""``stage(batch)``: yields the batch's part of a round once, then is sent the round's
outcome (``None``: committed; else the error, which it raises or turns into its own)."""


class Rounds(Protocol):
    """A writer that commits the batches of many queues together (see the module doc)."""

    def submit(self, queue: RoundCommit[Any]) -> None:
        """Take a batch of ``queue`` (:meth:`RoundCommit.begin_round`) in a round soon."""
        ...

    def commit_alone(self, part: Any) -> BaseException | None:
        """Commit one part in a round of its own; the error that failed it (``None``)."""
        ...


class RoundBatch:
    """A queue's batch taken into a round: its items, its staged steps, its part."""

    __slots__ = ("batch", "part", "queue", "steps")

    def __init__(
        self, queue: RoundCommit[Any], batch: list[tuple[int, Any]], steps: Steps, part: Any
    ) -> None:
        self.queue = queue
        self.batch = batch
        self.steps = steps
        self.part = part


class RoundCommit(GroupCommit[T]):
    """A group commit whose batches ``rounds`` commits (see the module doc).

    Args:
        file: where the items go, for error messages.
        rounds: the writer.
        stage: turns a batch into its part of a round (see :data:`Stage`).
        after: runs after each written batch (on the writer's or a shared thread).
        due: whether ``after`` has work now; only then does it leave the round's thread.
        off: ``durability="off"``: :meth:`wait` and :meth:`on_durable` do not wait.
    """

    def __init__(
        self,
        file: str,
        rounds: Rounds,
        stage: Stage[T],
        after: Callable[[], None],
        due: Callable[[], bool],
        *,
        off: bool,
    ) -> None:
        super().__init__(file, _unused, after, off=off, shared=True)
        self._rounds = rounds
        self._stage: Stage[T] = stage
        self._due = due

    def _hand_over(self) -> None:
        """Give this queue to the writer for its next round (lock held)."""
        self._rounds.submit(self)

    def _write_batch(self, batch: list[tuple[int, T]]) -> bool:
        """The batch in a round of its own (a queue closing on the writer's thread)."""
        staged = self._begin(batch)
        return staged is not None and self._resume(staged, self._rounds.commit_alone(staged.part))

    # -- on the writer's thread ------------------------------------------------------------
    def begin_round(self) -> RoundBatch | None:
        """The queued items as this queue's part of a round; ``None``: nothing to take.

        The writer calls :meth:`fire_durable` after the round for every queue it took,
        whatever this returned (staging may have failed the queue).
        """
        if not self._claim():
            return None
        with self._lock:
            batch, self._queue = self._queue, []
        staged = self._begin(batch)
        if staged is None:
            self._release(False)
        return staged

    def end_round(self, staged: RoundBatch, error: BaseException | None) -> None:
        """The round of ``staged`` ended (``error``: it failed): durable, then ``after``.

        Calls no user code: the callbacks wait for :meth:`fire_durable`.
        """
        batch = staged.batch
        if not self._resume(staged, error):
            self._release(False)
            return
        self._durable_at(batch)
        if self._due():  # a compaction: on a shared thread, this queue held till it ends
            with self._lock:
                self._writing = 0  # no thread's: a callback on this thread may close it
            self._pool.submit(lambda: self._after_job(batch))
            return
        self._settle(batch)
        self._release(True)

    def fire_durable(self) -> None:
        """Call the callbacks of the tickets durable now (all of them once failed)."""
        if self._callbacks:
            self._fire(failed=self.failed is not None)

    def close(self) -> bool:
        """As :meth:`GroupCommit.close`; drops ``stage`` too."""
        closed = super().close()
        self._stage = _gone_stage
        return closed

    # -- the steps -------------------------------------------------------------------------
    def _after_job(self, batch: list[tuple[int, T]]) -> None:
        try:
            self._settle(batch)
        finally:
            self._release(True)

    def _begin(self, batch: list[tuple[int, T]]) -> RoundBatch | None:
        """Stage ``batch``; ``None`` (the queue failed) when staging raised."""
        try:
            steps = self._stage(batch)
            part = next(steps)
        except BaseException as exc:
            self._failed(exc)
            return None
        return RoundBatch(self, batch, steps, part)

    def _resume(self, staged: RoundBatch, error: BaseException | None) -> bool:
        """Send the outcome to the staged steps; False (the queue failed) when they raise."""
        try:
            staged.steps.send(error)
        except StopIteration:
            return True
        except BaseException as exc:
            self._failed(exc)
            return False
        self._failed(RuntimeError("a stage yields one part only"))
        return False


def _unused(batch: list[tuple[int, Any]]) -> None:
    raise AssertionError("a round commit writes through its stage")


def _gone_stage(batch: list[tuple[int, Any]]) -> Steps:
    """What a closed queue holds instead of its store's ``stage`` (never called)."""
    raise AssertionError("the queue is closed")
