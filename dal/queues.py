"""The work queues: typed receive and send, visibility renewal, poison handling, claim checks.

``ImageProcessingQueue`` wraps one Azure Storage queue and its ``<name>-poison`` queue.
Everything on the wire is Base64 text (see ``dal.wire``). A receive is one bounded call
(1..32 messages); before a message is handed out it is checked, and moved to the poison
queue instead when its dequeue count is over the threshold, when its text is not Base64 of
UTF-8, when its claim-check blob is gone, or when it does not parse as a message of this
queue. A stale pop receipt (someone else owns the message now) gives False/None, never an
exception.

``poison_threshold`` and ``timeout`` come from the queue's metadata (``poisonthreshold``,
``defaulttimeout``) so an operator can tune a queue without a redeploy; without metadata the
defaults of ``dal.config.Settings`` apply (5 deliveries, like the WebJobs runtime; 300 s).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import ContentSettings

from dal.config import (
    CLAIM_CHECK_CONTAINER,
    IMAGE_REQUEST_QUEUE,
    IMAGE_RESPONSE_QUEUE,
    POISON_SUFFIX,
    SLICE_REQUEST_QUEUE,
    SLICE_RESPONSE_QUEUE,
    Settings,
    StorageClients,
)
from dal.errors import ClaimCheckMissingError, QueueMessageFormatException
from dal.messages import QueueMessage
from dal.wire import (
    MAX_ENCODED_MESSAGE_BYTES,
    ClaimCheck,
    PoisonEntry,
    TextBase64EncodePolicy,
    TolerantBase64DecodePolicy,
    Undecodable,
    claim_check_reference,
    encoded_length,
    parse_claim_check,
    poison_envelope,
)

log = logging.getLogger(__name__)

POISON_THRESHOLD_KEY = "poisonthreshold"
TIMEOUT_KEY = "defaulttimeout"
MAX_BATCH = 32
MAX_VISIBILITY = 7 * 24 * 3600
# Puts run in parallel above this many messages (Azure has no batch put).
_PARALLEL_FROM = 4
_PUT_THREADS = 8


@dataclass(frozen=True)
class ReceivedMessage:
    """A typed message plus its delivery metadata; the metadata is not part of the message."""

    message: QueueMessage
    id: str
    pop_receipt: str
    dequeue_count: int
    inserted_on: datetime | None
    expires_on: datetime | None
    queue_name: str
    next_visible_on: datetime | None = None
    claim_check: ClaimCheck | None = None  # the blob that held the payload, deleted with the message


@dataclass(frozen=True)
class PeekedMessage:
    """A message seen without taking it; ``message`` is None (and ``error`` says why) if it is bad."""

    message: QueueMessage | None
    id: str
    dequeue_count: int
    inserted_on: datetime | None
    expires_on: datetime | None
    error: str | None = None


def _owned_by_someone_else(exc: HttpResponseError) -> bool:
    """404 (gone) or 400 (pop receipt mismatch) on delete/update: another consumer has it now."""
    return exc.status_code in (400, 404)


class _StoredQueue:
    """One queue with Base64 text and claim checks; the common part of work and poison queues."""

    def __init__(self, storage: StorageClients, name: str, *, claim_container: str) -> None:
        self.storage = storage
        self.name = name
        self._claim_container = claim_container
        self._client = storage.queue_service.get_queue_client(
            name,
            message_encode_policy=TextBase64EncodePolicy(),
            message_decode_policy=TolerantBase64DecodePolicy(),
        )

    @property
    def url(self) -> str:
        return str(self._client.url)

    def create(self) -> None:
        try:
            self._client.create_queue()
        except ResourceExistsError:
            pass

    def approximate_depth(self) -> int:
        """The service's approximate count (visible and invisible messages)."""
        return int(self._client.get_queue_properties().approximate_message_count or 0)

    def clear(self) -> None:
        """Drop every message and the claim-check blobs of this queue."""
        try:
            self._client.clear_messages()
        except ResourceNotFoundError:
            pass
        container = self._container()
        try:
            for blob in container.list_blobs(name_starts_with=f"{self.name}/"):
                container.delete_blob(blob.name)
        except ResourceNotFoundError:
            pass

    # --- wire ------------------------------------------------------------------------

    def _container(self) -> Any:
        return self.storage.blob_service.get_container_client(self._claim_container)

    def _put(self, text: str, *, delay: int = 0, ttl: int | None = None) -> None:
        """Send one text; over the service limit it goes to a blob and the message is its claim check."""
        check = None
        if encoded_length(text) > MAX_ENCODED_MESSAGE_BYTES:
            check = self._store_claim(text)
            text = claim_check_reference(check)
        try:
            self._client.send_message(text, visibility_timeout=delay or None, time_to_live=ttl)
        except BaseException:
            if check is not None:
                self._delete_claim(check)
            raise

    def _store_claim(self, text: str) -> ClaimCheck:
        data = text.encode("utf-8")
        check = ClaimCheck(container=self._claim_container, blob=f"{self.name}/{uuid.uuid4().hex}.json",
                           length=len(data))
        container = self._container()
        settings = ContentSettings(content_type="application/json; charset=utf-8")
        try:
            container.upload_blob(check.blob, data, overwrite=True, content_settings=settings)
        except ResourceNotFoundError:  # first claim check of this account: create the container
            try:
                container.create_container()
            except ResourceExistsError:
                pass
            container.upload_blob(check.blob, data, overwrite=True, content_settings=settings)
        return check

    def _resolve(self, text: str) -> tuple[str, ClaimCheck | None]:
        """The real payload of a message text; raises ClaimCheckMissingError if its blob is gone."""
        check = parse_claim_check(text)
        if check is None:
            return text, None
        client = self.storage.blob_service.get_blob_client(check.container, check.blob)
        try:
            data = client.download_blob().readall()
        except ResourceNotFoundError:
            raise ClaimCheckMissingError(f"claim-check blob {check.container}/{check.blob} is missing") from None
        try:
            return data.decode("utf-8"), check
        except UnicodeDecodeError as exc:
            raise ClaimCheckMissingError(f"claim-check blob {check.blob} is not UTF-8: {exc}") from None

    def _delete_claim(self, check: ClaimCheck) -> None:
        try:
            self.storage.blob_service.get_blob_client(check.container, check.blob).delete_blob()
        except ResourceNotFoundError:
            pass

    def _peek_raw(self, max_messages: int) -> list[Any]:
        _check_batch(max_messages)
        try:
            return list(self._client.peek_messages(max_messages=max_messages))
        except ResourceNotFoundError:
            return []


def _check_batch(max_messages: int) -> None:
    if type(max_messages) is not int or not 1 <= max_messages <= MAX_BATCH:
        raise ValueError(f"max_messages must be 1..{MAX_BATCH}, got {max_messages!r}")


def _check_visibility(name: str, seconds: int, *, low: int) -> None:
    if type(seconds) is not int or not low <= seconds <= MAX_VISIBILITY:
        raise ValueError(f"{name} must be {low}..{MAX_VISIBILITY} seconds, got {seconds!r}")


class PoisonQueue(_StoredQueue):
    """``<queue>-poison``: messages moved aside, each in an envelope that keeps everything."""

    def add(self, entry_text: str) -> None:
        """Store an envelope; poison copies never expire (ttl -1)."""
        try:
            self._put(entry_text, ttl=-1)
        except ResourceNotFoundError:  # the poison queue is created on first use
            self.create()
            self._put(entry_text, ttl=-1)

    def peek(self, max_messages: int = 32) -> list[PoisonEntry]:
        entries = []
        for raw in self._peek_raw(max_messages):
            text, _ = self._resolve(raw.content)
            entries.append(PoisonEntry.from_text(text))
        return entries


class ImageProcessingQueue(_StoredQueue):
    """One work queue of the workflow (``name`` carries the test prefix, if any)."""

    def __init__(
        self, storage: StorageClients, name: str, *, settings: Settings | None = None, prefix: str = ""
    ) -> None:
        self.logical_name = name
        self.settings = settings or Settings()
        claim_container = f"{prefix}{CLAIM_CHECK_CONTAINER}"
        super().__init__(storage, f"{prefix}{name}", claim_container=claim_container)
        self.poison = PoisonQueue(storage, f"{prefix}{name}{POISON_SUFFIX}", claim_container=claim_container)
        self._metadata: dict[str, str] | None = None

    def __repr__(self) -> str:
        return f"ImageProcessingQueue({self.name!r})"

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
            _check_visibility("timeout", timeout, low=1)
            metadata[TIMEOUT_KEY] = str(timeout)
        self._client.set_queue_metadata(metadata=metadata)
        self._metadata = metadata

    # --- receive ----------------------------------------------------------------------

    def accept_messages(self, max_messages: int = 16, *, visibility_timeout: int | None = None) -> list[ReceivedMessage]:
        """One bounded receive; bad and over-delivered messages go to poison, not to the caller."""
        _check_batch(max_messages)
        timeout = self.timeout if visibility_timeout is None else visibility_timeout
        _check_visibility("visibility_timeout", timeout, low=1)
        pages = self._client.receive_messages(messages_per_page=max_messages, visibility_timeout=timeout).by_page()
        page = next(pages, None)  # exactly one request: iterating further would drain the queue
        threshold = self.poison_threshold
        accepted = []
        for raw in page or []:
            received = self._check(raw, threshold)
            if received is not None:
                accepted.append(received)
        return accepted

    def _check(self, raw: Any, threshold: int) -> ReceivedMessage | None:
        content = raw.content
        if raw.dequeue_count > threshold:
            reason = f"dequeue count {raw.dequeue_count} exceeds the poison threshold {threshold}"
            self._poison_raw(raw, reason)
            return None
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
            pop_receipt=raw.pop_receipt,
            dequeue_count=raw.dequeue_count,
            inserted_on=raw.inserted_on,
            expires_on=raw.expires_on,
            queue_name=self.name,
            next_visible_on=raw.next_visible_on,
            claim_check=check,
        )

    def _poison_raw(self, raw: Any, reason: str) -> None:
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
            reason=reason, dequeue_count=raw.dequeue_count, payload=payload, encoding=encoding, message_id=raw.id
        )
        self._delete_raw(raw.id, raw.pop_receipt, check)

    def _send_to_poison(self, *, reason: str, dequeue_count: int, payload: str, encoding: str, message_id: str) -> None:
        log.warning("queue %s: message %s moved to %s: %s", self.name, message_id, self.poison.name, reason)
        self.poison.add(
            poison_envelope(
                reason=reason, dequeue_count=dequeue_count, queue=self.name, payload=payload,
                payload_encoding=encoding, message_id=message_id,
            )
        )

    # --- settle -----------------------------------------------------------------------

    def delete(self, received: ReceivedMessage) -> bool:
        """Delete after the work is durably written; False if another consumer owns it now."""
        return self._delete_raw(received.id, received.pop_receipt, received.claim_check)

    def _delete_raw(self, message_id: str, pop_receipt: str, check: ClaimCheck | None) -> bool:
        try:
            self._client.delete_message(message_id, pop_receipt)
        except HttpResponseError as exc:
            if _owned_by_someone_else(exc):
                return False
            raise
        if check is not None:
            self._delete_claim(check)
        return True

    def renew(self, received: ReceivedMessage, timeout: int | None = None) -> ReceivedMessage | None:
        """Extend invisibility for long work; the result carries the new pop receipt (None if lost)."""
        seconds = self.timeout if timeout is None else timeout
        _check_visibility("timeout", seconds, low=1)
        updated = self._update(received, seconds)
        if updated is None:
            return None
        return dataclasses.replace(
            received, pop_receipt=updated.pop_receipt, next_visible_on=updated.next_visible_on
        )

    def release(self, received: ReceivedMessage, *, delay: int = 0) -> bool:
        """Hand a message back: visible again after ``delay`` seconds (0: at once)."""
        _check_visibility("delay", delay, low=0)
        return self._update(received, delay) is not None

    def _update(self, received: ReceivedMessage, seconds: int) -> Any:
        try:
            return self._client.update_message(received.id, received.pop_receipt, visibility_timeout=seconds)
        except HttpResponseError as exc:
            if _owned_by_someone_else(exc):
                return None
            raise

    def move_to_poison(self, received: ReceivedMessage, reason: str) -> None:
        """Move a message aside now (a permanent error): copy with the reason, then delete."""
        self._send_to_poison(
            reason=reason, dequeue_count=received.dequeue_count, payload=received.message.payload(),
            encoding="text", message_id=received.id,
        )
        if not self.delete(received):
            log.warning("queue %s: message %s was poisoned but is owned by another consumer now",
                        self.name, received.id)

    # --- send and inspect -------------------------------------------------------------

    def submit(
        self, messages: QueueMessage | Sequence[QueueMessage], *, delay: int = 0, ttl: int | None = None
    ) -> None:
        """Send messages of this queue's type; all are checked before any is sent."""
        batch = [messages] if isinstance(messages, QueueMessage) else list(messages)
        _check_visibility("delay", delay, low=0)
        if ttl is not None and (type(ttl) is not int or (ttl < 1 and ttl != -1)):
            raise ValueError(f"ttl must be a positive number of seconds or -1 (never), got {ttl!r}")
        texts = []
        for message in batch:
            if not isinstance(message, QueueMessage) or message.QUEUE != self.logical_name:
                kind = getattr(message, "TYPE", type(message).__name__)
                raise QueueMessageFormatException(f"a {kind} message does not belong in queue {self.name!r}")
            texts.append(message.payload())
        if len(texts) <= _PARALLEL_FROM:
            for text in texts:
                self._put(text, delay=delay, ttl=ttl)
            return
        with ThreadPoolExecutor(max_workers=min(_PUT_THREADS, len(texts)), thread_name_prefix="submit") as pool:
            for future in [pool.submit(self._put, text, delay=delay, ttl=ttl) for text in texts]:
                future.result()

    def peek(self, max_messages: int = 32) -> list[PeekedMessage]:
        """Look at the front of the queue without taking anything (no dequeue count change)."""
        peeked = []
        for raw in self._peek_raw(max_messages):
            message, error = None, None
            if isinstance(raw.content, Undecodable):
                error = raw.content.reason
            else:
                try:
                    text, _ = self._resolve(raw.content or "")
                    message = QueueMessage.parse(text, queue_name=self.logical_name)
                except (QueueMessageFormatException, ClaimCheckMissingError) as exc:
                    error = str(exc)
            peeked.append(PeekedMessage(message=message, id=raw.id, dequeue_count=raw.dequeue_count,
                                        inserted_on=raw.inserted_on, expires_on=raw.expires_on, error=error))
        return peeked


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

    def all(self) -> list[ImageProcessingQueue]:
        return [self.image_request, self.slice_request, self.slice_response, self.image_response]

    def by_name(self, name: str) -> ImageProcessingQueue:
        """A queue by its logical (``imagerequest``) or full (prefixed) name."""
        for queue in self.all():
            if name in (queue.logical_name, queue.name):
                return queue
        raise KeyError(f"no work queue named {name!r}")

    def for_message(self, message: QueueMessage) -> ImageProcessingQueue:
        """The queue a message is addressed to by its ``queue_uri``; it must match the type."""
        path = urlsplit(message.queue_uri).path.rstrip("/")
        name = path.rsplit("/", 1)[-1]
        matches = [q for q in self.all() if q.name == name]
        if not matches:
            raise QueueMessageFormatException(
                f"queue_uri {message.queue_uri!r} names none of the queues {[q.name for q in self.all()]}"
            )
        queue = matches[0]
        if queue.logical_name != message.QUEUE:
            raise QueueMessageFormatException(f"a {message.TYPE} message does not belong in queue {queue.name!r}")
        return queue

    def ensure_all(self) -> None:
        for queue in self.all():
            queue.ensure_exists()
