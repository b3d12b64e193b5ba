"""Fair scheduling between clients: ``slicerequest`` as priority lanes.

The problem: the controller dispatches every slice of a job at once, and processors take
slices first come, first served, so a client who queued 20 jobs makes the next client's
single job wait for all 20.

The design: ``PHOTOMOSAICS_FAIR_LANES=L`` (default 2) lanes of ``slicerequest``. The
controller puts a job's slices in lane ``min(k, L - 1)``, where ``k`` is how many of the
same client's unfinished jobs are ahead of it (``JobStore.unfinished_ahead``, the one query
that also reads the job's own row, so it costs nothing extra). A client's oldest unfinished
job rides lane 0 (``slicerequest``), its later jobs lane 1 (``slicerequest-lane1``) and so on.
Processors consume the lanes as one queue (``PriorityLanes``) and receive from lane 0
first, the next lane only when it is empty. So a newcomer's single job waits behind at most
the *first* job of each busy client, never behind their backlog.

- **Work-conserving**: a client alone uses every processor (its later jobs are just in a
  lower lane).
- **No starvation**: one receive in ``REVERSE_EVERY`` (5) tries the lanes lowest first, so
  later jobs keep moving even under a steady stream of first jobs.
- **At-least-once and crash-safe unchanged**: a lane is only *which queue* a slice is sent
  to; nothing is deferred or held in memory. A redelivered image request may pick another
  lane; a slice in two lanes is rendered twice, harmlessly (idempotent handlers).
- **Cost**: nothing per job for a client's first job; a receive that finds lane 0 empty
  costs one more call (a later job's slice, and the idle poll, which is 1 per 60 s with hints).

``PHOTOMOSAICS_FAIR_LANES=1`` is plain first come, first served (one queue). Like shards,
lowering L strands the messages in the dropped lanes: drain them first. Every lane has the
shards of ``PHOTOMOSAICS_SLICE_SHARDS`` (``slicerequest-lane1-1``...).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from dal.shards import ShardedQueue, shard_names

__all__ = ["LANE_SUFFIX", "MAX_LANES", "REVERSE_EVERY", "PriorityLanes", "lane_for", "lane_name", "slice_queue_names"]

MAX_LANES = 8
LANE_SUFFIX = "lane"
REVERSE_EVERY = 5


def lane_name(base: str, lane: int) -> str:
    """``slicerequest`` for lane 0, ``slicerequest-lane<i>`` for lane i."""
    return base if lane == 0 else f"{base}-{LANE_SUFFIX}{lane}"


def slice_queue_names(base: str, lanes: int, shards: int) -> list[str]:
    """Every queue of ``base`` with ``lanes`` lanes of ``shards`` shards, lane by lane."""
    return [name for lane in range(lanes) for name in shard_names(lane_name(base, lane), shards)]


def lane_for(jobs_ahead: int, lanes: int) -> int:
    """The lane of a job with ``jobs_ahead`` of its client's unfinished jobs before it."""
    return min(max(jobs_ahead, 0), lanes - 1)


class PriorityLanes(ShardedQueue):
    """Several lanes (each a queue or a ``ShardedQueue``) consumed highest priority first."""

    def __init__(self, lanes: Sequence[Any]) -> None:
        shards = [shard for lane in lanes for shard in getattr(lane, "shards", [lane])]
        super().__init__(shards)  # settle, peek and depth work on every shard of every lane
        self.lanes = list(lanes)
        self._receives = 0
        self._count_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PriorityLanes({self.lanes!r})"

    def accept_messages(self, max_messages: int = 16, **options: Any) -> list[Any]:
        """One receive from the highest lane with work (every ``REVERSE_EVERY``-th: lowest first)."""
        with self._count_lock:
            self._receives += 1
            reverse = self._receives % REVERSE_EVERY == 0
        for lane in reversed(self.lanes) if reverse else self.lanes:
            batch = lane.accept_messages(max_messages, **options)
            if batch:
                return list(batch)
        return []
