"""The retention sweep (``dal.operations.retention``, ``photomosaics retention``) against Azurite."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from dal.config import CONNECTION_STRING_ENV, IMAGE_INPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.operations.retention import _Lease, sweep
from dal.queues.messages import JobCleanupMessage
from photomosaics.cli import main
from tests.support.stored_jobs import CLIENT, leftovers, make_job, world  # noqa: F401 (a fixture)


def test_sweep_queues_expired_jobs_and_deletes_orphans_only(world: dict[str, Any]) -> None:
    blobs, jobs, queue = world["blobs"], world["jobs"], world["queues"].job_cleanup
    finished = make_job(blobs, jobs)
    running = make_job(blobs, jobs)
    jobs.update(CLIENT, running, lambda j: replace(j, status="rendering", finished_at=None))
    orphan = "00000000-0000-4000-8000-000000000001"
    blobs.upload(IMAGE_INPUT_CONTAINER, f"{orphan}.png", b"x", content_type="image/png")
    blobs.upload(SLICE_RESPONSE_CONTAINER, f"{orphan}/0.png", b"x", content_type="image/png")

    recent = sweep(blobs, jobs, queue, retention_days=30)  # nothing is old enough yet
    assert (recent.jobs_expired, recent.orphans_deleted) == (0, 0)

    later = datetime.now(UTC) + timedelta(days=31)
    report = sweep(blobs, jobs, queue, retention_days=30, now=later)

    assert (report.skipped, report.jobs_expired, report.orphans_deleted) == (False, 1, 2)
    (message,) = queue.accept_messages(32)
    assert isinstance(message.message, JobCleanupMessage) and message.message.request_id == finished
    assert list(blobs.list_names(IMAGE_INPUT_CONTAINER, orphan)) == []
    assert len(leftovers(blobs, jobs, running)) > 5 and len(leftovers(blobs, jobs, finished)) > 5


def test_one_sweeper_at_a_time(
    world: dict[str, Any],
    azurite_connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blobs, jobs, queue = world["blobs"], world["jobs"], world["queues"].job_cleanup
    holder = _Lease(blobs)
    assert holder.acquire()
    try:
        assert sweep(blobs, jobs, queue).skipped
        monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
        monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", blobs.prefix)
        busy = CliRunner().invoke(main, ["retention"], catch_exceptions=False)
        assert busy.exit_code == 0 and "another retention sweep is running" in busy.output
    finally:
        holder.release()
    done = CliRunner().invoke(main, ["retention", "--retention-days", "7"], catch_exceptions=False)
    assert done.exit_code == 0 and "older than 7 days queued for cleanup" in done.output, done.output
    assert CliRunner().invoke(main, ["retention", "--retention-days", "0"]).exit_code == 2
    for option in ("--retention-days", "--orphan-grace-minutes"):  # past a datetime's range: an OverflowError
        assert CliRunner().invoke(main, ["retention", option, "99999999999"]).exit_code == 2
