"""Deleting a job everywhere, through a queue: consistency across blobs and tables.

A job lives in four containers (``imageinput/<id>.*``, ``slicerequest/<id>/``,
``sliceresponse/<id>/``, ``imageoutput/<id>.*``) and two tables (the
job row with its index entity, and the events). No transaction spans them, so deletion is a
queued, idempotent job of its own: ``request_cleanup`` puts a ``JobCleanupMessage`` on
``jobcleanup`` *before* anything is deleted (the durable intent), and ``delete_job_everywhere``
does the work. Every step deletes by name prefix, never from what an earlier step read, and
the job row goes last, so a crash at any point leaves a state from which redelivery of the
message finishes the job: at-least-once delivery, idempotent steps, nothing left behind.
Every listing (blobs, events) follows continuation tokens through the SDK's pagers.

``after_step`` is a test hook to inject a crash between steps (a fault Azurite cannot
produce on demand).

A tile library is deleted the same way: ``request_library_cleanup`` queues a
``LibraryCleanupMessage`` on the same queue, and ``delete_library_everywhere`` deletes the
library's container (tiles, index and marks go with it) only while the library still belongs
to the message's client: a redelivery after someone else created a library of that name
deletes nothing of theirs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from dal.blobs.libraries import LibraryStore
from dal.blobs.names import job_file_prefix, job_folder_prefix
from dal.blobs.store import BlobStore
from dal.config import (
    IMAGE_INPUT_CONTAINER,
    IMAGE_OUTPUT_CONTAINER,
    SLICE_REQUEST_CONTAINER,
    SLICE_RESPONSE_CONTAINER,
)
from dal.errors import BlobMissingError
from dal.jobs.model import validate_key
from dal.jobs.store import JobStore
from dal.queues.messages import JobCleanupMessage, LibraryCleanupMessage
from dal.queues.work_queue import ImageProcessingQueue

__all__ = [
    "CLEANUP_STEPS",
    "CleanupReport",
    "delete_bands",
    "delete_job_everywhere",
    "delete_library_everywhere",
    "request_cleanup",
    "request_library_cleanup",
]

log = logging.getLogger(__name__)

# (step name, container, blob name prefix given the request id), in deletion order.
_BLOB_STEPS: tuple[tuple[str, str, Callable[[str], str]], ...] = (
    ("photo", IMAGE_INPUT_CONTAINER, job_file_prefix),
    ("bands", SLICE_REQUEST_CONTAINER, job_folder_prefix),
    ("slices_and_claim", SLICE_RESPONSE_CONTAINER, job_folder_prefix),
    ("output", IMAGE_OUTPUT_CONTAINER, job_file_prefix),
)
CLEANUP_STEPS = (*(name for name, _, _ in _BLOB_STEPS), "rows")


@dataclass
class CleanupReport:
    blobs_deleted: int = 0
    job_existed: bool = False


def request_cleanup(queue: ImageProcessingQueue, client_id: str, request_id: str) -> None:
    """Enqueue the durable intent to delete a job (the ``jobcleanup`` handler does it)."""
    queue.submit(JobCleanupMessage(queue_uri=queue.url, client_id=client_id, request_id=request_id))


def delete_bands(blobs: BlobStore, request_id: str) -> int:
    """Delete a job's bands (``slicerequest/<request_id>/``), the "bands" step alone: what a cancel
    takes away so that its queued slices render nothing; how many were deleted."""
    try:
        return blobs.delete_prefix(SLICE_REQUEST_CONTAINER, job_folder_prefix(request_id))
    except BlobMissingError:
        return 0  # the container itself is gone: no band of this job in it


def delete_job_everywhere(
    blobs: BlobStore,
    jobs: JobStore,
    client_id: str,
    request_id: str,
    *,
    after_step: Callable[[str], None] | None = None,
) -> CleanupReport:
    """Delete the job's blobs, claim, events and rows; safe to run again after any crash."""
    validate_key("client_id", client_id)
    validate_key("request_id", request_id)
    report = CleanupReport()
    for step, container, prefix in _BLOB_STEPS:
        try:
            report.blobs_deleted += blobs.delete_prefix(container, prefix(request_id))
        except BlobMissingError:
            pass  # the container itself is gone: nothing of this job in it
        if after_step is not None:
            after_step(step)
    report.job_existed = jobs.get(client_id, request_id) is not None
    jobs.delete(client_id, request_id)  # events first, then job row + index in one transaction
    if after_step is not None:
        after_step("rows")
    log.info("job %s deleted everywhere (%d blobs)", request_id, report.blobs_deleted)
    return report


def request_library_cleanup(queue: ImageProcessingQueue, client_id: str, name: str) -> None:
    """Enqueue the durable intent to delete ``client_id``'s library ``name``."""
    message = LibraryCleanupMessage(
        queue_uri=queue.url, client_id=client_id, request_id=str(uuid.uuid4()), library=name
    )
    queue.submit(message)


def delete_library_everywhere(libraries: LibraryStore, client_id: str, name: str) -> bool:
    """Delete the library if it is still ``client_id``'s; True when something was deleted."""
    info = libraries.info(name)
    if info is None:
        libraries.delete(name)  # a half-deleted or unmarked container of that name: nothing to keep
        return False
    if info.owner != client_id:
        log.warning("library %s belongs to another client now; the cleanup deletes nothing", name)
        return False
    deleted = libraries.delete(name)
    log.info("library %s deleted", name)
    return deleted
