"""A storage queue that speaks our wire format (Base64, claim checks), and its poison queue.

``StoredQueue`` is what work and poison queues share: sending a text (as a blob plus a
claim check when it is over the service limit), resolving a claim check on the way back,
depth, peek and clear. ``PoisonQueue`` is ``<queue>-poison``: envelopes that never expire.
The typed work queue, ``dal.queues.work_queue.ImageProcessingQueue``, builds on it.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import ContentSettings

from dal.config import StorageClients
from dal.errors import ClaimCheckMissingError, ClaimCheckRefusedError
from dal.queues.wire import (
    MAX_ENCODED_MESSAGE_BYTES,
    ClaimCheck,
    PoisonEntry,
    TextBase64EncodePolicy,
    TolerantBase64DecodePolicy,
    claim_check_reference,
    encoded_length,
    parse_claim_check,
    poison_envelope,
    stored_text,
)

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient
    from azure.storage.queue import QueueMessage as StorageQueueMessage

__all__ = [
    "MAX_BATCH",
    "MAX_VISIBILITY",
    "PoisonQueue",
    "StoredQueue",
    "TakenPoison",
    "check_batch",
    "check_visibility",
    "delivered",
    "owned_by_someone_else",
]

MAX_BATCH = 32
_PARALLEL_FROM = 1  # puts run in parallel above this many texts
_PUT_THREADS = 8
MAX_VISIBILITY = 7 * 24 * 3600


_T = TypeVar("_T")


def delivered(value: _T | None, field: str) -> _T:
    """A field the SDK types Optional that the service always sends with a received, updated or
    peeked message (``pop_receipt``, ``dequeue_count``); a reply without it is refused, not guessed."""
    if value is None:
        raise ValueError(f"the queue service sent a message without its {field}")
    return value


def owned_by_someone_else(exc: HttpResponseError) -> bool:
    """404 (gone) or 400 (pop receipt mismatch) on delete/update: another consumer has it now."""
    return exc.status_code in (400, 404)


class StoredQueue:
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

    def oldest_visible(self) -> datetime | None:
        """When the message at the front of the queue (the oldest one waiting to be received)
        was put in, by the service's clock; None when nothing waits. One Peek Messages call (the
        payload is not read). Unlike ``approximate_depth``, messages in flight (received,
        invisible) do not count, so a queue whose every message is in a worker's hands has none."""
        raw = self._peek_raw(1)
        return raw[0].inserted_on if raw else None

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

    def _container(self) -> ContainerClient:
        return self.storage.blob_service.get_container_client(self._claim_container)

    def put_text(self, text: str, *, delay: int = 0, ttl: int | None = None) -> None:
        """Send one text as it is; over the service limit it goes to a blob and the message is
        its claim check. Typed senders use ``ImageProcessingQueue.submit``; this is for texts
        that are already a payload (a failed-over message on its way back, a poison envelope)."""
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

    def put_texts(self, texts: list[str], *, delay: int = 0, ttl: int | None = None) -> None:
        """``put_text`` for each; in parallel from two on (Azure has no batch put: a 4-slice job's
        SliceRequests go out in one round trip instead of four), so their order is not promised."""
        if len(texts) <= _PARALLEL_FROM:
            for text in texts:
                self.put_text(text, delay=delay, ttl=ttl)
            return
        with ThreadPoolExecutor(max_workers=min(_PUT_THREADS, len(texts)), thread_name_prefix="submit") as pool:
            for future in [pool.submit(self.put_text, text, delay=delay, ttl=ttl) for text in texts]:
                future.result()

    def _store_claim(self, text: str) -> ClaimCheck:
        data = text.encode("utf-8")
        check = ClaimCheck(
            container=self._claim_container, blob=f"{self.name}/{uuid.uuid4().hex}.json", length=len(data)
        )
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
        if check.container != self._claim_container:
            # Only the project's own claim checks are resolved: a reference to any other container
            # (a library's index, a job's result, another deployment's prefix) is neither read nor,
            # when the message is deleted, deleted with it.
            raise ClaimCheckRefusedError(
                f"claim check names container {check.container!r}; only {self._claim_container!r} holds claim checks"
            )
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

    def take_texts(self, max_messages: int, *, visibility_timeout: int) -> list[TakenText]:
        """One bounded receive of texts (claim checks resolved), hidden for ``visibility_timeout``
        s until ``delete_taken``; [] when the queue does not exist."""
        page = self._receive_page(max_messages, visibility_timeout)
        taken = []
        for raw in page:
            text, check = self._resolve(raw.content or "")
            taken.append(
                TakenText(
                    id=raw.id, pop_receipt=delivered(raw.pop_receipt, "pop_receipt"), text=text, claim_check=check
                )
            )
        return taken

    def delete_taken(self, taken: TakenText) -> bool:
        """Delete a taken message and its claim-check blob; False if it is no longer ours."""
        return self._delete_with_claim(taken.id, taken.pop_receipt, taken.claim_check)

    def _receive_page(self, max_messages: int, visibility_timeout: int) -> list[StorageQueueMessage]:
        """One bounded receive (one request, never a drain); [] when the queue does not exist."""
        check_batch(max_messages)
        check_visibility("visibility_timeout", visibility_timeout, low=1)
        try:
            pages = self._client.receive_messages(
                messages_per_page=max_messages, visibility_timeout=visibility_timeout
            ).by_page()
            return list(next(pages, None) or [])
        except ResourceNotFoundError:
            return []

    def _delete_with_claim(self, message_id: str, pop_receipt: str, check: ClaimCheck | None) -> bool:
        try:
            self._client.delete_message(message_id, pop_receipt)
        except HttpResponseError as exc:
            if owned_by_someone_else(exc):
                return False
            raise
        if check is not None:
            self._delete_claim(check)
        return True

    def _set_visibility(self, message_id: str, pop_receipt: str, seconds: int) -> StorageQueueMessage | None:
        """A held message visible again in ``seconds`` (its new receipt), or None when another
        consumer holds it now (the receipt no longer holds)."""
        try:
            return self._client.update_message(message_id, pop_receipt, visibility_timeout=seconds)
        except HttpResponseError as exc:
            if owned_by_someone_else(exc):
                return None
            raise

    def _peek_raw(self, max_messages: int) -> list[StorageQueueMessage]:
        check_batch(max_messages)
        try:
            return list(self._client.peek_messages(max_messages=max_messages))
        except ResourceNotFoundError:
            return []


def check_batch(max_messages: int) -> None:
    if type(max_messages) is not int or not 1 <= max_messages <= MAX_BATCH:
        raise ValueError(f"max_messages must be 1..{MAX_BATCH}, got {max_messages!r}")


def check_visibility(name: str, seconds: int, *, low: int) -> None:
    if type(seconds) is not int or not low <= seconds <= MAX_VISIBILITY:
        raise ValueError(f"{name} must be {low}..{MAX_VISIBILITY} seconds, got {seconds!r}")


def check_ttl(ttl: int | None) -> None:
    """A message's time to live: None (the service's 7 days), a number of seconds, or -1 (never)."""
    if ttl is not None and (type(ttl) is not int or (ttl < 1 and ttl != -1)):
        raise ValueError(f"ttl must be a positive number of seconds or -1 (never), got {ttl!r}")


@dataclass(frozen=True)
class TakenText:
    """A message received by ``StoredQueue.take_texts``: its text and what deleting it needs."""

    id: str
    pop_receipt: str
    text: str
    claim_check: ClaimCheck | None = None


class PoisonQueue(StoredQueue):
    """``<queue>-poison``: messages moved aside, each in an envelope that keeps everything."""

    def add(self, entry_text: str) -> None:
        """Store an envelope; poison copies never expire (ttl -1)."""
        try:
            self.put_text(entry_text, ttl=-1)
        except ResourceNotFoundError:  # the poison queue is created on first use
            self.create()
            self.put_text(entry_text, ttl=-1)

    def put(
        self, *, source: str, reason: str, dequeue_count: int, payload: str, encoding: str, message_id: str
    ) -> None:
        """Keep a message moved aside from the queue ``source``, with why, in its envelope (the
        source logs the move: operators find it under the work queue's logger)."""
        envelope = poison_envelope(
            reason=reason,
            dequeue_count=dequeue_count,
            queue=source,
            payload=payload,
            payload_encoding=encoding,
            message_id=message_id,
        )
        self.add(envelope)

    def peek(self, max_messages: int = 32) -> list[PoisonEntry]:
        return [entry for _, entry in self.peek_with_ids(max_messages)]

    def peek_with_ids(self, max_messages: int = 32) -> list[tuple[str, PoisonEntry]]:
        """The front of the poison queue as (message id, envelope), without taking anything."""
        entries = []
        for raw in self._peek_raw(max_messages):
            try:
                text, _ = self._resolve(raw.content)
                entry = PoisonEntry.from_text(text)
            except (ClaimCheckMissingError, ValueError, KeyError, TypeError) as exc:
                entry = self._not_an_envelope(raw, f"not a poison envelope: {exc}")  # listed, not a crash
            entries.append((raw.id, entry))
        return entries

    def _not_an_envelope(self, raw: StorageQueueMessage, reason: str) -> PoisonEntry:
        """What an operator sees of text in a poison queue that no move put there (sent by hand)."""
        payload, encoding = stored_text(raw.content)
        return PoisonEntry(
            reason=reason,
            dequeue_count=raw.dequeue_count or 0,
            queue=self.name,
            moved_at=raw.inserted_on or datetime.now(UTC),
            payload=payload,
            payload_encoding=encoding,
            message_id=raw.id,
        )

    def take(self, max_messages: int, *, visibility_timeout: int) -> list[TakenPoison]:
        """One bounded receive: envelopes hidden for ``visibility_timeout`` s until removed or released."""
        page = self._receive_page(max_messages, visibility_timeout)
        taken = []
        for raw in page:
            try:
                text, check = self._resolve(raw.content)
                entry: PoisonEntry | None = PoisonEntry.from_text(text)
                error = None
            except (ClaimCheckMissingError, ValueError, KeyError, TypeError) as exc:
                check, entry, error = None, None, f"not a poison envelope: {exc}"
            taken.append(
                TakenPoison(
                    id=raw.id,
                    pop_receipt=delivered(raw.pop_receipt, "pop_receipt"),
                    entry=entry,
                    error=error,
                    claim_check=check,
                )
            )
        return taken

    def remove(self, taken: TakenPoison) -> bool:
        """Delete a taken envelope (and its claim blob); False if it is no longer ours."""
        return self._delete_with_claim(taken.id, taken.pop_receipt, taken.claim_check)

    def release(self, taken: TakenPoison) -> None:
        """Make a taken envelope visible again at once."""
        self._set_visibility(taken.id, taken.pop_receipt, 0)


@dataclass(frozen=True)
class TakenPoison:
    """A poison envelope received for an operator action; ``entry`` is None if unreadable."""

    id: str
    pop_receipt: str
    entry: PoisonEntry | None
    error: str | None = None
    claim_check: ClaimCheck | None = None
