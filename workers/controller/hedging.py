"""Hedged slices: the controller sends a late slice again, and the first copy to finish counts.

**The problem.** A processor that is paused (SIGSTOP, a frozen VM, a long GC, swapping) keeps
its slice's message invisible until its lease runs out (60 s, renewed while the holder
lives), and the whole job waits for that one slice. A local child that *dies* is handed back
at once from its lease journal (``workers.runtime.leases``); a paused one, or one on another machine,
is not.

**The idea** (MapReduce's backup tasks, the hedged requests of "The Tail at Scale"): the
controller that dispatched a job remembers, in memory, when each slice went out and when its
response came back (``SliceClock``). A slice out much longer than its siblings took is sent
again: the same ``SliceRequestMessage`` (same request id, sequence and band) to the same
queue, so that another processor renders it. Whichever copy answers first completes the
slice. Nothing else has to change, because a slice is handled idempotently end to end:

- the render is deterministic (the request id seeds it): both copies make the same pixels;
- the controller adds a slice to ``slices_done`` with one ETag write; a second response for
  it writes nothing, and exactly one write completes the set and claims the stitch
  (``workers.controller.controller``), so the job is stitched once;
- the late copy rewrites its slice blob (an intermediate: the same bytes) or stages the same
  content-addressed blocks (a giant job's pieces: left uncommitted, Azure discards them); a
  one-slice job's JPEG, pyramid and tile map are written once (``keep_existing``), so a
  finished mosaic never changes under a reader;
- the first copy's message, if its lease runs out, comes back with a dequeue count of 2: the
  job read a redelivery makes anyway finds the slice done, and it is not rendered again;
- a late copy of a job already deleted writes blobs nobody reads: the retention sweep deletes
  such orphans after its grace (``dal.operations.retention``), and its response is ignored.

**A stale front is announced again.** A message waiting at the front of a slice queue for
more than ``STALE_WAIT`` (4 s) is not being taken: its wake-up hint went to a listener that
cannot take it (paused with the slice prefetched, or deaf), and that listener's taken notice
spent its peers' hint credit, so they would wait for the safety-net poll. The look that
finds it publishes the queue's hint again (``slice_queue.reannounced``; no storage
transaction), and a peer receives it.

**At most once** per slice (``PHOTOMOSAICS_HEDGES_PER_SLICE``, 1; 0 turns hedging off), and
only after a read of the job row says the job is not over and the slice not done (its
response may have gone to another controller). A hedge is a log line ``slice.hedged``, the
counter ``photomosaics_slices_hedged_total`` and a line in the job's log (kind ``hedged``): one
table write on the hedge path; the normal path writes nothing more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime

from prometheus_client import Counter

from dal.jobs.model import TERMINAL_STATUSES, Job
from dal.queues.messages import SliceRequestMessage
from workers.controller import slice_clock
from workers.controller.slice_clock import LateSlice, SliceClock
from workers.runtime.logfmt import kv
from workers.services import RoleServices

__all__ = ["SLICES_HEDGED", "Hedger"]

log = logging.getLogger(__name__)

SLICES_HEDGED = Counter(
    "photomosaics_slices_hedged_total",
    "Slice requests the controller sent again because the slice was late (workers.controller.hedging).",
)


class Hedger:
    """The controller's daemon thread that sends late slices again (see the module docstring); the
    clock (``workers.controller.slice_clock``) says which are late.

    The controller calls ``dispatched`` and ``recorded``; ``start`` and ``stop``
    belong to the controller role. ``check`` is one look, for the thread (and for tests).
    """

    def __init__(self, services: RoleServices, *, tick: float | None = None) -> None:
        settings = services.settings
        self.services = services
        self.clock = SliceClock(
            floor=settings.hedge_floor_seconds,
            factor=settings.hedge_factor,
            hedges_per_slice=settings.hedges_per_slice,
        )
        # Looks are due at half an allowance (at least half the floor): a tick well inside that.
        self.tick = tick if tick is not None else min(1.0, max(0.1, settings.hedge_floor_seconds / 4))
        self.hedges = 0  # slices sent again by this watcher
        self.reannounced = 0  # slice queues announced again because their front message went stale
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def dispatched(self, client_id: str, messages: Sequence[SliceRequestMessage], cells: Mapping[int, int]) -> None:
        self.clock.dispatched(client_id, messages, cells)

    def recorded(self, job: Job, sequence: int) -> None:
        """Slice ``sequence``'s response came in and left the job's row as ``job``: the slice's
        time out is learnt, the slices the row lists as done (by any controller) leave the
        watch, and an ended or complete job goes altogether."""
        self.clock.arrived(job.request_id, sequence)
        if job.status in TERMINAL_STATUSES or len(job.slices_done) >= job.slices:
            self.clock.forget(job.request_id)
        else:
            self.clock.done(job.request_id, job.slices_done)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hedging", daemon=True)
            self._thread.start()
            log.info(
                kv(
                    "hedging.start",
                    floor=self.clock.floor,
                    factor=self.clock.factor,
                    hedges_per_slice=self.clock.hedges_per_slice,
                )
            )

    def stop(self, *, wait: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=wait)

    def _run(self) -> None:
        while not self._stopping.wait(self.tick):
            try:
                self.check()
            except Exception as exc:  # storage trouble: the next tick looks again; leases still bound the wait
                log.warning(kv("hedging.check_failed", error=f"{type(exc).__name__}: {exc}"))

    def check(self) -> int:
        """One look when one is due: hedge what is late, unless messages are waiting (then only
        the slices later ones overtook). Slices sent."""
        overtaken = self.clock.overtaken_late()
        if not self.clock.needs_look():
            return self._hedge_all(overtaken)
        looked_at = self.clock.now()
        fronts = self.fronts()
        self.reannounce(fronts)
        late, withheld = self.clock.look(fronts, looked_at)
        for held in withheld:
            log.info(
                kv(
                    "slice.not_hedged",
                    request_id=held.request_id,
                    seq=held.message.slice_sequence,
                    waited=round(held.waited, 3),
                    why="backlog",
                    queue=held.message.queue_uri.rstrip("/").rsplit("/", 1)[-1],
                )
            )
        return self._hedge_all([*overtaken, *late])

    def _hedge_all(self, late: list[LateSlice]) -> int:
        by_job: dict[str, dict[int, LateSlice]] = {}
        for piece in late:
            by_job.setdefault(piece.request_id, {})[piece.message.slice_sequence] = piece
        return sum(self._hedge(list(slices.values())) for slices in by_job.values())

    def reannounce(self, fronts: Mapping[str, datetime | None]) -> None:
        """Announce again every slice queue whose oldest waiting message has waited longer than
        ``STALE_WAIT``: its hint was spent on a listener that cannot take it (paused with the
        slice prefetched, or deaf), and the others, their credit spent by its taken notice,
        would wait for the safety-net poll. A hint costs no storage transaction."""
        now = self.clock.wall()
        for queue in self.services.queues.slice_request_queues():
            front = fronts.get(queue.url)
            if front is not None and now - front > slice_clock.STALE_WAIT:
                queue.announce()
                self.reannounced += 1
                log.info(
                    kv("slice_queue.reannounced", queue=queue.name, waited=round((now - front).total_seconds(), 3))
                )

    def fronts(self) -> dict[str, datetime | None]:
        """For every lane and shard of slicerequest (by URL), when its oldest waiting message
        was put in, or None: one Peek each."""
        return {queue.url: queue.oldest_visible() for queue in self.services.queues.slice_request_queues()}

    def _hedge(self, slices: list[LateSlice]) -> int:
        """Send one job's late slices again, once its row says they are still to do."""
        rid, client_id = slices[0].request_id, slices[0].client_id
        job = self.services.jobs.get(client_id, rid)
        if job is None or job.status in TERMINAL_STATUSES:
            self.clock.forget(rid)
            return 0
        self.clock.done(rid, job.slices_done)
        todo = [late for late in slices if late.message.slice_sequence not in job.slices_done]
        by_queue: dict[str, list[LateSlice]] = {}
        for late in todo:
            by_queue.setdefault(late.message.queue_uri, []).append(late)
        sent: list[LateSlice] = []
        for batch in by_queue.values():  # one send per queue (a job's slices may be on several shards)
            self.services.send([late.message for late in batch])
            for late in batch:
                self.clock.hedged(rid, late.message.slice_sequence)
                SLICES_HEDGED.inc()
                log.info(
                    kv(
                        "slice.hedged",
                        request_id=rid,
                        seq=late.message.slice_sequence,
                        waited=round(late.waited, 3),
                        late_after=round(late.allowance, 3),
                    )
                )
            sent += batch
        self.hedges += len(sent)
        self._log_events(rid, job.slices, sent)
        return len(sent)

    def _log_events(self, request_id: str, slices: int, sent: list[LateSlice]) -> None:
        """The job's log says what happened (one table transaction; a failure only costs the line)."""
        if not sent:
            return
        events = [
            dict(
                kind="hedged",
                actor=self.services.name,
                slice=late.message.slice_sequence,
                message=f"slice {late.message.slice_sequence + 1} of {slices} sent again: out {late.waited:.1f} s, "
                f"late after {late.allowance:.1f} s (its processor may be paused; the first copy to finish counts)",
            )
            for late in sent
        ]
        try:
            self.services.jobs.add_events(request_id, events)
        except Exception as exc:
            log.warning(kv("slice.hedge_event_failed", request_id=request_id, error=f"{type(exc).__name__}: {exc}"))
