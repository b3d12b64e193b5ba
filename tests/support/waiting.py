"""Waiting for an event in a test: poll a probe until it holds, fail with what was seen.

A bound on waiting, never a timing assertion: a slow machine waits longer, a broken one fails
with the last value and the details a caller adds (role logs, say), not with a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T],
    *,
    seconds: float = 15.0,
    step: float = 0.1,
    what: str = "condition",
    details: Callable[[], str] | None = None,
) -> T:
    """Poll until ``probe`` returns something truthy and return it; raise AssertionError after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            raise AssertionError(f"{what} not met within {seconds:g} s (last value {value!r}){extra}")
        time.sleep(step)
