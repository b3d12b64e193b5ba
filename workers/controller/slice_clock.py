"""When a dispatched slice is late: the controller's ``SliceClock`` (``workers.controller.hedging`` sends it again).

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

**Overtaken.** A queue hands out its oldest messages first, so when a slice sent later to
the same queue comes back while an earlier one is still out, the earlier one was taken and
is held (``overtaken``). Such a slice is hedged once it is late by its clock and has stayed
out half its allowance since it was overtaken, even while other messages wait: under a
steady stream of jobs the queues are rarely empty at the moment of a look, and a paused
processor's slice would otherwise wait for its lease.

**Bounded memory.** Only the jobs this controller dispatched are watched (a job dispatched
by another controller is not), at most ``MAX_JOBS`` and ``MAX_BAND_BYTES`` of inline bands
(the message is kept, to be sent again), the oldest forgotten first. A job is forgotten when
all its slices came back, when it ended, or when none of its slices can be hedged any more.

"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dal.queues.messages import SliceRequestMessage

__all__ = ["CLOCK_SKEW", "MAX_BAND_BYTES", "MAX_JOBS", "STALE_WAIT", "LateSlice", "SliceClock", "late_after"]

MAX_JOBS = 512
MAX_BAND_BYTES = 16 * 1024 * 1024  # inline bands kept to be sent again (at most 32 KiB each)
_RECENT = 64  # slices behind the seconds-per-cell estimate
# How far the storage service's clock (a message's insertion time) may be from ours: a slice
# sent this much before the oldest waiting message is taken for taken.
CLOCK_SKEW = timedelta(seconds=2)
# A message waiting this long at the front of a slice queue (clock skew included) is not being
# taken: the watcher announces the queue again (``Hedger.reannounce``).
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
