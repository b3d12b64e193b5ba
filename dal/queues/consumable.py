"""What a listener consumes: one queue, a sharded queue or priority lanes, through one interface.

Also the delivery a listener holds (``ReceivedMessage``: the typed message and its receipt),
what one receive hands out (``Accepted``), what a peek sees, the hook told of a message moved
to poison, and one physical queue (``QueuePart``: what shards and lanes are made of).

``workers.runtime.listener`` receives, settles and renews through this protocol only, so it never asks
which kind of queue it holds. ``ImageProcessingQueue`` (one queue), ``ShardedQueue`` (K queues
consumed in turn) and ``PriorityLanes`` (lanes, highest priority first) implement it; settling
a message goes to the physical queue it came from (``ReceivedMessage.queue_name``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from dal.queues.messages import QueueMessage
from dal.queues.stored_queue import PoisonQueue
from dal.queues.wire import ClaimCheck

__all__ = ["Accepted", "Consumable", "PeekedMessage", "PoisonHook", "QueuePart", "ReceivedMessage"]


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


class Accepted(list[ReceivedMessage]):
    """What one receive handed out, and how many messages it moved to poison instead (``poisoned``).

    A receive that moved messages aside proves nothing about what is behind them: its caller
    receives again at once, as after a message it handled, rather than waiting for more work
    (``workers.runtime.listener``); a consumer of several queues does not take that queue for empty.
    """

    def __init__(self, messages: Iterable[ReceivedMessage] = (), *, poisoned: int = 0) -> None:
        super().__init__(messages)
        self.poisoned = poisoned


@dataclass(frozen=True)
class PeekedMessage:
    """A message seen without taking it; ``message`` is None (and ``error`` says why) if it is bad."""

    message: QueueMessage | None
    id: str
    dequeue_count: int
    inserted_on: datetime | None
    expires_on: datetime | None
    error: str | None = None


class PoisonHook(Protocol):
    """Told after a valid message was moved to poison, so that its job can be failed.

    ``permanent`` is True when the handler said the message can never succeed
    (``PermanentJobError``: ``reason`` is then the handler's own sentence for a person), False
    when it was moved for failing again and again (``reason`` says how often and why).
    """

    def __call__(self, received: ReceivedMessage, reason: str, *, permanent: bool = False) -> None: ...


@runtime_checkable
class Consumable(Protocol):
    """A source of messages for one listener."""

    name: str  # what hints are published under
    logical_name: str  # the message type's queue (``slicerequest``), for metrics and logs
    # Skip parts found empty a moment ago: set by a listener while wake-up hints cover it.
    skip_known_empty: bool

    @property
    def timeout(self) -> int:
        """The default lease (visibility timeout) in seconds."""
        ...

    @property
    def poison_threshold(self) -> int:
        """Deliveries allowed before a message goes to poison."""
        ...

    @property
    def parts(self) -> Sequence[QueuePart]:
        """The physical queues behind it (one for a plain queue)."""
        ...

    def accept_messages(
        self, max_messages: int = 16, *, visibility_timeout: int | None = None, on_poison: PoisonHook | None = None
    ) -> Accepted:
        """One bounded receive; ``Accepted.poisoned`` counts what it moved aside instead."""
        ...

    def delete(self, received: ReceivedMessage) -> bool: ...

    def renew(self, received: ReceivedMessage, timeout: int | None = None) -> ReceivedMessage | None: ...

    def release(self, received: ReceivedMessage, *, delay: int = 0) -> bool: ...

    def move_to_poison(self, received: ReceivedMessage, reason: str) -> None: ...

    def peek(self, max_messages: int = 32) -> list[PeekedMessage]: ...

    def approximate_depth(self) -> int: ...

    def hinted(self, lane: int | None) -> None:
        """A wake-up hint for ``lane`` (None: unknown) arrived; a plain queue keeps no such state."""
        ...


@runtime_checkable
class QueuePart(Consumable, Protocol):
    """One physical queue (``ImageProcessingQueue``): a ``Consumable`` that is its own only part,
    with the names, address and poison queue that metrics, shards and lanes read of each part."""

    short_name: str  # the unprefixed name: ``slicerequest-1`` for a shard
    poison: PoisonQueue

    @property
    def url(self) -> str: ...
