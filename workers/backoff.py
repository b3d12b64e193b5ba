"""The two waiting schedules of the queue listener, as pure functions (tested as such).

- ``poll_delay``: how long an idle listener waits before its next receive. Exponential from
  ``poll_min`` with ±20 % jitter, so listeners started together drift apart, and clamped to
  ``poll_max``, so an idle listener costs at most ``3600 / poll_max`` receives an hour.
- ``retry_delay_for``: how long a failed message stays invisible before its next attempt.
"""

from __future__ import annotations

import math
import random

__all__ = ["JITTER", "poll_delay", "retry_delay_for"]

JITTER = 0.2


def poll_delay(empty_polls: int, *, poll_min: float, poll_max: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after ``empty_polls`` consecutive empty receives (1, 2, ...).

    ``poll_min * 2**(n-1)`` with ±20 % jitter, clamped to ``[poll_min, poll_max]``. Once the
    un-jittered value passes ``poll_max / 0.8`` the jitter can no longer pull it below the
    cap, so a long-idle listener polls exactly every ``poll_max`` seconds: at most
    ``3600 / poll_max`` receive transactions an hour.
    """
    if empty_polls < 1:
        return 0.0
    exponent = min(empty_polls - 1, 60)  # 2**60 * anything sane is past any cap
    base = poll_min * (2.0**exponent)
    factor = (rng or random).uniform(1.0 - JITTER, 1.0 + JITTER)
    return min(poll_max, max(poll_min, base * factor))


def retry_delay_for(dequeue_count: int, *, retry_delay: float, max_retry_delay: float) -> int:
    """Whole seconds of invisibility for a failed message: doubles with each attempt."""
    exponent = min(max(dequeue_count, 1) - 1, 30)
    return int(math.ceil(min(max_retry_delay, retry_delay * (2.0**exponent))))
