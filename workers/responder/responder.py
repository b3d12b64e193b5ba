"""The responder: consumes ``imageresponse`` and marks the job done, if it is not already.

The controller marks a job done itself, in the write that records its outputs (no queue hop
between a stored mosaic and the person waiting for it), and its ImageResponse says so
(``job_done``): the responder then neither reads nor writes the row. A response without it
(the stitcher could not mark the job done) is finished here.

Its own role (``photomosaics responder``) rather than a thread inside the web app: the web
app stays stateless request/response (gunicorn workers can be recycled at any moment), and
adding web replicas does not multiply queue pollers — and their idle transactions. The
browser learns of completion by reading the job row, which is the single source of truth.
Idempotent: a duplicate response finds the job done and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from dal.errors import JobNotFoundError
from dal.jobs.model import TERMINAL_STATUSES, Job, JobStatus
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import ImageResponseMessage
from workers.runtime.bindings import consumes
from workers.services import RoleServices

__all__ = ["Responder"]

log = logging.getLogger(__name__)


class Responder:
    """Handler for ``imageresponse``."""

    def __init__(self, services: RoleServices) -> None:
        self.services = services
        self.name = services.name

    @consumes(lambda queues: queues.image_response, what="finishing the job")
    def handle_image_response(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, ImageResponseMessage), message
        rid = message.request_id
        output = unquote(PurePosixPath(urlsplit(message.image_uri).path).name)

        def finish(job: Job) -> Job | None:
            if job.status in TERMINAL_STATUSES:
                return None
            return replace(job, status=JobStatus.DONE, output_name=job.output_name or output)

        if message.job_done:  # its stitcher finished it in its output write: nothing to read or write
            log.info("job %s done by its stitcher", rid)
            return
        try:
            job, wrote = self.services.jobs.update(message.client_id, rid, finish)
        except JobNotFoundError:
            log.warning("response for unknown job %s ignored (deleted?)", rid)
            return
        if wrote:
            self.services.jobs.add_event(
                rid, "done", actor=self.name, message=f"mosaic ready: {job.output_width}x{job.output_height} px"
            )
            log.info("job %s done", rid)
