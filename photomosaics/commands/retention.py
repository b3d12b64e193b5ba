"""``photomosaics retention``: one retention sweep (``dal.operations.retention``), for cron or a CronJob.

Finished jobs older than ``--retention-days`` (``PHOTOMOSAICS_RETENTION_DAYS``, default 30)
are queued for cleanup on ``jobcleanup`` (the responder deletes them), and blobs whose job
row is gone are deleted once older than ``--orphan-grace-minutes``. Only one sweep runs at
a time (a blob lease); a second one says so and exits 0.
"""

from __future__ import annotations

from datetime import timedelta

import click

from dal.operations.retention import DEFAULT_ORPHAN_GRACE, DEFAULT_RETENTION_DAYS
from photomosaics.storage import DATA_DIR_OPTION, command_stores

MAX_DAYS = 36_500  # a century: a datetime cannot go much further back (10**11 days was an OverflowError)


@click.command()
@click.option(
    "--retention-days",
    type=click.IntRange(1, MAX_DAYS),
    default=DEFAULT_RETENTION_DAYS,
    show_default=True,
    envvar="PHOTOMOSAICS_RETENTION_DAYS",
    help="Delete finished jobs older than this many days.",
)
@click.option(
    "--orphan-grace-minutes",
    type=click.IntRange(1, MAX_DAYS * 24 * 60),
    default=int(DEFAULT_ORPHAN_GRACE.total_seconds() // 60),
    show_default=True,
    help="Delete a blob without a job only when it is older than this.",
)
@DATA_DIR_OPTION
def retention(retention_days: int, orphan_grace_minutes: int, data_dir: str | None) -> None:
    """Sweep once: expire old finished jobs and delete orphaned blobs."""
    from dal.operations.retention import sweep

    with command_stores(data_dir) as stores:
        stores.queues.job_cleanup.ensure_exists()
        report = sweep(
            stores.blobs,
            stores.jobs,
            stores.queues.job_cleanup,
            retention_days=retention_days,
            orphan_grace=timedelta(minutes=orphan_grace_minutes),
        )
    if report.skipped:
        click.echo("another retention sweep is running; nothing done")
        return
    click.echo(
        f"{report.jobs_expired} job(s) older than {retention_days} days queued for cleanup; "
        f"{report.orphans_deleted} orphaned blob(s) deleted"
    )
