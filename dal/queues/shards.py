"""Queue sharding: ``slicerequest`` split into K queues when one queue is not enough.

One Azure queue serves about 2,000 messages/s (the service's scalability target); past that, spread
the work. ``PHOTOMOSAICS_SLICE_SHARDS=K`` (default 1: no sharding) makes ``slicerequest``
the queues ``slicerequest``, ``slicerequest-1`` ... ``slicerequest-<K-1>`` (shard 0 keeps the
old name, so K = 1 is exactly the unsharded app and raising K needs no migration).

- **Producers spread**: ``shard_index`` deals a job's slices round-robin over the shards,
  starting from a shard derived from the request id, so one job and many jobs both spread
  evenly, and a redelivered dispatch sends each slice to the same shard again.
- **Consumers rotate**: ``ShardedQueue`` is what a processor's listener consumes. Each
  receive starts at the shard after the one that last gave work and moves on while shards
  are empty, so every shard is served in turn and none starves, with one listener (one
  back-off, one set of leases) per process. Settling a message (delete, renew, release,
  poison) goes to the shard it came from (``ReceivedMessage.queue_name``).
- **Depth** is the sum over shards; ``QueueAccessor.monitored`` lists every shard, so
  ``/api/queues``, the Queues page, ``photomosaics queues`` and the metrics show each one.

Lowering K strands messages on the dropped shards: drain them first (or raise K back).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Sequence

from dal.queues.consumable import Accepted, PeekedMessage, PoisonHook, QueuePart, ReceivedMessage

__all__ = ["MAX_SHARDS", "ShardedQueue", "shard_index", "shard_names"]

MAX_SHARDS = 32


def shard_names(base: str, count: int) -> list[str]:
    """The queue names of ``count`` shards of ``base`` (``base``, ``base-1``, ...)."""
    return [base] + [f"{base}-{i}" for i in range(1, count)]


def shard_index(request_id: str, sequence: int, count: int) -> int:
    """The shard of slice ``sequence`` of job ``request_id`` among ``count`` shards."""
    return (zlib.crc32(request_id.encode("ascii")) + sequence) % count


class ShardedQueue:
    """Several queues of one message type consumed as one (see the module docstring): a ``Consumable``."""

    skip_known_empty = False  # every receive tries the shards in turn

    def __init__(self, shards: Sequence[QueuePart]) -> None:
        if not shards:
            raise ValueError("a sharded queue needs at least one shard")
        self.shards = list(shards)
        first = self.shards[0]
        self.logical_name = first.logical_name
        self.short_name = first.logical_name
        self.name = first.name  # what hints are published under (ImageProcessingQueue.hint_name)
        self.poison = first.poison
        self._by_name = {shard.name: shard for shard in self.shards}
        self._next = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ShardedQueue({[s.name for s in self.shards]!r})"

    @property
    def parts(self) -> list[QueuePart]:
        return list(self.shards)

    def hinted(self, lane: int | None) -> None:
        """Shards of one lane: a hint changes nothing in the rotation."""

    @property
    def url(self) -> str:
        return self.shards[0].url

    @property
    def timeout(self) -> int:
        return self.shards[0].timeout

    @property
    def poison_threshold(self) -> int:
        return self.shards[0].poison_threshold

    def accept_messages(
        self, max_messages: int = 16, *, visibility_timeout: int | None = None, on_poison: PoisonHook | None = None
    ) -> Accepted:
        """One receive from the next shard with work, starting after the last one that had some.

        A shard whose receive moved messages to poison had some: that result is returned as it
        is (``Accepted.poisoned``), and the caller receives again, rather than asking the
        other shards in the same call and taking the lot for empty."""
        with self._lock:
            start = self._next
        for step in range(len(self.shards)):
            index = (start + step) % len(self.shards)
            batch = self.shards[index].accept_messages(
                max_messages, visibility_timeout=visibility_timeout, on_poison=on_poison
            )
            if batch or batch.poisoned:
                with self._lock:
                    self._next = (index + 1) % len(self.shards)
                return batch
        with self._lock:
            self._next = (start + 1) % len(self.shards)
        return Accepted()

    def _shard_of(self, received: ReceivedMessage) -> QueuePart:
        return self._by_name[received.queue_name]

    def delete(self, received: ReceivedMessage) -> bool:
        return self._shard_of(received).delete(received)

    def renew(self, received: ReceivedMessage, timeout: int | None = None) -> ReceivedMessage | None:
        return self._shard_of(received).renew(received, timeout)

    def release(self, received: ReceivedMessage, *, delay: int = 0) -> bool:
        return self._shard_of(received).release(received, delay=delay)

    def move_to_poison(self, received: ReceivedMessage, reason: str) -> None:
        self._shard_of(received).move_to_poison(received, reason)

    def peek(self, max_messages: int = 32) -> list[PeekedMessage]:
        found: list[PeekedMessage] = []
        for shard in self.shards:
            found.extend(shard.peek(max_messages))
            if len(found) >= max_messages:
                break
        return found[:max_messages]

    def approximate_depth(self) -> int:
        return sum(shard.approximate_depth() for shard in self.shards)
