"""Operator actions on poison queues: list, requeue (one by id or all), purge.

A poison envelope (``dal.queues.wire.poison_envelope``) keeps the original payload, so a message
moved aside can go back to its work queue once the cause is fixed. Requeue sends the payload
as a *new* message (fresh id, dequeue count 0), then deletes the envelope: send-then-delete,
so a crash in between leaves a duplicate, never a loss; handlers are idempotent. The job's
event log gets a ``requeued`` note, and a job the poison move had failed is reopened
(``failed`` → ``queued``/``rendering``/``stitching`` by queue, error cleared), otherwise the
roles would ignore the message of a finished job. Envelopes whose payload is not a message
of that queue (garbage, wrong type) cannot be requeued: they stay, and the result says why.

Finding one envelope by id means receiving: the queue service has no "get by id". Envelopes
are received in batches of 32 with a short invisibility, the wanted ones acted on, the rest
released at once, until the queue yields nothing new. Purge deletes envelopes the same way
(by id) or clears the poison queue (all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dal.config import IMAGE_REQUEST_QUEUE, IMAGE_RESPONSE_QUEUE
from dal.errors import JobNotFoundError, QueueMessageFormatException
from dal.jobs.model import Job, JobStatus
from dal.jobs.store import JobStore
from dal.queues.messages import QueueMessage
from dal.queues.stored_queue import MAX_BATCH, TakenPoison
from dal.queues.wire import PoisonEntry
from dal.queues.work_queue import ImageProcessingQueue

__all__ = ["PoisonActionResult", "PoisonListing", "list_poison", "purge", "requeue"]

log = logging.getLogger(__name__)

# Long enough to act on a batch, short enough that an interrupted action hides nothing for long.
_HOLD_SECONDS = 30
# A full pass over a deep poison queue stops after this many receives (32 each).
_MAX_ROUNDS = 1000


@dataclass(frozen=True)
class PoisonListing:
    id: str
    entry: PoisonEntry


@dataclass
class PoisonActionResult:
    """What an operator action did: ids acted on, ids left (with why), ids not found."""

    done: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    cleared: int = 0  # purge of a whole queue: its approximate depth before the clear

    @property
    def count(self) -> int:
        return self.cleared or len(self.done)


def list_poison(queue: ImageProcessingQueue, limit: int = MAX_BATCH) -> list[PoisonListing]:
    """The front of ``queue``'s poison queue (peek: changes nothing)."""
    return [PoisonListing(id, entry) for id, entry in queue.poison.peek_with_ids(limit)]


def requeue(
    queue: ImageProcessingQueue, jobs: JobStore | None, *, message_id: str | None = None, actor: str = "operator"
) -> PoisonActionResult:
    """Put poison envelopes (one by id, or all with None) back on ``queue`` as fresh messages."""
    result = PoisonActionResult()

    def act(taken: TakenPoison) -> bool:
        message, why = _message_of(queue, taken)
        if message is None:
            result.skipped[taken.id] = why
            return True  # stays in poison
        queue.submit(message)  # first send, then delete: a crash between duplicates, never loses
        queue.poison.remove(taken)
        result.done.append(taken.id)
        log.info("queue %s: poison message %s requeued by %s", queue.name, taken.id, actor)
        if jobs is not None:
            _note_requeue(jobs, queue, message, taken, actor)
        return False

    _walk(queue, message_id, act, result)
    return result


def purge(queue: ImageProcessingQueue, *, message_id: str | None = None) -> PoisonActionResult:
    """Delete one poison envelope by id, or all of them (None)."""
    result = PoisonActionResult()
    if message_id is None:
        result.cleared = queue.poison.approximate_depth()
        queue.poison.clear()
        return result

    def act(taken: TakenPoison) -> bool:
        if queue.poison.remove(taken):
            result.done.append(taken.id)
        return False

    _walk(queue, message_id, act, result)
    return result


def _walk(
    queue: ImageProcessingQueue,
    message_id: str | None,
    act: Callable[[TakenPoison], bool],
    result: PoisonActionResult,
) -> None:
    """Receive the poison queue batch by batch; ``act`` on the wanted envelopes, release the rest.

    ``act`` returns True when the envelope stays in the poison queue (to be released).
    Envelopes not wanted stay hidden until the walk ends, so each receive shows new ones; they
    are released at the end (or reappear by themselves after ``_HOLD_SECONDS`` if we crash).
    """
    seen: set[str] = set()
    held: list[TakenPoison] = []
    try:
        for _ in range(_MAX_ROUNDS):
            batch = queue.poison.take(MAX_BATCH, visibility_timeout=_HOLD_SECONDS)
            fresh = [t for t in batch if t.id not in seen]
            held.extend(t for t in batch if t.id in seen)
            if not fresh:
                break
            for taken in fresh:
                seen.add(taken.id)
                if message_id is None or taken.id == message_id:
                    if act(taken):
                        held.append(taken)
                else:
                    held.append(taken)
            if message_id is not None and message_id in seen:
                return
        if message_id is not None:
            result.missing.append(message_id)
    finally:
        for taken in held:
            queue.poison.release(taken)


def _message_of(queue: ImageProcessingQueue, taken: TakenPoison) -> tuple[QueueMessage | None, str]:
    entry = taken.entry
    if entry is None:
        return None, taken.error or "unreadable envelope"
    if entry.payload_encoding != "text":
        return None, "the payload is not text (it was not valid Base64/UTF-8 on the wire)"
    try:
        return QueueMessage.parse(entry.payload, queue_name=queue.logical_name), ""
    except QueueMessageFormatException as exc:
        return None, f"the payload is not a {queue.logical_name} message: {exc}"


_REOPEN_STATUS = {IMAGE_REQUEST_QUEUE: JobStatus.QUEUED, IMAGE_RESPONSE_QUEUE: JobStatus.STITCHING}


def _note_requeue(
    jobs: JobStore, queue: ImageProcessingQueue, message: QueueMessage, taken: TakenPoison, actor: str
) -> None:
    status = _REOPEN_STATUS.get(queue.logical_name, JobStatus.RENDERING)

    def reopen(job: Job) -> Job | None:
        if job.status != JobStatus.FAILED:
            return None
        return replace(job, status=status, error=None, finished_at=None)

    reopened = ""
    try:
        if jobs.update(message.client_id, message.request_id, reopen).wrote:
            reopened = f"; job reopened as {status}"
    except JobNotFoundError:
        pass
    reason = taken.entry.reason if taken.entry is not None else "?"
    jobs.add_event(
        message.request_id,
        "requeued",
        actor=actor,
        message=f"message requeued from {queue.poison.name} by {actor} (it was moved aside: {reason}){reopened}",
    )
