"""The README's "Running several hubs" recipe, as written, on real servers.

Its two ``crdt-state hub`` lines run with only the Redis URL, the DSN and the ports
swapped for the test's (a private ``redis-server`` and a fresh, unmigrated database),
and its Python client runs as a script with the ports swapped: it prints the hub it used
and the merged state, and, with the first hub killed, moves to the second.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_servers import RedisServer, ServerProcess, free_port
from hub_procs import port_open

ROOT = Path(__file__).resolve().parents[2]
_PORTS = ("8765", "8766")


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### Running several hubs")
    heading = re.compile(r"^#{2,3} ", re.M)  # the next section (a "# " is a shell comment)
    after = heading.search(text, start + 1)
    return text[start : after.start() if after else len(text)]


def _block(section: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert found is not None, f"no {language} block in the README's cluster section"
    return found.group(1)


def _hub_lines(bash: str) -> list[list[str]]:
    lines = [line.rstrip(" &") for line in bash.splitlines() if line.startswith("crdt-state hub")]
    assert len(lines) == 2, lines
    return [shlex.split(line.replace('"$PG"', "PG")) for line in lines]


class _ReadmeHub(ServerProcess):
    """One README hub line, run with ``python -m sync.cli`` and the test's servers."""

    def __init__(self, argv: list[str], redis: str, postgres: str, log: Path) -> None:
        super().__init__()
        self.port = free_port()
        swapped = {"--port": str(self.port), "--redis": redis, "--postgres": postgres}
        args = argv[1:]  # "hub", then the options
        for i, arg in enumerate(args[:-1]):
            if arg in swapped:
                args[i + 1] = swapped[arg]
        self.argv, self.log = args, log

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sync.cli", *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        for _ in range(400):
            if port_open(self.port):
                return
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.05)
        raise AssertionError(f"README hub did not listen:\n{self.log.read_text()}")


@pytest.fixture
def readme_hubs(
    private_redis: RedisServer, throwaway_postgres: str, tmp_path: Path
) -> Iterator[list[_ReadmeHub]]:
    argvs = _hub_lines(_block(_section(), "bash"))
    hubs = [
        _ReadmeHub(argv, private_redis.url, throwaway_postgres, tmp_path / f"hub{i}.log")
        for i, argv in enumerate(argvs)
    ]
    try:
        for hub in hubs:
            hub.start()
        yield hubs
    finally:
        for hub in hubs:
            hub.stop()


def _run_client(script: str, hubs: list[_ReadmeHub]) -> str:
    for readme_port, hub in zip(_PORTS, hubs, strict=True):
        assert f"127.0.0.1:{readme_port}/" in script
        script = script.replace(f"127.0.0.1:{readme_port}/", f"127.0.0.1:{hub.port}/")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_readme_cluster_recipe_runs_and_fails_over(readme_hubs: list[_ReadmeHub]) -> None:
    section = _section()
    assert "pip install 'crdt-state[cluster]'" in section
    script = _block(section, "python")
    first, second = readme_hubs
    out = _run_client(script, readme_hubs)
    assert out.strip() == f"ws://127.0.0.1:{first.port}/triage/42 {{'summary': '...'}}", out
    # every hub names the PostgreSQL and Redis it joined (the same two: one cluster)
    joined = {
        line
        for hub in readme_hubs
        for line in hub.log.read_text().splitlines()
        if line.startswith("rooms stored in PostgreSQL")
    }
    assert len(joined) == 1 and "with Redis redis://127.0.0.1:" in joined.pop()
    first.kill()
    out = _run_client(script, readme_hubs)  # the first URL refuses: the client moves on
    assert out.strip() == f"ws://127.0.0.1:{second.port}/triage/42 {{'summary': '...'}}", out
