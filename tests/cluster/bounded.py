"""Bounded awaits for the cluster tests: a hang fails fast, naming what it waited for.

``async with bounded(5, "second acquire"): ...`` is ``asyncio.timeout(5)`` whose expiry
fails the test with ``what`` and the await chain of every task still running (each task's
coroutines down to the future it waits on), so a hang says where it is instead of
running into pytest's global timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

__all__ = ["await_chain", "bounded"]


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where ``task`` waits: ``file:line function`` per coroutine, then the awaited object."""
    chain: list[str] = []
    step: Any = task.get_coro()
    while step is not None:
        frame = getattr(step, "cr_frame", None) or getattr(step, "ag_frame", None)
        frame = frame or getattr(step, "gi_frame", None)
        if frame is None:  # not a coroutine: the future (or other awaitable) it waits on
            chain.append(repr(step)[:160])
            break
        chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        step = (
            getattr(step, "cr_await", None)
            or getattr(step, "ag_await", None)
            or getattr(step, "gi_yieldfrom", None)
        )
    return chain


@asynccontextmanager
async def bounded(seconds: float, what: str) -> AsyncIterator[None]:
    """``asyncio.timeout(seconds)``; on expiry the test fails naming ``what`` and the tasks."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        me = asyncio.current_task()
        tasks = "\n".join(
            f"{task.get_name()}:\n    " + "\n    ".join(await_chain(task))
            for task in asyncio.all_tasks()
            if task is not me
        )
        pytest.fail(f"{what}: no answer within {seconds} s; tasks:\n{tasks}", pytrace=False)
