"""Failures reach the user: a job whose message cannot succeed ends ``failed`` with a reason.

Three ways a job can fail, one place that records it:

- a handler raises ``PermanentJobError`` (undecodable image, missing library, more slices
  than rows): the job is failed at once and the listener moves the message to poison;
- a handler keeps failing with another error: on the delivery that reaches the poison
  threshold the listener moves the message to poison and calls ``on_poison``
  (``poison_hook``), so the job never waits forever for a message that was moved aside.

``fail_job`` is idempotent and never overwrites a finished job (a late poison of a duplicate
message must not turn a delivered mosaic into a failure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from dal.job_model import JobStatus, library_name
from dal.jobs import TERMINAL_STATUSES, Job, JobNotFoundError, JobStore
from dal.messages import ImageRequestMessage, QueueMessage
from dal.queues import ReceivedMessage
from workers.errors import PermanentJobError

__all__ = ["fail_job", "guard", "library_name", "poison_hook"]

log = logging.getLogger(__name__)

Handler = Callable[[ReceivedMessage], None]


def fail_job(jobs: JobStore, message: QueueMessage, reason: str, *, actor: str) -> None:
    """Mark the message's job failed with ``reason`` (created if absent, for CLI producers)."""

    def change(job: Job) -> Job | None:
        return None if job.status in TERMINAL_STATUSES else replace(job, status=JobStatus.FAILED, error=reason)

    try:
        _, wrote = jobs.apply(message.client_id, message.request_id, change)
    except JobNotFoundError:
        if not isinstance(message, ImageRequestMessage):
            log.warning("job %s: failed (%s) but has no job row", message.request_id, reason)
            return
        wrote = True
        input_name = PurePosixPath(urlsplit(message.image_uri).path).name
        jobs.create(Job.for_request(message, status=JobStatus.FAILED, input_name=input_name, error=reason))
    if wrote:
        jobs.add_event(message.request_id, "failed", actor=actor, message=reason)
        log.warning("job %s failed: %s", message.request_id, reason)


def guard(handler: Handler, *, jobs: JobStore, actor: str) -> Handler:
    """Wrap a handler so that a ``PermanentJobError`` fails its job with the error's own reason."""

    def guarded(received: ReceivedMessage) -> None:
        try:
            handler(received)
        except PermanentJobError as exc:
            fail_job(jobs, received.message, exc.reason, actor=actor)
            raise

    return guarded


def poison_hook(jobs: JobStore, *, actor: str, what: str) -> Callable[[ReceivedMessage, str], None]:
    """An ``on_poison(received, reason)`` callback for the listener: the job fails with the reason."""

    def on_poison(received: ReceivedMessage, reason: str) -> None:
        fail_job(jobs, received.message, f"{what} could not be completed: {reason}", actor=actor)

    return on_poison
