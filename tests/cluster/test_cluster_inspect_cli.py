"""``crdt-state inspect --postgres DSN ROOM ...`` on a room a running cluster hub owns.

A real hub process (``--redis``/``--postgres``) judges an agent's merges; the CLI, run as
its own process, reads the room from PostgreSQL without a lock while the hub keeps it,
and names what is wrong when the room was never stored or the server does not answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_servers import RedisServer
from hub_procs import HubCluster
from hubs import inspect_cli as cli

from sync import connect

ROOM = "team/inspected"


@pytest.fixture
def one_hub(private_redis: RedisServer, postgres_dsn: str, tmp_path: Path) -> Iterator[HubCluster]:
    with HubCluster(private_redis.url, postgres_dsn, tmp_path, 1) as cluster:
        yield cluster


async def test_the_cli_reads_a_room_the_cluster_owns(
    one_hub: HubCluster, postgres_dsn: str
) -> None:
    async with connect(one_hub[0].url(ROOM), agent="ann") as remote:
        for n in range(1, 4):
            async with remote.fork() as branch:
                branch.set("step", n)
        async with remote.fork() as branch:
            branch.set("note", "done")
        assert remote.pending == 0
        # the hub still owns the room: the CLI reads what it committed, without a lock
        shown = cli("--postgres", postgres_dsn, ROOM, "show", "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["value"] == {"step": 3, "note": "done"}
        history = cli("--postgres", postgres_dsn, ROOM, "history", "--json")
        assert history.returncode == 0, history.stderr
        entries = json.loads(history.stdout)
        assert [e["agent"] for e in entries][-4:] == ["ann"] * 4
        assert [e["paths"] for e in entries][-4:] == [[["step"]]] * 3 + [[["note"]]]
        blame = cli("--postgres", postgres_dsn, ROOM, "blame", "note")
        assert blame.returncode == 0 and "note: last written by ann" in blame.stdout, blame
        # and the hub goes on judging
        async with remote.fork() as branch:
            branch.set("step", 4)
    again = cli("--postgres", postgres_dsn, ROOM, "show", "step", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["value"] == 4, again.stderr


def test_a_room_never_stored_and_a_server_that_does_not_answer_are_named(
    postgres_dsn: str,
) -> None:
    missing = cli("--postgres", postgres_dsn, "no/such/room", "show")
    assert missing.returncode == 2 and missing.stdout == ""
    assert "cannot read room 'no/such/room'" in missing.stderr
    assert "[storage: missing]" in missing.stderr, missing.stderr
    down = "host=127.0.0.1 port=1 user=ann password=s3cret dbname=rooms connect_timeout=2"
    refused = cli("--postgres", down, ROOM, "show")
    assert refused.returncode == 2 and "[storage: unavailable]" in refused.stderr
    assert "postgresql://ann@127.0.0.1:1/rooms" in refused.stderr
    assert "s3cret" not in refused.stderr
    both = cli("--postgres", postgres_dsn, "--db", "somewhere", ROOM, "show")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
