"""The retention sweep: finished jobs older than N days, and blobs whose job is gone.

``sweep`` does two passes, each over a full listing that follows continuation tokens:

1. **Expired jobs.** Job rows whose ``finished_at`` is older than ``retention_days`` (only
   finished jobs have one) get a ``JobCleanupMessage`` on ``jobcleanup``: the sweeper only
   *decides*, the responder deletes (``dal.operations.cleanup``), so a sweep that dies half-way loses
   nothing and a job is deleted the same crash-safe way whether a person or the sweep asks.
2. **Orphaned blobs.** Blobs of the four workflow containers whose request id has no job
   row (a cleanup that crashed before the queue existed, a job deleted by hand, an upload
   whose job row was never written) are deleted, once they are older than ``orphan_grace``:
   the web app stores the photo a moment *before* it writes the job row, and the grace keeps
   the sweep from racing a submission in flight.

One sweeper at a time: the sweep holds a 60-second lease on the blob
``operations/retention-sweep.lock`` and renews it as it goes; a second sweeper finds the
lease taken and returns at once (``SweepReport.skipped``). If the holder dies, the lease
expires after at most 60 s and the next sweep runs.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobLeaseClient

from dal.blobs.store import BlobStore
from dal.config import OPERATIONS_CONTAINER, WORKFLOW_CONTAINERS
from dal.jobs.model import INDEX_MARK
from dal.jobs.store import JobStore
from dal.names import prefixed
from dal.queues.message_fields import REQUEST_ID_PATTERN
from dal.queues.messages import JobCleanupMessage
from dal.queues.work_queue import ImageProcessingQueue

__all__ = ["DEFAULT_ORPHAN_GRACE", "DEFAULT_RETENTION_DAYS", "SweepReport", "sweep"]

log = logging.getLogger(__name__)

# A month: long enough to come back for a mosaic (a link shared on Friday still works weeks
# later), short enough that storage stays bounded: at about 10 MB per job (photo, bands,
# slices, output) and $0.02 per GB-month, each kept job costs $0.0002 a month.
DEFAULT_RETENTION_DAYS = 30
DEFAULT_ORPHAN_GRACE = timedelta(hours=1)
LOCK_CONTAINER = OPERATIONS_CONTAINER
LOCK_BLOB = "retention-sweep.lock"
_LEASE_SECONDS = 60
_RENEW_AFTER = 20.0
_REQUEST_ID = re.compile(f"^{REQUEST_ID_PATTERN}")


@dataclass
class SweepReport:
    skipped: bool = False  # another sweeper holds the lease
    jobs_expired: int = 0  # cleanups enqueued
    orphans_deleted: int = 0


class _Lease:
    """The sweeper's lease on the lock blob, renewed when a third of it is used."""

    def __init__(self, blobs: BlobStore) -> None:
        service = blobs.storage.blob_service
        container = service.get_container_client(prefixed(blobs.prefix, LOCK_CONTAINER))
        try:
            container.create_container()
        except ResourceExistsError:
            pass
        blob = container.get_blob_client(LOCK_BLOB)
        try:
            blob.upload_blob(b"", overwrite=False)
        except ResourceExistsError:
            pass
        self._client = BlobLeaseClient(blob)
        self._renewed = 0.0

    def acquire(self) -> bool:
        try:
            self._client.acquire(lease_duration=_LEASE_SECONDS)
        except HttpResponseError as exc:
            if exc.status_code == 409:  # LeaseAlreadyPresent: another sweeper is at work
                return False
            raise
        self._renewed = time.monotonic()
        return True

    def keep(self) -> None:
        if time.monotonic() - self._renewed >= _RENEW_AFTER:
            self._client.renew()
            self._renewed = time.monotonic()

    def release(self) -> None:
        try:
            self._client.release()
        except HttpResponseError:
            pass  # expired or lost: it lapses by itself


def sweep(
    blobs: BlobStore,
    jobs: JobStore,
    cleanup: ImageProcessingQueue,
    *,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE,
    now: datetime | None = None,
) -> SweepReport:
    """One sweep (see the module docstring); returns what it did."""
    if type(retention_days) is not int or retention_days < 1:
        raise ValueError(f"retention_days must be a whole number of days >= 1, got {retention_days!r}")
    now = now or datetime.now(UTC)
    lease = _Lease(blobs)
    if not lease.acquire():
        log.info("retention sweep skipped: another sweeper holds the lease")
        return SweepReport(skipped=True)
    report = SweepReport()
    try:
        table = jobs.storage.table_service.get_table_client(jobs.jobs_table)
        cutoff = now - timedelta(days=retention_days)
        expired = table.query_entities(
            "finished_at lt @cutoff", parameters={"cutoff": cutoff}, select=["PartitionKey", "RowKey"]
        )
        batch: list[JobCleanupMessage] = []
        for row in expired:  # the pager follows continuation tokens
            batch.append(
                JobCleanupMessage(queue_uri=cleanup.url, client_id=row["PartitionKey"], request_id=row["RowKey"])
            )
            if len(batch) == 100:
                cleanup.submit(batch)
                report.jobs_expired += len(batch)
                batch = []
                lease.keep()
        if batch:
            cleanup.submit(batch)
            report.jobs_expired += len(batch)

        live = {
            row["RowKey"]
            for row in table.query_entities("RowKey lt @mark", parameters={"mark": INDEX_MARK}, select=["RowKey"])
        }
        lease.keep()
        old = now - orphan_grace
        for logical in WORKFLOW_CONTAINERS:
            container = blobs.storage.blob_service.get_container_client(blobs.container_name(logical))
            doomed = []
            try:
                for props in container.list_blobs():  # follows continuation markers
                    match = _REQUEST_ID.match(props.name)
                    if match and match.group(0) not in live and props.last_modified < old:
                        doomed.append(props.name)
            except ResourceNotFoundError:
                continue
            for start in range(0, len(doomed), 256):
                responses = container.delete_blobs(*doomed[start : start + 256], raise_on_any_failure=False)
                report.orphans_deleted += sum(1 for r in responses if r.status_code in (200, 202))
                lease.keep()
    finally:
        lease.release()
    log.info(
        "retention sweep: %d expired job(s) queued for cleanup, %d orphaned blob(s) deleted",
        report.jobs_expired,
        report.orphans_deleted,
    )
    return report
