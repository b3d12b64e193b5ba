"""The work queues: typed receive and send, visibility renewal, poison handling, claim checks.

``ImageProcessingQueue`` wraps one Azure Storage queue and its ``<name>-poison`` queue.
Everything on the wire is Base64 text (see ``dal.queues.wire``). A receive is one bounded call
(1..32 messages); before a message is handed out it is checked, and moved to the poison
queue instead when its dequeue count is over the threshold, when its text is not Base64 of
UTF-8, when its claim-check blob is gone, or when it does not parse as a message of this
queue; the receive says how many it moved (``Accepted.poisoned``), so that its caller does
not take a receive of nothing but poison for an empty queue. A stale pop receipt (someone
else owns the message now) gives False/None, never an exception.

``poison_threshold`` and ``timeout`` come from the queue's metadata (``dal.queues.queue_settings``),
so an operator can tune a queue without a redeploy. The workflow's queues by name are
``dal.queues.accessor.QueueAccessor``'s.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from azure.core.exceptions import HttpResponseError

from dal.config import (
    CLAIM_CHECK_CONTAINER,
    POISON_SUFFIX,
    Settings,
    StorageClients,
)
from dal.errors import ClaimCheckMissingError, QueueMessageFormatException
from dal.hints.channel import HintChannel, channel_from_env
from dal.names import prefixed
from dal.queues.consumable import Accepted, PeekedMessage, PoisonHook, ReceivedMessage
from dal.queues.lanes import lane_name
from dal.queues.messages import QueueMessage
from dal.queues.queue_settings import QueueSettings
from dal.queues.stored_queue import (
    PoisonQueue,
    StoredQueue,
    check_batch,
    check_ttl,
    check_visibility,
    delivered,
)
from dal.queues.tracing import traced_submit
from dal.queues.wire import ClaimCheck, Undecodable, stored_text

if TYPE_CHECKING:
    from azure.storage.queue import QueueMessage as StorageQueueMessage
    from azure.storage.queue import QueueServiceClient

__all__ = [
    "ImageProcessingQueue",
    "make_visible_now",
]

log = logging.getLogger(__name__)


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
        # The poison threshold and default invisibility, from the queue's metadata (dal.queues.queue_settings).
        self.tuning = QueueSettings(lambda: self._client, self.name, self.settings)
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
        self.tuning.refresh()

    @property
    def poison_threshold(self) -> int:
        """Deliveries allowed before a message is moved to poison (metadata ``poisonthreshold``)."""
        return self.tuning.poison_threshold

    @property
    def timeout(self) -> int:
        """Default invisibility in seconds (metadata ``defaulttimeout``)."""
        return self.tuning.timeout

    def ensure_exists(self, *, poison_threshold: int | None = None, timeout: int | None = None) -> None:
        """Create the queue and its poison queue; write the given settings as metadata."""
        self.create()
        self.poison.create()
        if poison_threshold is not None or timeout is not None:
            self.configure(poison_threshold=poison_threshold, timeout=timeout)
        self.refresh()

    def configure(self, *, poison_threshold: int | None = None, timeout: int | None = None) -> None:
        """Store settings in the queue's metadata, where every process reads them."""
        self.tuning.configure(poison_threshold=poison_threshold, timeout=timeout)

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
            except Exception as exc:  # e.g. the poison move failed: it comes back after `timeout`
                log.exception("queue %s: could not check message %s; it will be redelivered", self.name, raw.id)
                if (raw.dequeue_count or 0) > threshold:  # a check that fails every time must not loop for good
                    accepted.poisoned += _poison_unchecked(self, raw, exc)
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
            message, check = self._parse(content or "")
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

    def _parse(self, content: str) -> tuple[QueueMessage, ClaimCheck | None]:
        """The message a received text is (its claim check resolved), and the check if any."""
        text, check = self._resolve(content)
        return QueueMessage.parse(text, queue_name=self.logical_name), check

    def _poison_raw(self, raw: StorageQueueMessage, reason: str, *, resolve: bool = True) -> None:
        """Move a message that could not become a ReceivedMessage; keep its text whatever it is
        (``resolve``: a claim check's payload, else the reference as stored)."""
        payload, encoding = stored_text(raw.content)
        check = None
        if encoding == "text" and resolve:
            try:
                payload, check = self._resolve(payload)
            except ClaimCheckMissingError:
                pass  # keep the reference itself: that is all there is
        log.warning("queue %s: message %s moved to %s: %s", self.name, raw.id, self.poison.name, reason)
        self.poison.put(
            source=self.name,
            reason=reason,
            dequeue_count=delivered(raw.dequeue_count, "dequeue_count"),
            payload=payload,
            encoding=encoding,
            message_id=raw.id,
        )
        self._delete_with_claim(raw.id, delivered(raw.pop_receipt, "pop_receipt"), check)

    # --- settle -----------------------------------------------------------------------

    def delete(self, received: ReceivedMessage) -> bool:
        """Delete after the work is durably written; False if another consumer owns it now."""
        return self._delete_with_claim(received.id, received.pop_receipt, received.claim_check)

    def renew(self, received: ReceivedMessage, timeout: int | None = None) -> ReceivedMessage | None:
        """Extend invisibility for long work; the result carries the new pop receipt (None if lost)."""
        seconds = self.timeout if timeout is None else timeout
        check_visibility("timeout", seconds, low=1)
        updated = self._set_visibility(received.id, received.pop_receipt, seconds)
        if updated is None:
            return None
        receipt = delivered(updated.pop_receipt, "pop_receipt")
        return dataclasses.replace(received, pop_receipt=receipt, next_visible_on=updated.next_visible_on)

    def release(self, received: ReceivedMessage, *, delay: int = 0) -> bool:
        """Hand a message back: visible again after ``delay`` seconds (0: at once)."""
        check_visibility("delay", delay, low=0)
        return self._set_visibility(received.id, received.pop_receipt, delay) is not None

    def move_to_poison(self, received: ReceivedMessage, reason: str) -> None:
        """Move a message aside now (a permanent error): copy with the reason, then delete."""
        log.warning("queue %s: message %s moved to %s: %s", self.name, received.id, self.poison.name, reason)
        self.poison.put(
            source=self.name,
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
        check_ttl(ttl)
        texts = []
        for message in batch:
            if not isinstance(message, QueueMessage) or self.logical_name != message.QUEUE:
                kind = getattr(message, "TYPE", type(message).__name__)
                raise QueueMessageFormatException(f"a {kind} message does not belong in queue {self.name!r}")
            texts.append(message.payload())
        self.put_texts(texts, delay=delay, ttl=ttl)
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
        return [_peeked(raw, self._parse) for raw in self._peek_raw(max_messages)]


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


def _poison_unchecked(queue: ImageProcessingQueue, raw: StorageQueueMessage, error: Exception) -> bool:
    """Move a message whose check raised on every delivery, its text kept as stored (nothing
    resolved: that may be what fails); False when even that fails (it comes back)."""
    reason = f"could not be checked on {raw.dequeue_count} deliveries: {type(error).__name__}: {error}"
    try:
        queue._poison_raw(raw, reason[:500], resolve=False)
    except Exception:
        log.exception("queue %s: could not move message %s to poison either", queue.name, raw.id)
        return False
    return True


def _peeked(raw: StorageQueueMessage, parse: Callable[[str], tuple[QueueMessage, ClaimCheck | None]]) -> PeekedMessage:
    """A peeked message as the queue's ``parse`` reads it; a bad one has no message and says why."""
    message, error = None, None
    if isinstance(raw.content, Undecodable):
        error = raw.content.reason
    else:
        try:
            message, _ = parse(raw.content or "")
        except (QueueMessageFormatException, ClaimCheckMissingError) as exc:
            error = str(exc)
    times = {"inserted_on": raw.inserted_on, "expires_on": raw.expires_on}
    count = delivered(raw.dequeue_count, "dequeue_count")
    return PeekedMessage(message=message, id=raw.id, dequeue_count=count, error=error, **times)
