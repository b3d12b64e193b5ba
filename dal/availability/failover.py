"""Send availability with a paired secondary account: backlog queues and writes that fail over.

Configured by ``PHOTOMOSAICS_SECONDARY_CONNECTION_STRING``; unset, nothing here is built and
every write goes to the primary exactly as before (zero extra transactions).

**What fails over.** A *write* whose primary attempt fails after the SDK's own retries with a
failure that means "the account is not there" (``primary_failed``: unreachable, or a 5xx that
is not ``ServerBusy``; ServerBusy means "wait", which ``dal.retry`` already does, never "fail
over"). Then:

- a message goes to one of ``backlog_count`` backlog queues ``backlog-<i>`` on the secondary,
  picked at random per send, in an envelope that keeps its destination queue and
  its payload unchanged: ``{"queue": "<full primary queue name>", "payload": "<message text>"}``;
- a blob (the uploaded photo, a band, a rendered slice) goes to the same container and name on
  the secondary. Blob URLs in messages are absolute, so the URL itself says which account holds
  the blob; every reader accepts both accounts (``download_url``), and a read by name falls back
  to the secondary when the primary has no such blob (``download``);
- a new job row (the web's ``POST /api/jobs``) goes to the secondary's ``jobs`` table, where the
  web finds it (``find_job``) and shows the job as waiting for storage to recover.

The failover interval is the retry budget of the caller's profile (``dal.config``): about 4 s
for the web app (a person is waiting) and about a minute for the worker roles (they ride out
short outages on the primary, where their work is). After a failover, this process writes
straight to the secondary for ``stay_on_secondary`` (60 s, the syphon's ping interval) instead of
spending the primary's retry budget on every write. A submission that has put one thing on the
secondary puts everything after it there too (``force_secondary``), so a job never has its row
on one account and its request on the other.

**What does not fail over.** Receives, deletes, job-state updates and reads of existing rows:
work is processed only on the primary (send availability, not processing availability). ``dal.operations.syphon`` moves the
backlog, its blobs and its job rows back once the primary answers.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

from dal.config import CLAIM_CHECK_CONTAINER, RetryProfile, StorageClients
from dal.errors import BlobMissingError, StorageConfigurationError
from dal.names import prefixed
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import QueueMessage
from dal.queues.stored_queue import StoredQueue

if TYPE_CHECKING:
    from dal.blobs.store import BlobStore
    from dal.config import Settings
    from dal.jobs.model import Job, JobEvent
    from dal.jobs.store import JobStore

__all__ = [
    "BACKLOG_PREFIX",
    "DEFAULT_BACKLOG_COUNT",
    "DEFAULT_STAY_ON_SECONDARY",
    "SECONDARY_CONNECTION_STRING_ENV",
    "FailoverSender",
    "FailoverState",
    "PairedAccount",
    "backlog_envelope",
    "backlog_queues",
    "parse_backlog_envelope",
    "primary_failed",
    "secondary_from_env",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

SECONDARY_CONNECTION_STRING_ENV = "PHOTOMOSAICS_SECONDARY_CONNECTION_STRING"
BACKLOG_PREFIX = "backlog"
DEFAULT_BACKLOG_COUNT = 3  # senders spread over a few backlog queues
# After a failover, writes go straight to the secondary this long (the syphon pings once a minute):
# without it every write would first spend the primary's whole retry budget.
DEFAULT_STAY_ON_SECONDARY = 60.0  # = Settings.failover_stay_seconds (PHOTOMOSAICS_FAILOVER_STAY_SECONDS)


def secondary_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    profile: RetryProfile = "worker",
    response_hook: Callable[[Any], None] | None = None,
) -> StorageClients | None:
    """The secondary account's clients, or None when ``PHOTOMOSAICS_SECONDARY_CONNECTION_STRING`` is unset."""
    value = (os.environ if environ is None else environ).get(SECONDARY_CONNECTION_STRING_ENV, "").strip()
    return StorageClients(value, profile=profile, response_hook=response_hook) if value else None


def primary_failed(exc: BaseException) -> bool:
    """True for a failure that warrants the secondary: unreachable, or a 5xx other than ServerBusy.

    A ``ServiceResponseError`` (the connection broke after the request went out) counts too:
    the primary may then hold the message as well, a duplicate the idempotent handlers absorb.
    """
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        code = getattr(exc, "error_code", None) or ""
        server_busy = status == 503 and code in ("ServerBusy", "")
        return status >= 500 and not server_busy
    cause = exc.__cause__  # e.g. BlobMissingError raised from the SDK's error
    return cause is not None and cause is not exc and primary_failed(cause)


def backlog_queues(storage: StorageClients, prefix: str, count: int) -> list[StoredQueue]:
    claim_container = prefixed(prefix, CLAIM_CHECK_CONTAINER)
    return [
        StoredQueue(storage, prefixed(prefix, f"{BACKLOG_PREFIX}-{i}"), claim_container=claim_container)
        for i in range(count)
    ]


def backlog_envelope(queue_name: str, payload: str) -> str:
    """What a backlog queue holds: the destination queue (full name) and the payload, unchanged."""
    return json.dumps({"queue": queue_name, "payload": payload})


def parse_backlog_envelope(text: str) -> tuple[str, str]:
    """``(queue name, payload)`` of a backlog envelope; ValueError if it is not one."""
    try:
        envelope = json.loads(text)
        queue, payload = envelope["queue"], envelope["payload"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a backlog envelope: {exc}") from None
    if not isinstance(queue, str) or not isinstance(payload, str):
        raise ValueError("not a backlog envelope: queue and payload must be text")
    return queue, payload


class Stores(Protocol):
    """What this module needs of a ``dal.stores.Stores`` (which builds on this module)."""

    storage: StorageClients
    settings: Settings

    @property
    def blobs(self) -> BlobStore: ...
    @property
    def jobs(self) -> JobStore: ...
    @property
    def queues(self) -> QueueAccessor: ...


@dataclass
class FailoverState:
    """Whether this process takes the primary for down; shared by all of a process's writes."""

    stay_on_secondary: float = DEFAULT_STAY_ON_SECONDARY
    failovers: int = 0  # writes that went to the secondary
    _down_until: float = 0.0

    def primary_down(self) -> bool:
        return time.monotonic() < self._down_until

    def mark_down(self) -> None:
        self._down_until = time.monotonic() + self.stay_on_secondary

    def attempt(
        self, on_primary: Callable[[], T], on_secondary: Callable[[], T], *, what: str, force_secondary: bool = False
    ) -> tuple[T, bool]:
        """``(result, True if it was written on the secondary)``; the primary first unless known down."""
        if not force_secondary and not self.primary_down():
            try:
                return on_primary(), False
            except Exception as exc:
                if not primary_failed(exc):
                    raise
                log.warning("primary storage failed on %s (%s); writing to the secondary account", what, exc)
                self.mark_down()
        result = on_secondary()
        self.failovers += 1
        return result, True


@dataclass
class FailoverSender:
    """Sends to the primary; on a primary failure, to a random backlog queue on the secondary."""

    primary: QueueAccessor
    secondary: StorageClients | None
    backlog_count: int = DEFAULT_BACKLOG_COUNT
    stay_on_secondary: float = DEFAULT_STAY_ON_SECONDARY
    state: FailoverState | None = None
    _backlogs: list[StoredQueue] = field(default_factory=list, repr=False)
    _created: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.state is None:
            self.state = FailoverState(self.stay_on_secondary)

    @property
    def failovers(self) -> int:
        assert self.state is not None
        return self.state.failovers

    def submit(self, messages: QueueMessage | Sequence[QueueMessage], *, force_secondary: bool = False) -> str:
        """Send messages of one queue; returns ``"primary"`` or ``"secondary"`` (where they were written).

        A batch whose primary send failed half-way is parked whole: the messages that did reach
        the primary arrive twice, which the idempotent handlers absorb.
        """
        batch = [messages] if isinstance(messages, QueueMessage) else list(messages)
        if not batch:
            return "primary"
        queue = self.primary.for_message(batch[0])
        if self.secondary is None:
            queue.submit(batch)
            return "primary"
        assert self.state is not None

        def park() -> None:
            backlogs = self._backlog()
            for message in batch:
                self.primary.for_message(message)  # the same checks as a primary send
                random.choice(backlogs).put_text(backlog_envelope(queue.name, message.payload()))

        _, parked = self.state.attempt(
            lambda: queue.submit(batch), park, what=f"send to {queue.name}", force_secondary=force_secondary
        )
        return "secondary" if parked else "primary"

    def _backlog(self) -> list[StoredQueue]:
        assert self.secondary is not None
        with self._lock:
            if not self._backlogs:
                self._backlogs = backlog_queues(self.secondary, self.primary.prefix, self.backlog_count)
            if not self._created:
                for q in self._backlogs:
                    q.create()  # only ever on a failover: a healthy primary costs the secondary nothing
                self._created = True
        return self._backlogs


class PairedAccount:
    """The writes of one process that fail over to the secondary, and the reads that follow them.

    ``primary`` is the process's own ``Stores``, ``secondary`` the same stores (same settings and
    names) on the paired account. Built by ``Stores.failover`` only when a secondary is configured.
    """

    def __init__(
        self,
        primary: Stores,
        secondary: Stores,
        *,
        backlog_count: int = DEFAULT_BACKLOG_COUNT,
        stay_on_secondary: float = DEFAULT_STAY_ON_SECONDARY,
    ) -> None:
        self.primary = primary
        self.secondary = secondary
        self.state = FailoverState(stay_on_secondary)
        self.sender = FailoverSender(primary.queues, secondary.storage, backlog_count=backlog_count, state=self.state)
        self._ready = False
        self._lock = threading.Lock()

    def _secondary_ready(self) -> Stores:
        """The secondary's containers and tables, created on the first failover (never while healthy)."""
        if not self._ready:
            with self._lock:
                if not self._ready:
                    self.secondary.blobs.ensure_containers()
                    self.secondary.jobs.ensure_tables()
                    self._ready = True
        return self.secondary

    # --- writes that fail over -------------------------------------------------------------

    def send(self, messages: QueueMessage | Sequence[QueueMessage], *, force_secondary: bool = False) -> str:
        return self.sender.submit(messages, force_secondary=force_secondary)

    def upload(
        self,
        container: str,
        name: str,
        data: bytes,
        *,
        content_type: str,
        force_secondary: bool = False,
        keep_existing: bool = False,
    ) -> tuple[str, bool]:
        """``(blob URL, on the secondary?)``: the URL is that of the account that holds the blob.
        ``keep_existing``: written only where it does not exist yet (``BlobStore.upload``)."""
        return self.state.attempt(
            lambda: self.primary.blobs.upload(
                container, name, data, content_type=content_type, keep_existing=keep_existing
            ),
            lambda: self._secondary_ready().blobs.upload(
                container, name, data, content_type=content_type, keep_existing=keep_existing
            ),
            what=f"upload of {container}/{name}",
            force_secondary=force_secondary,
        )

    def create_job(self, job: Job, *, force_secondary: bool = False) -> bool:
        """Store a new job row; True if it went to the secondary (the job then waits for the primary)."""
        _, on_secondary = self.state.attempt(
            lambda: self.primary.jobs.create(job),
            lambda: self._secondary_ready().jobs.create(job),
            what=f"job {job.request_id}",
            force_secondary=force_secondary,
        )
        return on_secondary

    def ask_primary(self, call: Callable[[], T], default: T) -> T:
        """``call()`` on the primary, or ``default`` when the primary is down (known, or found now)."""
        if self.state.primary_down():
            return default
        try:
            return call()
        except Exception as exc:
            if not primary_failed(exc):
                raise
            log.warning("primary storage failed (%s); going on without it", exc)
            self.state.mark_down()
            return default

    # --- reads that follow them -------------------------------------------------------------

    def download_url(self, url: str) -> bytes:
        """A blob by absolute URL, of either account."""
        try:
            self.primary.blobs.parse_blob_url(url)
        except ValueError:
            return self.secondary.blobs.download_url(url)  # not ours: the secondary's (or ValueError)
        return self.primary.blobs.download_url(url)

    def download(self, container: str, name: str) -> bytes:
        """A blob by name: the primary's, else the secondary's (written there during an outage)."""
        try:
            return self.primary.blobs.download(container, name)
        except BlobMissingError:
            try:
                return self.secondary.blobs.download(container, name)
            except BlobMissingError:
                pass
            raise

    def find_job(self, client_id: str, request_id: str) -> tuple[Job | None, bool]:
        """``(job, on the secondary?)``: the primary's row, else the one written to the secondary.

        While the primary is known down the secondary is asked first (a job submitted during the
        outage is there); a job only the unreachable primary holds raises the primary's error.
        """
        if self.state.primary_down():
            job = self._secondary_job(client_id, request_id)
            if job is not None:
                return job, True
        try:
            job = self.primary.jobs.get(client_id, request_id)
        except Exception as exc:
            if not primary_failed(exc):
                raise
            self.state.mark_down()
            job = self._secondary_job(client_id, request_id)
            if job is None:
                raise
            return job, True
        if job is not None:
            return job, False
        job = self._secondary_job(client_id, request_id)
        return job, job is not None

    def _secondary_job(self, client_id: str, request_id: str) -> Job | None:
        return self._from_secondary(lambda: self.secondary.jobs.get(client_id, request_id), None)

    def _from_secondary(self, call: Callable[[], T], default: T) -> T:
        """A read of the secondary; ``default`` when it has no table yet or cannot be reached
        (a sick secondary must not break what the healthy primary serves)."""
        try:
            return call()
        except StorageConfigurationError:
            return default  # no table: nothing ever failed over to this secondary
        except Exception as exc:
            if not primary_failed(exc):
                raise
            log.warning("secondary storage unreachable on a read (%s)", exc)
            return default

    def secondary_jobs(self, client_id: str, limit: int) -> list[Job]:
        """The client's newest jobs that wait on the secondary (for the first page of a job list)."""
        return self._from_secondary(lambda: self.secondary.jobs.list_for_client(client_id, limit=limit)[0], [])

    def events(self, request_id: str, *, on_secondary: bool, job: Job | None = None) -> list[JobEvent]:
        """The job's events where its row is; with the ``job`` row, its slices' lines too."""
        return (self.secondary if on_secondary else self.primary).jobs.events(request_id, job=job)
