"""The job rows a controller wrote last: the first guess of its next ETag write to each job."""

from __future__ import annotations

import threading
from collections import OrderedDict

from dal.jobs.model import TERMINAL_STATUSES, Job


class RecentRows:
    """The job rows this controller wrote last (with their ETags), the newest ``size`` jobs.

    Only a first guess for ``JobStore.update(current=...)``: the ETag decides, so a row another
    process changed meanwhile costs one 412 and a read, never a lost update. Thread-safe (the
    listener may run handlers in several threads).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._rows: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, client_id: str, request_id: str) -> Job | None:
        with self._lock:
            job = self._rows.get(request_id)
        return job if job is not None and job.client_id == client_id else None

    def remember(self, job: Job) -> None:
        with self._lock:
            if job.status in TERMINAL_STATUSES:
                self._rows.pop(job.request_id, None)
                return
            self._rows[job.request_id] = job
            self._rows.move_to_end(job.request_id)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._rows.pop(request_id, None)
