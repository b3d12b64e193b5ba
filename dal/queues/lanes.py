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
  With hints heard (``skip_known_empty``, set by a hint-covered listener) a lane that came back
  empty is skipped for ``KNOWN_EMPTY_SECONDS`` (15 s) unless a hint names it (hints carry their
  lane: ``dal.hints.payload``), a hint names none (a hand-back), or a message was released into
  it (a retry): so a job's last receive, and the reversed one, cost one call, not one per lane.
  When every lane would be skipped (the listener's own safety-net poll), every lane is tried,
  so an unhinted send (another machine without pub/sub) waits for that poll, as before, or at
  most 15 s while the listener is busy with other lanes' hinted work.

``PHOTOMOSAICS_FAIR_LANES=1`` is plain first come, first served (one queue). Like shards,
lowering L strands the messages in the dropped lanes: drain them first. Every lane has the
shards of ``PHOTOMOSAICS_SLICE_SHARDS`` (``slicerequest-lane1-1``...).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from dal.queues.consumable import Accepted, Consumable, PoisonHook, ReceivedMessage
from dal.queues.shards import ShardedQueue, shard_names

__all__ = [
    "KNOWN_EMPTY_SECONDS",
    "LANE_SUFFIX",
    "MAX_LANES",
    "REVERSE_EVERY",
    "PriorityLanes",
    "lane_for",
    "lane_name",
    "slice_queue_names",
]

MAX_LANES = 8
LANE_SUFFIX = "lane"
REVERSE_EVERY = 5
KNOWN_EMPTY_SECONDS = 15.0


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

    def __init__(self, lanes: Sequence[Consumable]) -> None:
        shards = [shard for lane in lanes for shard in lane.parts]
        super().__init__(shards)  # settle, peek and depth work on every shard of every lane
        self.lanes = list(lanes)
        self._receives = 0
        self._count_lock = threading.Lock()
        self._lane_of = {shard.name: i for i, lane in enumerate(self.lanes) for shard in lane.parts}
        # Skipping lanes known to be empty is only safe while hints announce new work: the
        # listener sets this before each receive (False: every receive tries every lane).
        self.skip_known_empty = False
        self._empty_at: dict[int, float] = {}  # lane -> when a receive found it empty
        self._not_before: dict[int, float] = {}  # lane -> a released message is visible again by then
        self._hints = [0] * len(self.lanes)  # per lane: hints heard (a receive racing one marks nothing)

    def __repr__(self) -> str:
        return f"PriorityLanes({self.lanes!r})"

    def hinted(self, lane: int | None) -> None:
        """A hint for ``lane`` (None: any lane) arrived: try it again on the next receive."""
        with self._count_lock:
            named = [lane] if lane is not None and 0 <= lane < len(self.lanes) else None
            for i in named or range(len(self.lanes)):
                self._hints[i] += 1
                self._empty_at.pop(i, None)

    def release(self, received: ReceivedMessage, *, delay: int = 0) -> bool:
        """Make a held message visible again (after ``delay``): its lane is worth a call then."""
        lane = self._lane_of.get(received.queue_name)
        if lane is not None:
            with self._count_lock:
                self._empty_at.pop(lane, None)
                self._not_before[lane] = max(
                    self._not_before.get(lane, 0.0), time.monotonic() + delay + KNOWN_EMPTY_SECONDS
                )
        return super().release(received, delay=delay)

    def accept_messages(
        self, max_messages: int = 16, *, visibility_timeout: int | None = None, on_poison: PoisonHook | None = None
    ) -> Accepted:
        """One receive from the highest lane with work (every ``REVERSE_EVERY``-th: lowest first),
        skipping the lanes known to be empty (see the module docstring). A lane whose receive
        moved messages to poison is not empty: that result is returned (``Accepted.poisoned``)
        and the caller receives again, from that lane first."""
        with self._count_lock:
            self._receives += 1
            reverse = self._receives % REVERSE_EVERY == 0
            now = time.monotonic()
            skip = (
                {
                    i
                    for i, at in self._empty_at.items()
                    if now - at < KNOWN_EMPTY_SECONDS and now >= self._not_before.get(i, 0.0)
                }
                if self.skip_known_empty
                else set()
            )
            if len(skip) >= len(self.lanes):  # the listener polls anyway (its cap, a nudge): try them all
                skip = set()
            hints = list(self._hints)
        order = range(len(self.lanes) - 1, -1, -1) if reverse else range(len(self.lanes))
        for i in order:
            if i in skip:
                continue
            started = time.monotonic()
            batch = self.lanes[i].accept_messages(
                max_messages, visibility_timeout=visibility_timeout, on_poison=on_poison
            )
            with self._count_lock:
                if batch or batch.poisoned:
                    self._empty_at.pop(i, None)
                elif self._hints[i] == hints[i]:  # a hint for it during the call: not known empty
                    self._empty_at[i] = started
            if batch or batch.poisoned:
                return batch
        return Accepted()
