"""The syphon: moves what failed over to the secondary account back to the primary.

``Syphon.run_once`` pings the primary (one cheap call with the ``probe`` profile, so a dead
primary is reported in about a second, not after the worker's minute of retries). Once it
answers, the syphon lists the secondary's backlog queues (one call; none exist until something
failed over) and drains each. For every backlog envelope (``dal.availability.failover``), in this order:

1. the blobs the message refers to that live on the secondary (its absolute ``*_uri`` fields:
   the photo, a band, a rendered slice) are copied to the same container and name on the
   primary, and the message is rewritten to point there;
2. for an ``ImageRequest``, the job row written to the secondary by ``POST /api/jobs`` is copied
   to the primary with its events (``JobStore.copy_to``: kept as it is if the primary has it)
   and deleted from the secondary;
3. the message is put on its primary queue (and its listeners hinted);
4. the envelope is deleted from the backlog; then the secondary's copies of the blobs.

Each step is idempotent and the order loses nothing: a crash anywhere repeats steps at worst,
and a message put twice is a redelivery, which every handler already absorbs. Order between
messages is not promised. An envelope whose payload is not a message (it cannot happen from
our senders) is put on its queue as it is, where the queue's checks move it to poison.

``photomosaics syphon`` runs it every ``Settings.syphon_interval`` seconds
(``PHOTOMOSAICS_SYPHON_INTERVAL``, 60: a ping a minute). Cost while all is well: one
call on the primary and one list on the secondary per pass, plus one empty receive per backlog
queue once a failover has created them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dal.availability.failover import BACKLOG_PREFIX, DEFAULT_BACKLOG_COUNT, parse_backlog_envelope, primary_failed
from dal.config import CLAIM_CHECK_CONTAINER, StorageClients
from dal.errors import BlobMissingError, QueueMessageFormatException, StorageConfigurationError
from dal.names import prefixed
from dal.queues.messages import ImageRequestMessage, QueueMessage
from dal.queues.stored_queue import StoredQueue, TakenText
from dal.stores import Stores

__all__ = ["Syphon", "run_syphon"]

log = logging.getLogger(__name__)

_BATCH = 32
_MOVERS = 8
_LEASE = 60  # seconds a backlog envelope stays hidden while it is being moved
# Message fields that name a blob of the workflow; a tile library (image_library_uri) is only
# ever on the primary, and queue_uri is an address, not data.
_NOT_BLOBS = frozenset({"queue_uri", "image_library_uri"})


@dataclass
class Syphon:
    """Moves backlog messages, their blobs and their job rows from the secondary to the primary."""

    primary: Stores
    secondary: StorageClients
    backlog_count: int = DEFAULT_BACKLOG_COUNT  # kept for symmetry with the senders; listing finds them all
    moved: int = 0
    blobs_moved: int = 0
    jobs_moved: int = 0
    on_moved: Callable[[QueueMessage], None] | None = None
    _secondary_stores: Stores | None = field(default=None, repr=False)
    _ping: StorageClients | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    @property
    def secondary_stores(self) -> Stores:
        if self._secondary_stores is None:
            self._secondary_stores = Stores(self.secondary, self.primary.settings)
        return self._secondary_stores

    def primary_alive(self) -> bool:
        """The ping: one queue-properties call on the primary, with short retries."""
        if self._ping is None:
            self._ping = StorageClients(self.primary.storage.connection_string, profile="probe")
        name = self.primary.queues.image_request.name
        try:
            self._ping.queue_service.get_queue_client(name).get_queue_properties()
            return True
        except Exception as exc:
            if primary_failed(exc):
                return False
            raise

    def run_once(self) -> int:
        """Ping, then drain every backlog queue; returns how many messages moved (0 if the primary is down)."""
        if not self.primary_alive():
            return 0
        moved = 0
        for backlog in self._backlogs():
            moved += self._drain(backlog)
        return moved

    def _backlogs(self) -> list[StoredQueue]:
        """The backlog queues that exist on the secondary (one list call; none before a failover)."""
        prefix = prefixed(self.primary.prefix, f"{BACKLOG_PREFIX}-")
        claims = self.secondary_stores.blobs.container_name(CLAIM_CHECK_CONTAINER)
        names = sorted(q.name for q in self.secondary.queue_service.list_queues(name_starts_with=prefix))
        return [StoredQueue(self.secondary, name, claim_container=claims) for name in names]

    def _drain(self, backlog: StoredQueue) -> int:
        """Take batches of 32 and move them, 8 at a time (each move is a dozen small requests)."""
        moved = 0
        with ThreadPoolExecutor(max_workers=_MOVERS, thread_name_prefix="syphon") as pool:
            while True:
                batch = backlog.take_texts(_BATCH, visibility_timeout=_LEASE)
                if not batch:
                    return moved
                results = list(pool.map(lambda taken: self._try_move(backlog, taken), batch))
                moved += results.count(True)
                if None in results:
                    return moved  # the primary failed again: the rest waits for the next ping

    def _try_move(self, backlog: StoredQueue, taken: TakenText) -> bool | None:
        """True: moved; False: not moved (it comes back after the lease); None: the primary failed."""
        try:
            self._move(backlog, taken)
            return True
        except Exception as exc:
            if primary_failed(exc):
                log.warning("primary failed again while draining %s: %s", backlog.name, exc)
                return None
            log.exception("backlog %s: message %s not moved; retried after %d s", backlog.name, taken.id, _LEASE)
            return False

    def _move(self, backlog: StoredQueue, taken: TakenText) -> None:
        queue_name, payload = parse_backlog_envelope(taken.text)
        target = self.primary.queues.by_name(queue_name)
        try:
            message: QueueMessage | None = QueueMessage.parse(payload)
        except QueueMessageFormatException:
            message = None  # put as it is: the work queue's own checks poison it
        copied: list[tuple[str, str]] = []
        if message is not None:
            message, copied = self._bring_blobs(message)
            if isinstance(message, ImageRequestMessage):
                self._bring_job(message.client_id, message.request_id)
            payload = message.payload()
        target.put_text(payload)
        if backlog.delete_taken(taken):
            for container, name in copied:
                self.secondary_stores.blobs.delete(container, name)
        self._count("moved")
        target.announce()
        if self.on_moved is not None and message is not None:
            self.on_moved(message)

    def _bring_blobs(self, message: QueueMessage) -> tuple[QueueMessage, list[tuple[str, str]]]:
        """Copy the secondary's blobs of ``message`` to the primary; the message pointing there."""
        changes, copied = {}, []
        for f in dataclasses.fields(message):
            url = getattr(message, f.name)
            if not f.name.endswith("_uri") or f.name in _NOT_BLOBS or not isinstance(url, str):
                continue
            try:
                container, name = self.secondary_stores.blobs.parse_blob_url(url)
            except ValueError:
                continue  # the primary's (or nobody's): nothing to move
            try:
                blob = self.secondary_stores.blobs.fetch(container, name)
            except BlobMissingError:
                if not self.primary.blobs.exists(container, name):
                    continue  # gone from both: the handler reports it as it always does
            else:
                self.primary.blobs.upload(
                    container,
                    name,
                    blob.data,
                    content_type=blob.content_type or "application/octet-stream",
                    metadata=blob.metadata or None,
                )
                copied.append((container, name))
                self._count("blobs_moved")
            changes[f.name] = self.primary.blobs.blob_url(container, name)
        return (dataclasses.replace(message, **changes) if changes else message), copied

    def _bring_job(self, client_id: str, request_id: str) -> None:
        """The job row written to the secondary during the outage, to the primary (then off the secondary)."""
        secondary_jobs = self.secondary_stores.jobs
        try:
            if secondary_jobs.get(client_id, request_id) is None:
                return
        except StorageConfigurationError:
            return  # no jobs table on the secondary: no row was ever written there
        if secondary_jobs.copy_to(self.primary.jobs, client_id, request_id):
            self._count("jobs_moved")
        secondary_jobs.delete(client_id, request_id)


def run_syphon(syphon: Syphon, *, interval: float, stop: Callable[[float], bool]) -> None:
    """Run passes every ``interval`` seconds until ``stop(wait)`` returns True (it waits up to ``wait``)."""
    while True:
        started = time.monotonic()
        try:
            moved = syphon.run_once()
            if moved:
                log.info("syphon: %d backlog message(s) moved to the primary", moved)
        except Exception:  # one bad pass (the secondary unreachable, say) must not end the role
            log.exception("syphon pass failed; next one in %.0f s", interval)
        if stop(max(0.0, interval - (time.monotonic() - started))):
            return
