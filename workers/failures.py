"""Failures reach the user: a job whose message cannot succeed ends ``failed`` with a reason.

A job's work fails in one place (its owner's cancel is the web app's, ``webapp.api_jobs``): the
listener's ``on_poison`` hook (``poison_hook``), called once the message has been moved to its
poison queue, whatever moved it there:

- a handler raised ``PermanentJobError`` (undecodable image, missing library, more slices
  than rows): poison at once; the job's error is the exception's own reason (``permanent``);
- a handler kept failing with another error: on the delivery that reaches the poison
  threshold the listener moves the message aside, and the job's error says what could not
  be completed and why;
- a worker died on the message again and again: ``accept_messages`` moves it aside at
  receive time and calls the same hook.

``fail_job`` is idempotent and never overwrites a finished job (a late poison of a duplicate
message must not turn a delivered mosaic into a failure); it logs the ``failed`` event only
when this call made the change, so a job's event log holds one ``failed`` event.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from dal.errors import JobNotFoundError
from dal.jobs.model import TERMINAL_STATUSES, Job, JobStatus
from dal.jobs.store import JobStore
from dal.queues.consumable import PoisonHook, ReceivedMessage
from dal.queues.messages import ImageRequestMessage, QueueMessage

__all__ = ["fail_job", "poison_hook"]

log = logging.getLogger(__name__)


def fail_job(jobs: JobStore, message: QueueMessage, reason: str, *, actor: str) -> None:
    """Mark the message's job failed with ``reason`` (created if absent, for CLI producers)."""

    def change(job: Job) -> Job | None:
        return None if job.status in TERMINAL_STATUSES else replace(job, status=JobStatus.FAILED, error=reason)

    try:
        _, wrote = jobs.update(message.client_id, message.request_id, change)
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


def client_reason(reason: str) -> str:
    """What a client is told of an internal failure: how it ended ("failed 5 times"), not the
    exception's text (a path, an address, a library's internals), which goes to the log."""
    return reason.split("; last error:", 1)[0].strip() or "an internal error"


def poison_hook(jobs: JobStore, *, actor: str, what: str) -> PoisonHook:
    """The listener's ``on_poison``: the message's job fails, once, with a reason for a person.

    ``what`` names the work for a reason that is not the handler's own ("rendering a slice
    could not be completed: failed 5 times"; the last error is logged, not shown); a permanent
    error's reason is already a sentence for the user and is kept as it is.
    """

    def on_poison(received: ReceivedMessage, reason: str, *, permanent: bool = False) -> None:
        text = reason if permanent else f"{what} could not be completed: {client_reason(reason)}"
        if text != reason:
            log.warning("job %s: %s (%s)", received.message.request_id, text, reason)
        fail_job(jobs, received.message, text, actor=actor)

    return on_poison
