"""Hedged slices with real role processes on Azurite (``workers.controller.hedging``).

A processor SIGSTOPped while it holds a slice (a real child process, a lease of 300 s) no longer
holds its job up: the controller sends the slice again and the job finishes, pixel-identical,
while the processor is still stopped; resumed, its late copy changes nothing. A backlog is
never hedged: slices waiting in the queue behind a busy processor are withheld, said in the
log. No wall-clock asserts: the tests check which mechanism fired (the log lines, the counter,
the job's events) and bound their waits far below the lease.
"""

from __future__ import annotations

import os
import signal
import urllib.request
from pathlib import Path

import pytest

from photomosaics.commands.run import choose_port
from tests.support.metrics import samples, value_of
from tests.support.pipelines import Pipeline, assert_job_pixel_identical, log_lines
from tests.support.sliceable import PLAIN_TILE, plain_photo, unit_photo
from tests.support.waiting import wait_for
from workers.runtime.leases import LEASE_DIR_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Only a hedge can finish a job whose slice is held this long: the test waits far less.
LONG_LEASE = {"PHOTOMOSAICS_VISIBILITY_TIMEOUT": "300", "PHOTOMOSAICS_LEASE_SECONDS": "300"}


def _lines(path: Path, *needles: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if all(n in line for n in needles)]


def _state(pid: int) -> str:
    """The process state letter from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_paused_processors_slice_is_hedged_and_the_job_finishes_while_it_is_stopped(
    pipe: Pipeline, tmp_path: Path
) -> None:
    leases = tmp_path / "leases"
    env = {**LONG_LEASE, LEASE_DIR_ENV: str(leases)}
    port = choose_port("127.0.0.1", 0)
    controller = pipe.start("controller", env={**env, "PHOTOMOSAICS_METRICS_PORT": str(port)})
    # It takes one slice (a processor holds one at a time) and sleeps before rendering it: stopped
    # there, a moment after its lease journal appears (10 s leaves room on a loaded machine; once
    # resumed it sleeps out what is left of them, then sends its late copy).
    paused = pipe.start("processor", env={**env, "PHOTOMOSAICS_TEST_SLICE_DELAY": "10"})
    image = plain_photo(2, seed=21)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)
    journal = leases / f"{paused.pid}.json"
    wait_for(lambda: journal.exists() or None, seconds=60, what="the processor holds a slice", details=pipe.logs)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        pipe.start("processor", env=env)  # renders the other slice, then the hedged copy
        pipe.wait([rid], timeout=120)
        assert _state(paused.pid) == "T"  # done while the holder of a slice is still stopped
        assert_job_pixel_identical(pipe, rid, image, tile=PLAIN_TILE, slices=2)
        [hedged] = log_lines(pipe, "slice.hedged")
        assert f"request_id={rid}" in hedged, hedged
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert value_of(samples(response.read().decode()), "photomosaics_slices_hedged_total") == 1
        job = pipe.job(rid)
        assert job is not None
        output = pipe.output_bytes(job)
    finally:
        os.kill(paused.pid, signal.SIGCONT)

    # Resumed, it renders its copy, rewrites its slice blob (the same bytes) and answers: the
    # controller records nothing (the slice is done), and the job stays done, stitched once.
    done = f"request_id={rid}"
    wait_for(
        lambda: _lines(paused.log_path, "message.done", done) or None,
        seconds=90,
        what="the resumed processor's late copy",
        details=pipe.logs,
    )
    wait_for(
        lambda: len(_lines(controller.log_path, "message.done", "sliceresponse", done)) == 3 or None,
        seconds=60,
        what="three responses handled (two slices and the late copy)",
        details=pipe.logs,
    )
    kinds = [e.kind for e in pipe.services.jobs.events(rid)]
    assert (kinds.count("hedged"), kinds.count("stitched"), kinds.count("done")) == (1, 1, 1), kinds
    after = pipe.job(rid)
    assert after is not None and after.status == "done" and after.error is None
    assert after.finished_at == job.finished_at and pipe.output_bytes(after) == output
    assert_job_pixel_identical(pipe, rid, image, tile=PLAIN_TILE, slices=2)
    for needle in ("message.failed", "message.poisoned", "message.retry"):
        assert not [line for line in log_lines(pipe, needle) if done in line], needle


def test_slices_waiting_behind_a_busy_processor_are_not_hedged(pipe: Pipeline) -> None:
    # An eager watcher: without the backlog rule it would send the waiting slices again soon after
    # the first one came back (out 1.5 times as long as that one took, and seen taken meanwhile).
    eager = {"PHOTOMOSAICS_HEDGE_FLOOR_SECONDS": "0.5", "PHOTOMOSAICS_HEDGE_FACTOR": "1.5"}
    pipe.start("controller", env=eager)
    pipe.start("processor", env={"PHOTOMOSAICS_TEST_SLICE_DELAY": "1.5"})  # one slice at a time, 1.5 s each
    rid = pipe.submit(unit_photo(5, seed=22), library_uri=pipe.library_uri, tile_size=8, slices=5)
    pipe.wait([rid], timeout=120)
    withheld = [line for line in log_lines(pipe, "slice.not_hedged") if f"request_id={rid}" in line]
    assert withheld and all("why=backlog" in line for line in withheld), withheld  # the rule was asked, and held
    assert log_lines(pipe, "slice.hedged") == []
    assert "hedged" not in [e.kind for e in pipe.services.jobs.events(rid)]


def test_a_slice_queue_whose_oldest_message_waits_unclaimed_is_announced_again(
    pipe: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message that waits at the front of a slice queue was announced to a listener that
    cannot take it (paused with the slice prefetched), and its peers' credit was spent by that
    listener's taken notice: the watcher announces the queue again, so a peer receives it."""
    from datetime import timedelta

    from dal.hints.channel import LocalHintChannel, short_hint_dir
    from tests.support.junk import put_junk
    from workers.controller import slice_clock
    from workers.controller.hedging import Hedger

    channel = LocalHintChannel(short_hint_dir(tmp_path / "h"))
    queues = pipe.services.queues.slice_request_queues()
    for queue in queues:
        queue.hints = channel
    heard: list[int | None] = []
    subscription = channel.subscribe(queues[0].hint_name, lambda count, lane=None: heard.append(count))
    try:
        watcher = Hedger(pipe.services)
        watcher.reannounce(watcher.fronts())
        assert watcher.reannounced == 0 and heard == []  # nothing waits: nothing to say
        put_junk(queues[0])  # waiting, never announced
        monkeypatch.setattr(slice_clock, "STALE_WAIT", timedelta(hours=1))
        watcher.reannounce(watcher.fronts())
        assert watcher.reannounced == 0  # it has not waited long
        monkeypatch.setattr(slice_clock, "STALE_WAIT", timedelta(0))
        watcher.reannounce(watcher.fronts())
        assert watcher.reannounced == 1
        wait_for(lambda: heard or None)
        assert heard == [None]  # an unknown count: a listener receives until the queue is empty
    finally:
        subscription.close()
