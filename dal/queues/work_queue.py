"""The work queues: typed receive and send, visibility renewal, poison handling, claim checks.

``ImageProcessingQueue`` wraps one Azure Storage queue and its ``<name>-poison`` queue.
Everything on the wire is Base64 text (see ``dal.queues.wire``). A receive is one bounded call
(1..32 messages); before a message is handed out it is checked, and moved to the poison
queue instead when its dequeue count is over the threshold, when its text is not Base64 of
UTF-8, when its claim-check blob is gone, or when it does not parse as a message of this
queue; the receive says how many it moved (``Accepted.poisoned``), so that its caller does
not take a receive of nothing but poison for an empty queue. A stale pop receipt (someone
else owns the message now) gives False/None, never an exception.

``poison_threshold`` and ``timeout`` come from the queue's metadata (``poisonthreshold``,
``defaulttimeout``) so an operator can tune a queue without a redeploy; without metadata the
defaults of ``dal.config.Settings`` apply (5 deliveries, like the WebJobs runtime; 300 s).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from dal.config import (
    CLAIM_CHECK_CONTAINER,
    IMAGE_REQUEST_QUEUE,
    IMAGE_RESPONSE_QUEUE,
    INDEX_REQUEST_QUEUE,
    JOB_CLEANUP_QUEUE,
    POISON_SUFFIX,
    SLICE_REQUEST_QUEUE,
    SLICE_RESPONSE_QUEUE,
    Settings,
    StorageClients,
)
from dal.errors import ClaimCheckMissingError, QueueMessageFormatException
from dal.hints.channel import HintChannel, channel_from_env
from dal.names import prefixed
from dal.queues.consumable import Accepted, Consumable, PeekedMessage, PoisonHook, ReceivedMessage
from dal.queues.lanes import MAX_LANES, PriorityLanes, lane_name
from dal.queues.messages import QueueMessage
from dal.queues.shards import MAX_SHARDS, ShardedQueue, shard_index
from dal.queues.stored_queue import (
    MAX_VISIBILITY,
    PoisonQueue,
    StoredQueue,
    check_batch,
    check_visibility,
    delivered,
    owned_by_someone_else,
)
from dal.queues.tracing import traced_submit
from dal.queues.wire import Undecodable, poison_envelope

if TYPE_CHECKING:
    from azure.storage.queue import QueueMessage as StorageQueueMessage
    from azure.storage.queue import QueueServiceClient

__all__ = [
    "POISON_THRESHOLD_KEY",
    "TIMEOUT_KEY",
    "ImageProcessingQueue",
    "QueueAccessor",
]

log = logging.getLogger(__name__)

POISON_THRESHOLD_KEY = "poisonthreshold"
TIMEOUT_KEY = "defaulttimeout"
# Puts run in parallel above this many messages (Azure has no batch put): from two on, so a
# 4-slice job's SliceRequests go out in one round trip instead of four (order is not promised).
_PARALLEL_FROM = 1
_PUT_THREADS = 8


class ImageProcessingQueue(StoredQueue):
    """One work queue of the workflow (``name`` carries the test prefix, if any): a ``Consumable``."""

    skip_known_empty = False  # one queue: nothing to skip

    def __init__(
        self,
        storage: StorageClients,
        name: str,
        *,
        settings: Settings | None = None,
        prefix: str = "",
        shard: int = 0,
        lane: int = 0,
    ) -> None:
        self.logical_name = name
        # Lane 0 is the queue itself; lane i > 0 is "<name>-lane<i>" (dal.queues.lanes). Shard 0 is the
        # lane itself; shard i > 0 is "<lane>-<i>" (dal.queues.shards). All carry the same message type.
        base = lane_name(name, lane)
        self.lane = lane
        self.short_name = f"{base}-{shard}" if shard else base
        self.settings = settings or Settings()
        claim_container = prefixed(prefix, CLAIM_CHECK_CONTAINER)
        super().__init__(storage, prefixed(prefix, self.short_name), claim_container=claim_container)
        self.poison = PoisonQueue(
            storage, prefixed(prefix, f"{self.short_name}{POISON_SUFFIX}"), claim_container=claim_container
        )
        # Hints name the unsharded queue, so one listener over every shard hears them all.
        self.hint_name = prefixed(prefix, name)
        self._metadata: dict[str, str] | None = None
        # Where "work detected" hints go after a send (``dal.hints.channel``); None: PHOTOMOSAICS_HINT_DIR.
        self.hints: HintChannel | None = None

    def __repr__(self) -> str:
        return f"ImageProcessingQueue({self.name!r})"

    @property
    def parts(self) -> list[ImageProcessingQueue]:
        return [self]

    def hinted(self, lane: int | None) -> None:
        """One queue keeps no per-lane state: a hint needs nothing here."""

    # --- settings from metadata -------------------------------------------------------

    def refresh(self) -> None:
        """Forget the cached metadata; the next access reads it again."""
        self._metadata = None

    def _meta(self) -> dict[str, str]:
        if self._metadata is None:
            try:
                self._metadata = dict(self._client.get_queue_properties().metadata or {})
            except ResourceNotFoundError:
                return {}
        return self._metadata

    def _meta_int(self, key: str, default: int, *, low: int, high: int) -> int:
        raw = self._meta().get(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            log.warning("queue %s: metadata %s=%r is not %d..%d; using %d", self.name, key, raw, low, high, default)
            return default
        return value

    @property
    def poison_threshold(self) -> int:
        """Deliveries allowed before a message is moved to poison (metadata ``poisonthreshold``)."""
        return self._meta_int(POISON_THRESHOLD_KEY, self.settings.poison_threshold, low=1, high=10_000)

    @property
    def timeout(self) -> int:
        """Default invisibility in seconds (metadata ``defaulttimeout``)."""
        return self._meta_int(TIMEOUT_KEY, self.settings.visibility_timeout, low=1, high=MAX_VISIBILITY)

    def ensure_exists(self, *, poison_threshold: int | None = None, timeout: int | None = None) -> None:
        """Create the queue and its poison queue; write the given settings as metadata."""
        self.create()
        self.poison.create()
        if poison_threshold is not None or timeout is not None:
            self.configure(poison_threshold=poison_threshold, timeout=timeout)
        self.refresh()

    def configure(self, *, poison_threshold: int | None = None, timeout: int | None = None) -> None:
        """Store settings in the queue's metadata, where every process reads them."""
        metadata = dict(self._client.get_queue_properties().metadata or {})
        if poison_threshold is not None:
            if type(poison_threshold) is not int or poison_threshold < 1:
                raise ValueError(f"poison_threshold must be >= 1, got {poison_threshold!r}")
            metadata[POISON_THRESHOLD_KEY] = str(poison_threshold)
        if timeout is not None:
            check_visibility("timeout", timeout, low=1)
            metadata[TIMEOUT_KEY] = str(timeout)
        self._client.set_queue_metadata(metadata=metadata)
        self._metadata = metadata

    # --- receive ----------------------------------------------------------------------

    def accept_messages(
        self,
        max_messages: int = 16,
        *,
        visibility_timeout: int | None = None,
        on_poison: PoisonHook | None = None,
    ) -> Accepted:
        """One bounded receive; bad and over-delivered messages go to poison, not to the caller.

        The result is the list of messages handed out; its ``poisoned`` says how many this
        receive moved to poison instead, so that a receive of nothing but poison is not taken
        for an empty queue. ``on_poison(received, reason)`` is told of every *valid* message
        moved aside for its dequeue count (a worker died on it again and again), so that its
        job can be failed; garbage has no job to tell.
        """
        check_batch(max_messages)
        timeout = self.timeout if visibility_timeout is None else visibility_timeout
        check_visibility("visibility_timeout", timeout, low=1)
        pages = self._client.receive_messages(messages_per_page=max_messages, visibility_timeout=timeout).by_page()
        page = next(pages, None)  # exactly one request: iterating further would drain the queue
        threshold = self.poison_threshold
        accepted = Accepted()
        for raw in page or []:
            try:
                received = self._check(raw)
                if received is not None and received.dequeue_count > threshold:
                    reason = f"dequeue count {received.dequeue_count} exceeds the poison threshold {threshold}"
                    self._poison_raw(raw, reason)
                    accepted.poisoned += 1
                    _tell(on_poison, received, reason)
                    continue
            except Exception:  # e.g. the poison move failed: it comes back after `timeout`
                log.exception("queue %s: could not check message %s; it will be redelivered", self.name, raw.id)
                continue
            if received is None:
                accepted.poisoned += 1
            else:
                accepted.append(received)
        return accepted

    def _check(self, raw: StorageQueueMessage) -> ReceivedMessage | None:
        """The typed message, or None when it is not one (then it is already in poison)."""
        content = raw.content
        if isinstance(content, Undecodable):
            self._poison_raw(raw, content.reason)
            return None
        try:
            text, check = self._resolve(content or "")
            message = QueueMessage.parse(text, queue_name=self.logical_name)
        except (QueueMessageFormatException, ClaimCheckMissingError) as exc:
            self._poison_raw(raw, f"{type(exc).__name__}: {exc}")
            return None
        return ReceivedMessage(
            message=message,
            id=raw.id,
            pop_receipt=delivered(raw.pop_receipt, "pop_receipt"),
            dequeue_count=delivered(raw.dequeue_count, "dequeue_count"),
            inserted_on=raw.inserted_on,
            expires_on=raw.expires_on,
            queue_name=self.name,
            next_visible_on=raw.next_visible_on,
            claim_check=check,
        )

    def _poison_raw(self, raw: StorageQueueMessage, reason: str) -> None:
        """Move a message that could not become a ReceivedMessage; keep its text whatever it is."""
        content = raw.content
        check = None
        if isinstance(content, Undecodable):
            payload, encoding = content.raw, "wire"
        else:
            payload, encoding = content or "", "text"
            try:
                payload, check = self._resolve(payload)
            except ClaimCheckMissingError:
                pass  # keep the reference itself: that is all there is
        self._send_to_poison(
            reason=reason,
            dequeue_count=delivered(raw.dequeue_count, "dequeue_count"),
            payload=payload,
            encoding=encoding,
            message_id=raw.id,
        )
        self._delete_with_claim(raw.id, delivered(raw.pop_receipt, "pop_receipt"), check)

    def _send_to_poison(self, *, reason: str, dequeue_count: int, payload: str, encoding: str, message_id: str) -> None:
        log.warning("queue %s: message %s moved to %s: %s", self.name, message_id, self.poison.name, reason)
        self.poison.add(
            poison_envelope(
                reason=reason,
                dequeue_count=dequeue_count,
                queue=self.name,
                payload=payload,
                payload_encoding=encoding,
                message_id=message_id,
            )
        )

    # --- settle -----------------------------------------------------------------------

    def delete(self, received: ReceivedMessage) -> bool:
        """Delete after the work is durably written; False if another consumer owns it now."""
        return self._delete_with_claim(received.id, received.pop_receipt, received.claim_check)

    def renew(self, received: ReceivedMessage, timeout: int | None = None) -> ReceivedMessage | None:
        """Extend invisibility for long work; the result carries the new pop receipt (None if lost)."""
        seconds = self.timeout if timeout is None else timeout
        check_visibility("timeout", seconds, low=1)
        updated = self._update(received, seconds)
        if updated is None:
            return None
        receipt = delivered(updated.pop_receipt, "pop_receipt")
        return dataclasses.replace(received, pop_receipt=receipt, next_visible_on=updated.next_visible_on)

    def release(self, received: ReceivedMessage, *, delay: int = 0) -> bool:
        """Hand a message back: visible again after ``delay`` seconds (0: at once)."""
        check_visibility("delay", delay, low=0)
        return self._update(received, delay) is not None

    def _update(self, received: ReceivedMessage, seconds: int) -> StorageQueueMessage | None:
        try:
            return self._client.update_message(received.id, received.pop_receipt, visibility_timeout=seconds)
        except HttpResponseError as exc:
            if owned_by_someone_else(exc):
                return None
            raise

    def move_to_poison(self, received: ReceivedMessage, reason: str) -> None:
        """Move a message aside now (a permanent error): copy with the reason, then delete."""
        self._send_to_poison(
            reason=reason,
            dequeue_count=received.dequeue_count,
            payload=received.message.payload(),
            encoding="text",
            message_id=received.id,
        )
        if not self.delete(received):
            log.warning(
                "queue %s: message %s was poisoned but is owned by another consumer now", self.name, received.id
            )

    # --- send and inspect -------------------------------------------------------------

    @traced_submit  # a "send <queue>" span; messages carry its traceparent when tracing is on
    def submit(
        self, messages: QueueMessage | Sequence[QueueMessage], *, delay: int = 0, ttl: int | None = None
    ) -> None:
        """Send messages of this queue's type; all are checked before any is sent."""
        batch = [messages] if isinstance(messages, QueueMessage) else list(messages)
        check_visibility("delay", delay, low=0)
        if ttl is not None and (type(ttl) is not int or (ttl < 1 and ttl != -1)):
            raise ValueError(f"ttl must be a positive number of seconds or -1 (never), got {ttl!r}")
        texts = []
        for message in batch:
            if not isinstance(message, QueueMessage) or self.logical_name != message.QUEUE:
                kind = getattr(message, "TYPE", type(message).__name__)
                raise QueueMessageFormatException(f"a {kind} message does not belong in queue {self.name!r}")
            texts.append(message.payload())
        if len(texts) <= _PARALLEL_FROM:
            for text in texts:
                self.put_text(text, delay=delay, ttl=ttl)
        else:
            with ThreadPoolExecutor(max_workers=min(_PUT_THREADS, len(texts)), thread_name_prefix="submit") as pool:
                for future in [pool.submit(self.put_text, text, delay=delay, ttl=ttl) for text in texts]:
                    future.result()
        if delay == 0:
            self.announce(len(batch))

    def hint_channel(self) -> HintChannel | None:
        return self.hints if self.hints is not None else channel_from_env()

    def announce(self, count: int | None = None) -> None:
        """Publish "work detected on this queue" (after a send, or a hand-back); never raises.

        ``count``: how many messages the send added (a listener's hint credit); None: unknown."""
        channel = self.hint_channel()
        if channel is None:
            return
        try:
            channel.publish(self.hint_name, count, self.lane)
        except Exception:  # a hint is an optimisation: losing it costs one poll interval
            log.warning("queue %s: work-detected hint not published", self.name, exc_info=True)

    def peek(self, max_messages: int = 32) -> list[PeekedMessage]:
        """Look at the front of the queue without taking anything (no dequeue count change)."""
        return [self._peeked(raw) for raw in self._peek_raw(max_messages)]

    def _peeked(self, raw: StorageQueueMessage) -> PeekedMessage:
        message, error = None, None
        if isinstance(raw.content, Undecodable):
            error = raw.content.reason
        else:
            try:
                text, _ = self._resolve(raw.content or "")
                message = QueueMessage.parse(text, queue_name=self.logical_name)
            except (QueueMessageFormatException, ClaimCheckMissingError) as exc:
                error = str(exc)
        times = {"inserted_on": raw.inserted_on, "expires_on": raw.expires_on}
        count = delivered(raw.dequeue_count, "dequeue_count")
        return PeekedMessage(message=message, id=raw.id, dequeue_count=count, error=error, **times)


class QueueAccessor:
    """The four work queues of the workflow, by name and by a message's ``queue_uri``."""

    def __init__(self, storage: StorageClients, *, settings: Settings | None = None, prefix: str = "") -> None:
        self.storage = storage
        self.prefix = prefix

        def make(name: str) -> ImageProcessingQueue:
            return ImageProcessingQueue(storage, name, settings=settings, prefix=prefix)

        self.image_request = make(IMAGE_REQUEST_QUEUE)
        self.slice_request = make(SLICE_REQUEST_QUEUE)
        self.slice_response = make(SLICE_RESPONSE_QUEUE)
        self.image_response = make(IMAGE_RESPONSE_QUEUE)
        self.job_cleanup = make(JOB_CLEANUP_QUEUE)
        self.index_request = make(INDEX_REQUEST_QUEUE)  # photos uploaded into a library: the indexer
        shards = (settings or Settings()).slice_shards
        if type(shards) is not int or not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"slice_shards must be 1..{MAX_SHARDS}, got {shards!r}")
        lanes = (settings or Settings()).fair_lanes
        if type(lanes) is not int or not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"fair_lanes must be 1..{MAX_LANES}, got {lanes!r}")
        # slice_lanes[lane][shard]: lane 0 shard 0 is slicerequest itself (dal.queues.lanes, dal.queues.shards).
        self.slice_lanes = [
            [
                self.slice_request
                if (lane, i) == (0, 0)
                else ImageProcessingQueue(
                    storage, SLICE_REQUEST_QUEUE, settings=settings, prefix=prefix, shard=i, lane=lane
                )
                for i in range(shards)
            ]
            for lane in range(lanes)
        ]
        self.slice_request_shards = self.slice_lanes[0]
        # imagerequest has lanes too (no shards): the web app sends a client's later jobs lower, so
        # the controller slices a newcomer's job before another client's backlog.
        self.image_request_lanes = [self.image_request] + [
            ImageProcessingQueue(storage, IMAGE_REQUEST_QUEUE, settings=settings, prefix=prefix, lane=lane)
            for lane in range(1, lanes)
        ]
        self.image_requests: Consumable = PriorityLanes(self.image_request_lanes) if lanes > 1 else self.image_request
        # What processors consume: the lanes highest first, each lane's shards rotated fairly
        # (the plain queue with one lane and one shard).
        by_lane = [ShardedQueue(lane) if shards > 1 else lane[0] for lane in self.slice_lanes]
        self.slice_requests: Consumable = PriorityLanes(by_lane) if lanes > 1 else by_lane[0]

    def slice_request_shard(self, request_id: str, sequence: int, lane: int = 0) -> ImageProcessingQueue:
        """The queue a slice goes to: its lane, and in it a job's slices are dealt round-robin over the shards."""
        shards = self.slice_lanes[lane]
        return shards[shard_index(request_id, sequence, len(shards))]

    def slice_request_queues(self) -> list[ImageProcessingQueue]:
        """Every lane's every shard of slicerequest."""
        return [queue for lane in self.slice_lanes for queue in lane]

    def workflow(self) -> list[ImageProcessingQueue]:
        """The four queues of the mosaic workflow."""
        return [self.image_request, self.slice_request, self.slice_response, self.image_response]

    def monitored(self) -> list[ImageProcessingQueue]:
        """Every queue an operator watches: the workflow's four, the other lanes and shards, ``jobcleanup``,
        ``indexrequest``."""
        return [
            *self.workflow(),
            *self.slice_request_queues()[1:],
            *self.image_request_lanes[1:],
            self.job_cleanup,
            self.index_request,
        ]

    def by_name(self, name: str) -> ImageProcessingQueue:
        """A queue by its short (``imagerequest``, ``slicerequest-1``) or full (prefixed) name."""
        for queue in self.monitored():
            if name in (queue.short_name, queue.name):
                return queue
        raise KeyError(f"no work queue named {name!r}")

    def for_message(self, message: QueueMessage) -> ImageProcessingQueue:
        """The queue a message is addressed to by its ``queue_uri``; it must match the type."""
        path = urlsplit(message.queue_uri).path.rstrip("/")
        name = path.rsplit("/", 1)[-1]
        matches = [q for q in self.monitored() if q.name == name]
        if not matches:
            raise QueueMessageFormatException(
                f"queue_uri {message.queue_uri!r} names none of the queues {[q.name for q in self.workflow()]}"
            )
        queue = matches[0]
        if queue.logical_name != message.QUEUE:
            raise QueueMessageFormatException(f"a {message.TYPE} message does not belong in queue {queue.name!r}")
        return queue

    def ensure_all(self) -> None:
        for queue in self.monitored():
            queue.ensure_exists()


def make_visible_now(queue_service: QueueServiceClient, queue: str, message_id: str, pop_receipt: str) -> bool:
    """Make a held message visible at once by its id and pop receipt (a dead holder's hand-back).

    False when the receipt no longer holds (the message was settled or renewed meanwhile):
    then its lease decides, nothing to do.
    """
    try:
        queue_service.get_queue_client(queue).update_message(message_id, pop_receipt, visibility_timeout=0)
    except HttpResponseError as exc:
        log.info("hand-back of message %s in %s not possible (%s)", message_id, queue, exc.status_code)
        return False
    return True


def _tell(on_poison: PoisonHook | None, received: ReceivedMessage, reason: str) -> None:
    if on_poison is None:
        return
    try:
        on_poison(received, reason)
    except Exception:  # the message is safe in poison already; a failed hook must not undo that
        log.exception("queue %s: poison hook failed for message %s", received.queue_name, received.id)
