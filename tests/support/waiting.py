"""Waiting for a condition with a deadline, never for a fixed time.

``wait_until`` polls from a plain test; ``until`` from a coroutine on the running event loop
(the condition may itself be awaitable). Both fail with an AssertionError naming what was
awaited once the deadline passes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


def wait_until(
    predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> None:
    """Poll ``predicate`` until it is true or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    timeout: float = 10.0,
    interval: float = 0.005,
    what: str = "",
) -> None:
    """Poll ``condition`` on the running loop until it holds; fail after ``timeout`` seconds.

    The sleeps between polls let the loop run the work the condition waits for.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        await asyncio.sleep(interval)
