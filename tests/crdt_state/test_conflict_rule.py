"""The conflict rule: ANY two writes to overlapping paths since the fork base conflict.

Whatever the values: a 3-way merge cannot tell "both decided 1" from "both
incremented 0", so equal concurrent writes are conflicts too, flagged
``same_value``, and the policies settle them (read-modify-write counters end
exact). Reproductions of issue 8, item 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
import weakref
from typing import Any

import pytest

from crdt_state import Branch, ConflictError, Retry, SharedState, resolvers


def counter_state(**kwargs: Any) -> SharedState:
    state = SharedState(**kwargs)
    state.commit({"n": 0}, state.token, "init")
    return state


def increment(branch: Branch) -> None:
    branch.set("n", branch.get("n") + 1)


# -- two branches, read-modify-write ----------------------------------------------------
def test_two_increments_from_one_base_conflict_with_same_value() -> None:
    state = counter_state()
    one, two = state.fork("a"), state.fork("b")
    increment(one)
    increment(two)
    one.merge()
    before = state.read()
    with pytest.raises(ConflictError) as info:
        two.merge()
    (conflict,) = info.value.conflicts
    assert conflict.path == ("n",)
    assert (conflict.base, conflict.current, conflict.incoming) == (0, 1, 1)
    assert conflict.same_value is True
    assert conflict.to_dict()["same_value"] is True
    assert "same value" in str(conflict)
    assert state.read() == before  # nothing applied
    assert two.status == "open"


def test_different_values_are_flagged_not_same_value() -> None:
    state = counter_state()
    one, two = state.fork("a"), state.fork("b")
    one.set("n", 5)
    two.set("n", 6)
    one.merge()
    with pytest.raises(ConflictError) as info:
        two.merge()
    (conflict,) = info.value.conflicts
    assert conflict.same_value is False
    assert conflict.to_dict()["same_value"] is False
    assert "same value" not in str(conflict)


def test_counter_adds_both_increments() -> None:
    state = counter_state(resolvers={"n": resolvers.counter})
    one, two, three = state.fork("a"), state.fork("b"), state.fork("c")
    for branch in (one, two, three):
        increment(branch)
    one.merge()
    second = two.merge()
    third = three.merge()
    assert state.get("n") == 3
    assert [c.same_value for c in second.conflicts] == [True]
    assert [c.resolution for c in second.conflicts] == [2]
    # the third branch meets the state's 2 against its own 1: two deltas added to base 0
    assert [(c.base, c.current, c.incoming, c.same_value) for c in third.conflicts] == [
        (0, 2, 1, False)
    ]


def test_commit_from_a_stale_token_with_an_equal_value_conflicts() -> None:
    state = counter_state()
    _, token = state.read()
    state.commit({"n": 1}, token, "a")
    before = state.read()
    with pytest.raises(ConflictError) as info:
        state.commit({"n": 1}, token, "b")
    assert [c.same_value for c in info.value.conflicts] == [True]
    assert state.read() == before
    result = state.commit({"n": 1}, token, "b", resolvers={"n": resolvers.counter})
    assert state.get("n") == 2
    assert result.applied == (("n",),)


def test_equal_deletes_conflict_too() -> None:
    state = SharedState()
    state.commit({"a": 1, "b": 2}, state.token, "init")
    one, two = state.fork("x"), state.fork("y")
    one.delete("a")
    two.delete("a")
    one.merge()
    with pytest.raises(ConflictError) as info:
        two.merge()
    (conflict,) = info.value.conflicts
    assert conflict.same_value and conflict.incoming is conflict.current
    assert conflict.to_dict()["current"] == {"$missing": True}


# -- the built-in policies on same-value conflicts ---------------------------------------
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (resolvers.last_writer_wins, 1),
        (resolvers.first_writer_wins, 1),
        (resolvers.maximum, 1),
        (resolvers.minimum, 1),
        (resolvers.accept_equal, 1),
        (resolvers.counter, 2),
    ],
)
def test_policies_settle_same_value_conflicts(policy: Any, expected: int) -> None:
    state = counter_state(resolvers={"n": policy})
    one, two = state.fork("a"), state.fork("b")
    increment(one)
    increment(two)
    one.merge()
    token = state.token
    result = two.merge()
    assert state.get("n") == expected
    (conflict,) = result.conflicts
    assert conflict.same_value and conflict.resolution == expected
    if expected == 1:  # a resolution equal to the current value writes nothing
        assert result.applied == ()
        assert state.token == token
    else:
        assert result.applied == (("n",),)


def test_union_settles_same_lists_to_that_list() -> None:
    state = SharedState(resolvers={"tags": resolvers.union})
    state.commit({"tags": ["a"]}, state.token, "init")
    one, two = state.fork("x"), state.fork("y")
    one.set("tags", ["a", "b", "b"])
    two.set("tags", ["a", "b", "b"])
    one.merge()
    result = two.merge()
    assert state.get("tags") == ["a", "b", "b"]
    assert result.conflicts[0].same_value and result.applied == ()


def test_accept_equal_refuses_different_values() -> None:
    state = counter_state(default=resolvers.accept_equal)
    one, two = state.fork("a"), state.fork("b")
    one.set("n", 1)
    two.set("n", 2)
    one.merge()
    with pytest.raises(ConflictError) as info:
        two.merge()
    (conflict,) = info.value.conflicts
    assert not conflict.resolved and conflict.policy == "accept_equal"
    assert not info.value.retry


def test_a_refused_merge_leaves_no_cycle_that_keeps_its_callers_frames() -> None:
    # the escalation, kept with its traceback, held every caller's frame (and what they
    # refer to: a hub's rooms and connections) until a full garbage collection
    class Held:
        pass

    def refused(held: Held) -> None:
        state = counter_state(default=resolvers.accept_equal)
        one, two = state.fork("a"), state.fork("b")
        one.set("n", 1)
        two.set("n", 2)
        one.merge()
        with contextlib.suppress(ConflictError):
            two.merge()

    held = Held()
    gone = weakref.ref(held)
    gc.disable()
    try:
        refused(held)
        del held
        assert gone() is None
    finally:
        gc.enable()


def test_retry_and_raise_conflict_on_same_values() -> None:
    state = counter_state()
    one, two = state.fork("a"), state.fork("b")
    increment(one)
    increment(two)
    one.merge()
    with pytest.raises(ConflictError) as info:
        two.merge(default=resolvers.retry)
    assert info.value.retry
    with pytest.raises(ConflictError) as info:
        two.merge()
    assert not info.value.retry


def test_appends_to_one_list_from_both_sides_stay_conflict_free() -> None:
    state = SharedState()
    state.commit({"log": []}, state.token, "init")
    one, two = state.fork("x"), state.fork("y")
    one.append("log", "same")
    two.append("log", "same")
    one.merge()
    assert two.merge().conflicts == ()
    assert state.get("log") == ["same", "same"]


def test_policy_module_has_no_equal_write_exceptions_left() -> None:
    assert not hasattr(resolvers, "report_equal_writes")
    assert not hasattr(resolvers.counter, "sees_equal_writes")
    assert "accept_equal" in resolvers.__all__


# -- many agents incrementing through transact + retry ------------------------------------
RETRY = Retry(attempts=10_000, base_delay=0.0005, max_delay=0.02)


def test_hundred_asyncio_tasks_increment_exactly_with_retry() -> None:
    state = counter_state()

    async def step(branch: Branch) -> None:
        value = branch.get("n")
        await asyncio.sleep(0)  # the "LLM call": others merge meanwhile
        branch.set("n", value + 1)

    async def main() -> list[int]:
        results = await asyncio.gather(
            *(
                state.atransact(step, agent=f"task{i}", default=resolvers.retry, retry=RETRY)
                for i in range(100)
            )
        )
        return [r.attempts for r in results]

    attempts = asyncio.run(main())
    assert state.get("n") == 100
    assert sum(attempts) > 100  # some steps were re-run


def test_twenty_threads_increment_exactly_with_retry() -> None:
    state = counter_state()
    per_thread = 10
    attempts: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(20)

    def step(branch: Branch) -> None:
        value = branch.get("n")
        time.sleep(0.0002)  # the "LLM call": other threads merge meanwhile
        branch.set("n", value + 1)

    def worker(i: int) -> None:
        try:
            start.wait()
            for _ in range(per_thread):
                result = state.transact(
                    step, agent=f"thread{i}", default=resolvers.retry, retry=RETRY
                )
                attempts.append(result.attempts)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert state.get("n") == 20 * per_thread
    assert len(attempts) == 20 * per_thread
    assert sum(attempts) > 20 * per_thread  # some steps were re-run


def test_merge_with_counter_from_many_branches_is_exact() -> None:
    state = counter_state(resolvers={"n": resolvers.counter})
    branches = [state.fork(f"agent{i}") for i in range(50)]
    for branch in branches:
        increment(branch)
    for branch in branches:
        branch.merge()
    assert state.get("n") == 50


def test_the_audit_log_records_same_value_conflicts(tmp_path: Any) -> None:
    state = SharedState.open(tmp_path / "audit.db", resolvers={"n": resolvers.counter})
    state.commit({"n": 0}, state.token, "init")
    one, two = state.fork("a"), state.fork("b")
    increment(one)
    increment(two)
    one.merge()
    two.merge()
    (record,) = state.conflicts("n")
    assert record.same_value and record.resolution == 2 and record.applied
    state.close()
