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

**When is a slice late?** (``late_after``) When it has been out longer than ``max(floor,
factor x expected)``. *Expected* scales the median seconds per cell of its siblings that
came back (the bands of a job are the same size, give or take a row) to its own cells; before
any sibling came back (a one-slice job) it uses the median seconds per cell of the last
slices this controller saw; with neither, nothing is late, since a guess could hedge every
slice of a big first job. Defaults: floor 1 s (``PHOTOMOSAICS_HEDGE_FLOOR_SECONDS``), because
a calm slice of the create page's default job is back within that from its dispatch (the
reliability soak's calm phase: p99 0.64 s, slowest 0.83 s, queue waits included), so below it a
second copy would only duplicate healthy work; factor 3
(``PHOTOMOSAICS_HEDGE_FACTOR``), because the bands of a job take about the same time and pickup
order and hints spread them by far less than 3x, while a paused processor holds its slice for
a whole lease (20x and more).

**Never into a backlog.** The time since dispatch includes the time a slice waited in its
queue, and a slice waiting behind others is no straggler: the processors are busy, and a
second copy would only add to their work. So the watcher looks at the slice queues before
it calls a slice late: one Peek per lane and shard tells when the oldest message waiting
there was put in (``StoredQueue.oldest_visible``; the approximate count cannot tell, it
counts the messages in flight too). A queue hands out its oldest messages first, so:

- a slice sent before that message (by more than ``CLOCK_SKEW``, the service's clock against
  ours) is no longer in its queue: it was taken (``taken_by``), whatever waits behind it;
- otherwise it may still be waiting: it is not hedged, and its clock restarts (``since``).

A slice is hedged when it is late by its clock *and* has stayed out half its allowance since it
was seen taken, so a slice picked up just as a backlog drained is not hedged for the time it
waited. In calm operation the look comes at half the allowance and the hedge at the allowance
after dispatch; a slice that comes back within half its allowance costs nothing at all.

**A stale front is announced again.** A message waiting at the front of a slice queue for
more than ``STALE_WAIT`` (4 s) is not being taken: its wake-up hint went to a listener that
cannot take it (paused with the slice prefetched, or deaf), and that listener's taken notice
spent its peers' hint credit, so they would wait for the safety-net poll. The look that
finds it publishes the queue's hint again (``slice_queue.reannounced``; no storage
transaction), and a peer receives it.

**Overtaken.** A queue hands out its oldest messages first, so when a slice sent later to
the same queue comes back while an earlier one is still out, the earlier one was taken and
is held (``overtaken``). Such a slice is hedged once it is late by its clock and has stayed
out half its allowance since it was overtaken, even while other messages wait: under a
steady stream of jobs the queues are rarely empty at the moment of a look, and a paused
processor's slice would otherwise wait for its lease.

**At most once** per slice (``PHOTOMOSAICS_HEDGES_PER_SLICE``, 1; 0 turns hedging off), and
only after a read of the job row says the job is not over and the slice not done (its
response may have gone to another controller). A hedge is a log line ``slice.hedged``, the
counter ``photomosaics_slices_hedged_total`` and a line in the job's log (kind ``hedged``): one
table write on the hedge path; the normal path writes nothing more.

**Bounded memory.** Only the jobs this controller dispatched are watched (a job dispatched
by another controller is not), at most ``MAX_JOBS`` and ``MAX_BAND_BYTES`` of inline bands
(the message is kept, to be sent again), the oldest forgotten first. A job is forgotten when
all its slices came back, when it ended, or when none of its slices can be hedged any more.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from prometheus_client import Counter

from dal.jobs.store import TERMINAL_STATUSES, Job
from dal.queues.messages import SliceRequestMessage
from workers.runtime.logfmt import kv
from workers.services import RoleServices

__all__ = ["MAX_BAND_BYTES", "MAX_JOBS", "SLICES_HEDGED", "LateSlice", "SliceClock", "StragglerWatcher", "late_after"]

log = logging.getLogger(__name__)

SLICES_HEDGED = Counter(
    "photomosaics_slices_hedged_total",
    "Slice requests the controller sent again because the slice was late (workers.controller.stragglers).",
)

MAX_JOBS = 512
MAX_BAND_BYTES = 16 * 1024 * 1024  # inline bands kept to be sent again (at most 32 KiB each)
_RECENT = 64  # slices behind the seconds-per-cell estimate
# How far the storage service's clock (a message's insertion time) may be from ours: a slice
# sent this much before the oldest waiting message is taken for taken.
CLOCK_SKEW = timedelta(seconds=2)
# A message waiting this long at the front of a slice queue (clock skew included) is not being
# taken: the watcher announces the queue again (``StragglerWatcher.reannounce``).
STALE_WAIT = timedelta(seconds=4)


def late_after(
    cells: int, siblings: Iterable[tuple[float, int]], seconds_per_cell: float | None, *, floor: float, factor: float
) -> float:
    """Seconds out after which a slice of ``cells`` cells is late: ``max(floor, factor x expected)``.

    ``siblings``: (seconds out, cells) of the job's slices that came back on their own (not
    hedged); *expected* is their median seconds per cell times ``cells``, else
    ``seconds_per_cell`` (this controller's recent estimate) times ``cells``; with neither,
    ``math.inf``: never late."""
    rates = [seconds / max(n, 1) for seconds, n in siblings]
    rate = statistics.median(rates) if rates else seconds_per_cell
    if rate is None:
        return math.inf
    return max(floor, factor * rate * max(cells, 1))


@dataclass
class _Slice:
    message: SliceRequestMessage
    cells: int
    sent: float  # monotonic time it was dispatched
    sent_at: datetime  # the same moment by the wall clock, to compare with a queue's insertion times
    since: float  # the latest time it may still have been waiting in its queue
    taken_by: float | None = None  # a look found no message waiting then: it was taken by this time
    overtaken: float | None = None  # a slice sent after it to the same queue came back then: it was taken
    back: bool = False  # its response came in, or the job row lists it as done
    took: float | None = None  # seconds out, when it came back on its own (not hedged): what siblings learn from
    hedges: int = 0
    withheld: bool = False  # "not hedged: backlog" was logged


@dataclass
class _Job:
    client_id: str
    slices: dict[int, _Slice]
    band_bytes: int


@dataclass(frozen=True)
class LateSlice:
    """A slice to send again, with what made it late (seconds since dispatch, its allowance)."""

    request_id: str
    client_id: str
    message: SliceRequestMessage
    waited: float
    allowance: float


class SliceClock:
    """When each slice of the watched jobs went out and came back, and which are late.

    The rule is the module docstring's; ``now`` is ``time.monotonic`` unless a test gives its
    own clock. Thread-safe: the controller's handlers record, the watcher's thread reviews.
    """

    def __init__(
        self,
        *,
        floor: float,
        factor: float,
        hedges_per_slice: int = 1,
        max_jobs: int = MAX_JOBS,
        max_band_bytes: int = MAX_BAND_BYTES,
        now: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if floor < 0 or factor <= 0 or hedges_per_slice < 0:
            raise ValueError(
                f"hedging needs floor >= 0 s, factor > 0 and hedges per slice >= 0; "
                f"got {floor}, {factor}, {hedges_per_slice}"
            )
        self.floor, self.factor, self.hedges_per_slice = floor, factor, hedges_per_slice
        self.max_jobs, self.max_band_bytes = max_jobs, max_band_bytes
        self.now, self.wall = now, wall
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._band_bytes = 0
        self._rates: deque[float] = deque(maxlen=_RECENT)  # seconds per cell of recent slices
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    # -- what the controller tells it ---------------------------------------------------

    def dispatched(self, client_id: str, messages: Sequence[SliceRequestMessage], cells: Mapping[int, int]) -> None:
        """The slices of one job were sent (a redelivered request: watched afresh)."""
        if not messages or self.hedges_per_slice == 0:
            return
        now, wall, rid = self.now(), self.wall(), messages[0].request_id
        slices = {
            m.slice_sequence: _Slice(m, cells.get(m.slice_sequence, 1), sent=now, sent_at=wall, since=now)
            for m in messages
        }
        job = _Job(client_id, slices, band_bytes=sum(len(m.band or "") for m in messages))
        with self._lock:
            self._drop(rid)
            self._jobs[rid] = job
            self._band_bytes += job.band_bytes
            while self._jobs and (len(self._jobs) > self.max_jobs or self._band_bytes > self.max_band_bytes):
                self._drop(next(iter(self._jobs)))

    def arrived(self, request_id: str, sequence: int) -> None:
        """A slice's response came in; its time out feeds the estimates unless it was hedged."""
        now = self.now()
        with self._lock:
            job = self._jobs.get(request_id)
            piece = job.slices.get(sequence) if job is not None else None
            if job is None or piece is None or piece.back:
                return
            piece.back = True
            if piece.hedges == 0:
                piece.took = now - piece.sent
                self._rates.append(piece.took / max(piece.cells, 1))
                self._overtake(piece, now)
            self._settle(request_id, job)

    def _overtake(self, back: _Slice, now: float) -> None:
        """``back`` came back: every slice sent before it to the same queue was taken by now
        (a queue hands out its oldest messages first), whatever waits in the queues since."""
        for job in self._jobs.values():
            for piece in job.slices.values():
                if (
                    not piece.back
                    and piece.overtaken is None
                    and piece.sent < back.sent
                    and piece.message.queue_uri == back.message.queue_uri
                ):
                    piece.overtaken = now

    def done(self, request_id: str, sequences: Iterable[int]) -> None:
        """These slices are done (found in the job row): out of the watch, with no time to learn from."""
        with self._lock:
            job = self._jobs.get(request_id)
            if job is None:
                return
            for sequence in sequences:
                if (piece := job.slices.get(sequence)) is not None:
                    piece.back = True
            self._settle(request_id, job)

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._drop(request_id)

    # -- what the watcher asks -----------------------------------------------------------

    def needs_look(self) -> bool:
        """Is a look at the queues due: a slice out half its allowance not yet seen taken, or a late one?"""
        now = self.now()
        with self._lock:
            return any(self._looks_due(piece, allowance, now) for _, _, piece, allowance in self._hedgeable(now))

    def look(self, fronts: Mapping[str, datetime | None], looked_at: float) -> tuple[list[LateSlice], list[LateSlice]]:
        """A look that started at ``looked_at`` found, for each queue (by URL), when its oldest
        waiting message was put in (None: nothing waits). A slice sent before that message (by
        more than ``CLOCK_SKEW``) is no longer in its queue, which hands out its oldest first:
        it was taken, whatever waits behind it. Returns (late slices, slices told "backlog":
        due for a look, and told so for the first time, ``slice.not_hedged``)."""

        def may_wait(piece: _Slice) -> bool:
            front = fronts.get(piece.message.queue_uri)
            return front is not None and front <= piece.sent_at + CLOCK_SKEW

        now, late, withheld = self.now(), [], []
        with self._lock:
            for rid, job, piece, allowance in self._hedgeable(now):
                if may_wait(piece):  # it may still be waiting: the processors are busy, nobody straggles
                    if self._looks_due(piece, allowance, now) and not piece.withheld:
                        piece.withheld = True
                        withheld.append(LateSlice(rid, job.client_id, piece.message, now - piece.sent, allowance))
                    piece.since, piece.taken_by = now, None
                elif piece.taken_by is None:
                    if piece.since <= looked_at:  # not one dispatched during the look
                        piece.taken_by = looked_at
                elif now - piece.since >= allowance and now - piece.taken_by >= allowance / 2:
                    late.append(LateSlice(rid, job.client_id, piece.message, now - piece.sent, allowance))
        return late, withheld

    def overtaken_late(self) -> list[LateSlice]:
        """Slices a later slice overtook, late by their allowance and out half of it since:
        held by a paused or dead processor even while other messages wait (no look needed)."""
        now, late = self.now(), []
        with self._lock:
            for rid, job, piece, allowance in self._hedgeable(now):
                overtaken = piece.overtaken
                if overtaken is not None and now - piece.sent >= allowance and now - overtaken >= allowance / 2:
                    late.append(LateSlice(rid, job.client_id, piece.message, now - piece.sent, allowance))
        return late

    def hedged(self, request_id: str, sequence: int) -> None:
        """A slice was sent again: its clock restarts, and one hedge of its allowance is spent."""
        now = self.now()
        with self._lock:
            job = self._jobs.get(request_id)
            piece = job.slices.get(sequence) if job is not None else None
            if job is None or piece is None:
                return
            piece.hedges += 1
            piece.since, piece.taken_by, piece.withheld, piece.overtaken = now, None, False, None
            self._settle(request_id, job)

    def seconds_per_cell(self) -> float | None:
        with self._lock:
            return statistics.median(self._rates) if self._rates else None

    # -- inside the lock -----------------------------------------------------------------

    def _hedgeable(self, now: float) -> list[tuple[str, _Job, _Slice, float]]:
        """(request id, job, slice, allowance) of every slice out that may still be hedged."""
        found = []
        recent = statistics.median(self._rates) if self._rates else None
        for rid, job in self._jobs.items():
            siblings = [(piece.took, piece.cells) for piece in job.slices.values() if piece.took is not None]
            for piece in job.slices.values():
                if not piece.back and piece.hedges < self.hedges_per_slice:
                    allowance = late_after(piece.cells, siblings, recent, floor=self.floor, factor=self.factor)
                    found.append((rid, job, piece, allowance))
        return found

    @staticmethod
    def _looks_due(piece: _Slice, allowance: float, now: float) -> bool:
        if piece.taken_by is None:
            return now - piece.since >= allowance / 2
        return now - piece.since >= allowance and now - piece.taken_by >= allowance / 2

    def _settle(self, request_id: str, job: _Job) -> None:
        """Forget a job none of whose slices can be hedged any more (all back, or hedges spent)."""
        if all(p.back or p.hedges >= self.hedges_per_slice for p in job.slices.values()):
            self._drop(request_id)

    def _drop(self, request_id: str) -> None:
        job = self._jobs.pop(request_id, None)
        if job is not None:
            self._band_bytes -= job.band_bytes


class StragglerWatcher:
    """The controller's daemon thread that sends late slices again (see the module docstring).

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
            self._thread = threading.Thread(target=self._run, name="stragglers", daemon=True)
            self._thread.start()
            log.info(
                kv(
                    "stragglers.start",
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
                log.warning(kv("stragglers.check_failed", error=f"{type(exc).__name__}: {exc}"))

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
            if front is not None and now - front > STALE_WAIT:
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
