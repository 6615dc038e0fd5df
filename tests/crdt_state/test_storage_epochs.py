"""Durable states drop Yjs tombstones by starting a new epoch of their document (per store)."""

from __future__ import annotations

from typing import Any

import pytest

from crdt_state import Branch, SharedState, StaleBase, resolvers
from crdt_state import _sqlite_reads as storage_module


@pytest.fixture(autouse=True)
def small_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reset as soon as tombstones pass 4 KiB, so the tests stay short."""
    monkeypatch.setattr(storage_module, "_TOMBSTONE_SLACK", 4096)


def churn(state: SharedState, rounds: int, start: int = 0) -> dict[str, int]:
    expected: dict[str, int] = {}
    for i in range(start, start + rounds):
        key = f"k{i % 10}"
        state.commit({key: i}, state.token, f"agent{i % 3}")
        expected[key] = i
    return expected


def doc_size(state: SharedState) -> int:
    return len(state._core.doc.get_update())  # not get_update(): that would share the document


def test_overwrites_do_not_grow_the_document_or_the_store(stores: Any) -> None:
    place = stores.fresh()
    state = place.open(keep_history=100, durability="normal")
    expected = churn(state, 3_000)
    state._reader().flush()
    assert state.epoch >= 1
    assert doc_size(state) < 20_000  # 3,000 overwrites leave ~36 KB of tombstones otherwise
    assert state.store is not None and state.store.epochs >= 1
    assert state.snapshot() == expected
    token = state.token
    state.close()
    assert stores.rows(place, "log") <= 100 + 64 and stores.rows(place, "snapshot") == 1
    again = place.open()
    assert again.snapshot() == expected
    assert again.token == token
    more = churn(again, 50, start=3_000)
    assert again.snapshot() == {**expected, **more}
    again.close()


def test_a_branch_from_an_earlier_epoch_is_stale_and_can_rebase(stores: Any) -> None:
    state = stores.fresh().open(keep_history=50, durability="normal")
    state.commit({"owner": "nobody"}, state.token, "init")
    old = state.fork("slow-agent")
    old.set("owner", "slow-agent")
    old_token = state.token
    churn(state, 1_500)
    state._reader().flush()
    assert state.epoch >= 1
    assert old.get("owner") == "slow-agent"  # its own writes stay readable
    with pytest.raises(StaleBase):
        old.get("k1")  # the base it would read from is gone
    with pytest.raises(StaleBase):
        old.merge()
    with pytest.raises(StaleBase):
        state.commit({"owner": "x"}, old_token, "occ")
    old.rebase()
    old.merge()
    assert state.get("owner") == "slow-agent"

    def step(branch: Branch) -> None:
        branch.set("owner", "transact")

    assert state.transact(step, agent="t").value is None
    assert state.get("owner") == "transact"
    state.close()


def test_a_shared_document_keeps_its_identity(stores: Any) -> None:
    state = stores.fresh().open(keep_history=50, durability="normal")
    replica = SharedState()
    replica.apply_update(state.get_update())  # the document is now shared
    churn(state, 1_500)
    state._reader().flush()
    assert state.epoch == 0
    replica.apply_update(state.get_update(replica.token))
    assert replica.snapshot() == state.snapshot()
    assert replica.token == state.token
    state.close()


def test_compact_document_can_be_turned_off(stores: Any) -> None:
    state = stores.fresh().open(keep_history=50, durability="normal", compact_document=False)
    churn(state, 1_500)
    state._reader().flush()
    assert state.epoch == 0
    state.close()


def test_conflicts_and_policies_work_across_an_epoch(stores: Any) -> None:
    state = stores.fresh().open(
        keep_history=50,
        durability="normal",
        resolvers={"calls": resolvers.counter},
    )
    state.commit({"calls": 0}, state.token, "init")
    churn(state, 1_500)
    state._reader().flush()
    assert state.epoch >= 1
    one, two = state.fork("a"), state.fork("b")
    one.set("calls", 1)
    two.set("calls", 1)
    one.merge()
    result = two.merge()
    assert state.get("calls") == 2
    assert result.conflicts[0].policy == "counter"
    state.close()
