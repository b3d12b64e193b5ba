"""Handler for ``jobcleanup``: delete a job's blobs and rows, or a client's tile library (``dal.operations.cleanup``).

It runs in the responder role: like the responder it does short storage-only work on the
web side of the workflow, and a separate role would add one more idle poller for a queue
that is nearly always empty. The work is idempotent, so a redelivered message (the role
was killed mid-way) simply finishes what the first delivery started; a cleanup of a job
that is already gone deletes nothing and succeeds.
"""

from __future__ import annotations

import logging

from dal.operations.cleanup import delete_job_everywhere, delete_library_everywhere
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import JobCleanupMessage, LibraryCleanupMessage
from workers.runtime.bindings import consumes
from workers.services import RoleServices

__all__ = ["JobCleaner"]

log = logging.getLogger(__name__)


class JobCleaner:
    def __init__(self, services: RoleServices) -> None:
        self.services = services

    @consumes(lambda queues: queues.job_cleanup, what=None)  # not a job's work: no job to fail
    def handle_job_cleanup(self, received: ReceivedMessage) -> None:
        message = received.message
        if isinstance(message, LibraryCleanupMessage):
            delete_library_everywhere(self.services.libraries, message.client_id, message.library)
            return
        assert isinstance(message, JobCleanupMessage), message
        delete_job_everywhere(self.services.blobs, self.services.jobs, message.client_id, message.request_id)
