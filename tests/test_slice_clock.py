"""When a slice is late, and what the controller's slice clock remembers (``workers.controller.hedging``).

Pure: ``late_after`` is a function, and ``SliceClock`` is driven by a clock the test moves by
hand (``now``), so every case is exact and nothing waits. The pipeline behaviour (a paused
processor's slice hedged, a backlog left alone) is ``tests/test_hedged_slices.py``.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import pytest

from dal.queues.messages import SliceRequestMessage
from workers.controller.slice_clock import SliceClock, late_after

RID, OTHER = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"


# -- the rule -----------------------------------------------------------------------------


def test_a_slice_is_late_after_factor_times_its_siblings_median_scaled_to_its_cells() -> None:
    # Two siblings of 100 cells took 1 s and 1.2 s (the median: 0.011 s a cell); this band has 110.
    assert late_after(110, [(1.0, 100), (1.2, 100)], None, floor=2.0, factor=3.0) == pytest.approx(3 * 0.011 * 110)
    # The median, not the mean: one sibling that straggled itself does not raise the bar.
    assert late_after(100, [(1.0, 100), (1.1, 100), (50.0, 100)], None, floor=0.0, factor=3.0) == pytest.approx(3.3)


def test_the_floor_holds_for_fast_slices_and_the_factor_above_it() -> None:
    assert late_after(100, [(0.1, 100)], None, floor=2.0, factor=3.0) == 2.0
    assert late_after(100, [(1.0, 100)], None, floor=2.0, factor=3.0) == 3.0
    assert late_after(100, [(1.0, 100)], None, floor=2.0, factor=5.0) == 5.0


def test_without_siblings_the_recent_seconds_per_cell_decide_and_without_either_nothing_is_late() -> None:
    assert late_after(1_000, [], 0.002, floor=2.0, factor=3.0) == pytest.approx(6.0)  # a one-slice job
    assert late_after(1_000, [(5.0, 1_000)], 0.002, floor=2.0, factor=3.0) == 15.0  # siblings first
    assert late_after(1_000, [], None, floor=2.0, factor=3.0) == math.inf  # a fresh controller guesses nothing


# -- the clock ----------------------------------------------------------------------------


class Time:
    """The clock the slice clock reads; the test moves it."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def requests(rid: str, count: int, *, band: str | None = None) -> list[SliceRequestMessage]:
    return [
        SliceRequestMessage(
            queue_uri="http://127.0.0.1:10001/devstoreaccount1/slicerequest",
            client_id="tester",
            request_id=rid,
            image_library_uri="http://127.0.0.1:10000/devstoreaccount1/lib",
            slice_uri=f"http://127.0.0.1:10000/devstoreaccount1/slicerequest/{rid}/{seq}.png",
            slice_sequence=seq,
            tile_size=8,
            band=band,
        )
        for seq in range(count)
    ]


def clock(time: Time, **options: float) -> SliceClock:
    settings = {"floor": 2.0, "factor": 3.0, **options}
    return SliceClock(now=time, **settings)  # type: ignore[arg-type]


def late_seqs(slices: list) -> list[int]:  # type: ignore[type-arg]
    return [late.message.slice_sequence for late in slices]


QUEUE = requests(RID, 1)[0].queue_uri


def quiet(watch: SliceClock, looked_at: float) -> list:  # type: ignore[type-arg]
    """A look that started at ``looked_at`` found no message waiting: the late slices."""
    return watch.look({}, looked_at)[0]


def busy(watch: SliceClock) -> list:  # type: ignore[type-arg]
    """A look found a message waiting ahead of every slice: the slices told "backlog"."""
    return watch.look({QUEUE: datetime(2000, 1, 1, tzinfo=UTC)}, watch.now())[1]


def test_a_held_slice_is_looked_at_half_way_and_hedged_at_its_allowance() -> None:
    time = Time()
    watch = clock(time)
    watch.dispatched("tester", requests(RID, 2), {0: 100, 1: 100})
    time.t += 1.0
    watch.arrived(RID, 1)  # its sibling took 1 s: slice 0 is late after max(2, 3 x 1) = 3 s
    time.t += 0.4
    assert not watch.needs_look()  # out 1.4 s: not even worth a look (a look is a Peek)
    time.t += 0.1
    assert watch.needs_look()  # half its allowance
    assert quiet(watch, time.t) == []  # nothing waiting: it was taken by now; not late yet
    time.t += 1.4
    assert not watch.needs_look()
    time.t += 0.1
    assert watch.needs_look()
    [late] = quiet(watch, time.t)
    assert (late.message.slice_sequence, late.waited, late.allowance) == (0, pytest.approx(3.0), pytest.approx(3.0))
    watch.hedged(RID, 0)
    time.t += 1_000
    assert not watch.needs_look() and len(watch) == 0  # at most once; nothing left to watch


def test_a_backlog_restarts_every_clock_and_is_reported_once_per_slice() -> None:
    time = Time()
    watch = clock(time)
    watch.dispatched("tester", requests(RID, 3), {0: 100, 1: 100, 2: 100})
    time.t += 1.0
    watch.arrived(RID, 0)
    time.t += 0.5
    assert watch.needs_look()
    assert late_seqs(busy(watch)) == [1, 2]  # messages waiting: the processors are busy, nobody straggles
    assert not watch.needs_look()  # out since the look, as far as anyone knows
    time.t += 1.5
    assert late_seqs(busy(watch)) == []  # still busy: said once
    time.t += 3.0
    assert quiet(watch, time.t) == []  # the backlog drained: taken by now, and only now
    time.t += 1.4
    assert quiet(watch, time.t) == []  # late by its clock, but not out half an allowance since taken
    time.t += 0.1
    assert late_seqs(quiet(watch, time.t)) == [1, 2]


def test_a_slice_overtaken_by_a_later_one_is_hedged_even_while_messages_wait() -> None:
    """A queue hands out its oldest messages first: when a slice sent later to the same queue
    came back, an earlier one still out was taken, and is held, whatever waits behind it."""
    time = Time()
    watch = clock(time)
    watch.dispatched("tester", requests(RID, 2), {0: 100, 1: 100})
    time.t += 0.5
    watch.dispatched("tester", requests(OTHER, 1), {0: 100})
    time.t += 0.5
    watch.arrived(RID, 1)  # took 1 s: slice 0's allowance is max(2, 3 x 1) = 3 s
    watch.arrived(OTHER, 0)  # sent after slice 0, back before it: slice 0 was taken by now
    assert watch.overtaken_late() == []  # out 1 s
    time.t += 1.0
    busy(watch)  # a new job's slices wait in the queue: the clocks restart...
    time.t += 1.0
    [late] = watch.overtaken_late()  # ...but out 3 s, and 2 s (half its allowance) since overtaken
    assert (late.request_id, late.message.slice_sequence) == (RID, 0)
    watch.hedged(RID, 0)
    assert watch.overtaken_late() == []


def test_a_slice_is_not_overtaken_by_one_sent_with_it_or_to_another_queue() -> None:
    time = Time()
    watch = clock(time)
    watch.dispatched("tester", requests(RID, 2), {0: 100, 1: 100})
    time.t += 0.5
    elsewhere = [dataclasses.replace(m, queue_uri=m.queue_uri + "-1") for m in requests(OTHER, 1)]
    watch.dispatched("tester", elsewhere, {0: 100})
    time.t += 0.5
    watch.arrived(RID, 1)  # its sibling, sent at the same moment
    watch.arrived(OTHER, 0)  # later, but on another lane
    time.t += 10.0
    assert watch.overtaken_late() == []


def test_messages_waiting_behind_a_slice_do_not_hold_back_its_hedge() -> None:
    """A queue hands out its oldest messages first: a slice sent before the oldest message
    waiting in its queue was taken, however many wait behind it."""
    time, wall = Time(), [datetime(2026, 1, 1, tzinfo=UTC)]
    watch = SliceClock(floor=2.0, factor=3.0, now=time, wall=lambda: wall[0])
    queue = requests(RID, 1)[0].queue_uri
    watch.dispatched("tester", requests(RID, 2), {0: 100, 1: 100})
    time.t += 1.0
    watch.arrived(RID, 1)  # slice 0's allowance: 3 s
    time.t += 0.5
    waiting_since = {queue: wall[0] + timedelta(seconds=30)}  # a later job waits: not ahead of slice 0
    late, told = watch.look(waiting_since, looked_at=time.t)
    assert (late, told) == ([], [])  # taken by now, not late yet
    time.t += 1.5
    [late_one], told = watch.look(waiting_since, looked_at=time.t)
    assert late_one.message.slice_sequence == 0 and told == []
    watch.hedged(RID, 0)
    # The same wait with a message older than the slice (within the clock skew) is a backlog.
    watch.dispatched("tester", requests(OTHER, 2), {0: 100, 1: 100})
    time.t += 1.0
    watch.arrived(OTHER, 1)
    time.t += 0.5
    late, told = watch.look({queue: wall[0] + timedelta(seconds=1)}, looked_at=time.t)
    assert [(t.request_id, t.message.slice_sequence) for t in told] == [(OTHER, 0)]
    assert all(t.request_id != OTHER for t in late)


def test_a_slice_dispatched_during_a_look_is_not_taken_for_taken() -> None:
    time = Time()
    watch = clock(time)
    watch.dispatched("tester", requests(RID, 2), {0: 100, 1: 100})
    time.t += 1.0
    watch.arrived(RID, 1)
    time.t += 0.5
    looked_at = time.t
    time.t += 0.05
    watch.dispatched("tester", requests(OTHER, 1), {0: 100})  # while the Peek was on its way
    watch.arrived(OTHER, 0)  # (and back: it teaches the estimate)
    watch.dispatched("tester", requests(OTHER, 1), {0: 100})  # a redelivered request: watched afresh
    time.t += 0.1
    quiet(watch, looked_at)
    time.t += 10.0
    assert late_seqs(quiet(watch, time.t)) == [0]  # RID's slice; OTHER's was not seen taken yet


def test_a_one_slice_job_is_late_only_once_this_controller_has_seen_slices_come_back() -> None:
    time = Time()
    watch = clock(time)
    watch.dispatched("tester", requests(RID, 1), {0: 1_000})
    time.t += 1_000
    assert not watch.needs_look()  # no sibling, no history: the lease decides
    watch.arrived(RID, 0)
    assert len(watch) == 0 and watch.seconds_per_cell() == pytest.approx(1.0)
    watch.dispatched("tester", requests(OTHER, 1), {0: 1})
    time.t += 1.4
    assert not watch.needs_look()  # allowance max(2, 3 x 1 s a cell x 1 cell) = 3 s: a look at 1.5 s
    time.t += 0.1
    assert watch.needs_look()


def test_a_hedged_slice_teaches_nothing_and_done_slices_leave_the_watch() -> None:
    time = Time()
    watch = clock(time, hedges_per_slice=2)
    watch.dispatched("tester", requests(RID, 3), {0: 100, 1: 100, 2: 100})
    time.t += 1.0
    watch.arrived(RID, 2)
    time.t += 1.5
    quiet(watch, time.t)
    time.t += 1.5
    assert late_seqs(quiet(watch, time.t)) == [0, 1]
    watch.hedged(RID, 0)
    time.t += 100
    watch.arrived(RID, 0)  # 103 s out, as hedged: not what a slice takes
    assert watch.seconds_per_cell() == pytest.approx(0.01)
    watch.done(RID, {1})  # the job row says another controller recorded it
    assert len(watch) == 0


def test_memory_is_bounded_by_jobs_and_by_the_bands_kept_to_send_again() -> None:
    time = Time()
    watch = clock(time, max_jobs=2, max_band_bytes=100)
    rids = [f"00000000-0000-4000-8000-00000000001{i}" for i in range(3)]
    for rid in rids:
        watch.dispatched("tester", requests(rid, 1), {0: 1})
    assert len(watch) == 2  # the oldest went
    watch.dispatched("tester", requests(RID, 2, band="x" * 60), {0: 1, 1: 1})  # 120 bytes of inline bands
    assert len(watch) == 0  # alone over the budget: not watched at all
    off = clock(time, hedges_per_slice=0)
    off.dispatched("tester", requests(RID, 2), {0: 1, 1: 1})
    assert len(off) == 0


@pytest.mark.parametrize(("floor", "factor", "hedges"), [(-1.0, 3.0, 1), (2.0, 0.0, 1), (2.0, 3.0, -1)])
def test_settings_that_make_no_sense_are_refused(floor: float, factor: float, hedges: int) -> None:
    with pytest.raises(ValueError, match="hedging needs"):
        SliceClock(floor=floor, factor=factor, hedges_per_slice=hedges)
