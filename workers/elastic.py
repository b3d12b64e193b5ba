"""Elastic dequeue: how many handlers a queue of a given depth deserves, as a pure function.

A listener runs between ``low`` and ``high`` handlers at once. When a receive comes back
full (more is probably waiting; after an idle spell this is work detected; a
short batch means the queue is empty, so its depth is not read), it reads the queue's *approximate* depth (one transaction, at most once per
``DEPTH_CHECK_INTERVAL``) and grows to ``optimal_concurrency(depth + held)``; the first
empty receive shrinks it back to ``low``. The depth is approximate (it counts invisible
messages too), which is fine: it only sizes a thread pool, it never decides what is done.
"""

from __future__ import annotations

import math

__all__ = ["DEPTH_CHECK_INTERVAL", "MESSAGES_PER_HANDLER", "optimal_concurrency"]

MESSAGES_PER_HANDLER = 2  # a handler per two waiting messages: the queue drains in ~2 rounds
DEPTH_CHECK_INTERVAL = 1.0  # seconds between two depth reads of one listener


def optimal_concurrency(depth: int, *, low: int, high: int, per_handler: int = MESSAGES_PER_HANDLER) -> int:
    """Handlers wanted for ``depth`` waiting messages, within ``[low, high]``."""
    if depth <= 0:
        return low
    return max(low, min(high, math.ceil(depth / per_handler)))
