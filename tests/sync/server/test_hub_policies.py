"""The hub settles a conflict with the client's named policy in the same round.

Before, a conflict the room had no rule for went back to the client, which settled it
and sent the merge again against a token that, on a hot counter, was stale again by the
time it arrived: 931 of 1,000 remote agents incrementing one counter ended with
``ConflictError("conflicts kept coming back from the hub")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest
from websockets.asyncio.client import connect as ws_connect

from crdt_state import Change, ConflictError, SharedState, resolvers
from sync.client.remote import connect
from sync.server._merge import client_policies
from sync.server.hub import Hub
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange


async def test_a_hot_counter_is_settled_on_the_hub_in_one_round() -> None:
    async with Hub(port=0) as hub:
        url = hub.url("hot")
        counting = {"n": resolvers.counter}
        async with connect(url, agent="setup") as setup:
            await setup.acommit({"n": 0}, setup.token)
        async with contextlib.AsyncExitStack() as stack:
            remotes = [
                await stack.enter_async_context(connect(url, agent=f"c{i}", resolvers=counting))
                for i in range(4)
            ]

            async def increment(i: int) -> tuple[int, int]:
                remote = remotes[i % len(remotes)]
                branch = remote.fork()
                await asyncio.sleep(random.random() * 0.002)
                branch.set("n", branch.get("n") + 1)
                result = await branch.amerge()
                return result.rounds, len(result.conflicts)

            outcomes = await asyncio.gather(*(increment(i) for i in range(200)))
        assert hub.rooms["hot"].state.get("n") == 200
        assert {rounds for rounds, _ in outcomes} == {1}  # never sent twice
        assert sum(conflicts for _, conflicts in outcomes) > 0  # and they did contend


async def test_a_settled_merge_reads_as_applied_until_the_replica_has_it() -> None:
    async with Hub(port=0) as hub:
        url = hub.url("read")
        async with (
            connect(url, agent="a") as a,
            connect(url, agent="b", resolvers={"n": resolvers.counter}) as b,
        ):
            await a.acommit({"n": 10}, a.token)
            await asyncio.sleep(0.05)
            stale = b.fork()
            await a.acommit({"n": 11}, a.token)  # +1 elsewhere
            stale.set("n", stale.get("n") + 5)  # +5 here, from 10
            result = await stale.amerge()
            (conflict,) = result.conflicts
            assert conflict.policy == "counter" and conflict.resolution == 16
            assert b.get("n") == 16  # the applied value, never the 15 that was sent
            assert hub.rooms["read"].state.get("n") == 16


async def test_the_rooms_rules_beat_the_clients_policies() -> None:
    async with Hub(port=0, resolvers={"*": {"n": resolvers.maximum}}) as hub:
        url = hub.url("ruled")
        async with connect(url, agent="a", resolvers={"n": resolvers.counter}) as a:
            await a.acommit({"n": 5}, a.token)
            base = a.token
            await a.acommit({"n": 9}, base)
            result = await a.acommit({"n": 6}, base)  # counter would give 10
            assert result.conflicts[0].policy == "maximum"
            assert hub.rooms["ruled"].state.get("n") == 9


def test_only_known_names_where_the_room_has_no_rule_reach_the_merge() -> None:
    state = SharedState(resolvers={"ruled": resolvers.first_writer_wins})
    ops = [
        Change("set", ("n",), 1),
        Change("set", ("ruled",), 1),
        Change("set", ("x",), 1),
        Change("set", ("*",), 1),
    ]
    named = [(0, "counter"), (1, "counter"), (2, "no_such_policy"), (3, "counter")]
    chosen = client_policies(state, ops, named)
    assert chosen is not None
    assert {tuple(pattern.keys): policy for pattern, policy in chosen.items()} == {
        ("n",): resolvers.counter
    }
    # a room with a default of its own decides everything itself
    own_default = SharedState(default=resolvers.last_writer_wins)
    assert client_policies(own_default, ops, named) is None


async def test_a_retry_policy_still_goes_back_to_the_agent() -> None:
    """``retry`` is not a policy a hub can apply: the agent step must run again."""
    async with Hub(port=0) as hub:
        url = hub.url("retry")
        async with connect(url, agent="a", resolvers={"n": resolvers.retry}) as a:
            await a.acommit({"n": 0}, a.token)
            base = a.token
            await a.acommit({"n": 1}, base)
            with pytest.raises(ConflictError) as info:
                await a.acommit({"n": 1}, base)
            assert info.value.retry


async def test_an_unknown_policy_name_from_a_raw_client_is_left_to_it() -> None:
    async with Hub(port=0) as hub:
        url = hub.url("raw")
        state = (await hub.room("raw")).state
        state.commit({"n": 0}, state.token, "setup")
        base = state.token.to_state()
        state.commit({"n": 1}, state.token, "other")
        async with ws_connect(url, compression=None) as ws:
            for request_id, name in ((1, "not_a_policy"), (2, "counter")):
                frame = p.encode_merge_request(
                    request_id,
                    "raw",
                    base,
                    [WireChange(ChangeKind.SET, ("n",), 1)],
                    writer="raw-writer",
                    policies=[(0, name)],
                )
                await ws.send(frame)
                while True:
                    message = p.decode_message(await ws.recv())  # type: ignore[arg-type]
                    if isinstance(message, p.MergeReply):
                        break
                if name == "not_a_policy":
                    assert message.status is p.MergeStatus.ERROR
                    assert message.error is not None and message.error.code == "conflict"
                else:
                    assert message.status is p.MergeStatus.CONFLICT
        assert state.get("n") == 2


async def test_a_conflict_left_to_the_client_is_audited_as_an_in_process_refusal(
    tmp_path: Path,
) -> None:
    """Found as a user: the room's audit named the hub's private policy function."""
    async with Hub(port=0, db=tmp_path / "rooms") as hub:
        async with connect(hub.url("r"), agent="a") as a, connect(hub.url("r"), agent="b") as b:
            first, second = a.fork(), b.fork()
            first.set("x", 1)
            second.set("x", 2)
            await first.amerge()
            with pytest.raises(ConflictError):
                await second.amerge()
        hub_policies = [c.policy for c in hub.rooms["r"].state.conflicts()]
    local = SharedState.open(tmp_path / "local.db")
    one, two = local.fork("a"), local.fork("b")
    one.set("x", 1)
    two.set("x", 2)
    one.merge()
    with pytest.raises(ConflictError):
        two.merge()
    local_policies = [c.policy for c in local.conflicts()]
    local.close()
    assert hub_policies == local_policies == ["raise_conflict"]
