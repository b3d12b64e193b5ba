"""The one queue listener runtime every consumer uses (controller, processor, responder).

It does what the Azure WebJobs queue trigger does, a little tighter:

- **Batch receive** of up to ``batch_size`` (1..32) messages per call, but never more than
  the listener can start soon: it holds at most ``concurrency + prefetch`` messages and
  fetches again when that drops to half (WebJobs' "new batch threshold"). A held message's
  invisibility is ticking, and another worker could have done it, so hoarding is a cost.
- **Elastic concurrency** (seed 001 ``QueueWorkDetected`` / ``GetOptimalDequeueTaskCount``):
  between ``min_concurrency`` and ``concurrency`` handlers at once. A full batch (work
  detected after an idle spell included; a short one emptied the queue, so no depth is
  worth a transaction) reads the approximate queue depth and grows the pool to
  ``workers.elastic.optimal_concurrency``; the first empty receive shrinks it back to the
  minimum (``QueueEmpty``). ``min_concurrency == concurrency`` (the default) is a fixed pool.
- **At-least-once**: a message is deleted only after its handler returned, i.e. after the
  work is durably written. A crash anywhere earlier makes it visible again. A message whose
  handler succeeded no longer counts against ``capacity`` while it is deleted: the next
  receive goes out beside that delete, not after it (a one-at-a-time processor saves a
  round trip per slice; the delete still happens, and a crash meanwhile only redelivers).
- **Poison**: malformed payloads and messages past the threshold are moved aside by
  ``accept_messages`` before a handler sees them; ``PermanentJobError`` goes to poison at
  once with its reason; a transient failure on the last allowed attempt goes to poison at
  once too (WebJobs would wait another delay and receive it again just to move it).
- **Retry delay**: a failed message is released with ``retry_delay * 2**(dequeue_count-1)``
  seconds of invisibility (capped), never redelivered in a tight loop.
- **Lease renewal**: a renewal thread extends the invisibility of every held message once
  half its timeout has passed, and keeps the new pop receipt for the final delete.
- **Idle back-off**: ``poll_delay`` — from ``poll_min``, doubling, ±20 % jitter, saturating
  at exactly ``poll_max``; reset by the first message that arrives, or by ``nudge()`` (a
  role nudges its other listeners when one of them gets work).
- **Work-detected hints** (``dal.hints.channel``): with a hint channel the listener subscribes to
  its queue; a hint is a ``nudge()``, so a message sent on this machine is picked up at once,
  and the idle poll, now only the safety net for lost hints and other machines' sends,
  backs off to ``poll_max_hinted`` (60 s) instead of ``poll_max``, as long as the
  subscription is healthy (a pub/sub server that is down: back to ``poll_max`` meanwhile).
  While covered, an empty receive is ``QueueEmpty``: the listener waits for a hint, a retry
  it scheduled, or that cap, instead of ramping up from ``poll_min`` (``_idle_delay``).
- **Hint credit** (no trailing empty receive): a hint says how many messages its send added
  (``dal.hints.payload``). The listener keeps that *credit*, minus what it received; a receive
  that came back short of what it asked for (the queue had no more) resets it to the hints
  heard during that receive. While covered, a listener whose credit is spent goes back to
  the ``QueueEmpty`` wait after a batch instead of receiving again only to find nothing: the
  controller's receive of each slice response used to be followed by an empty one, and so
  on for every listener after every job (7 of a small job's 70 transactions). Unknown counts
  (a start-up backlog, a hand-back, a reconnect, an older publisher) are infinite credit:
  poll until a receive proves the queue empty, as before. Competing consumers share the
  same hints, so a credit may be too high (one empty receive, as before), never too low
  for a sent message, except for a lost hint, which the safety-net cap covers as always.
  A message released with a retry delay counts as credit when it is due.
  **Taken notices**: competing consumers hear the same hints, so each would keep credit for
  messages a peer took, and receive once more to find nothing (a small job's two processors:
  2 of its 53 transactions). So a hint-covered listener that received messages tells its peers
  on the channel (``t<count>~<sender>``, ``dal.hints.payload``: no storage transaction), and a
  peer lowers its credit by that count (never below zero; unknown credit stays unknown; its own
  notices come back to it and are ignored, and one heard twice over a fan-out channel counts
  once). A notice that arrives late leaves a credit too high (one empty receive, as before);
  one that arrives early, too low (the next hint or the safety-net poll): latency at worst,
  never a lost message.
- **Lease journal** (``workers.leases.LeaseJournal``): the held messages and their current
  pop receipts, in a local file the supervisor reads to hand them back if we die.
- **Stop**: ``stop()`` ends receiving, hands back unstarted messages at once (visibility 0),
  waits up to ``grace`` for running handlers and releases whatever is still running then;
  ``stop(immediate=True)`` releases everything held without waiting.

Every wait is an ``Event.wait(timeout)``, so a stop request is noticed at once.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dal.config import Settings
from dal.hints.channel import HintChannel, HintSubscription
from dal.queues.work_queue import ImageProcessingQueue, PoisonHook, ReceivedMessage
from dal.queues.stored_queue import MAX_BATCH  # the service's limit per receive
from workers.backoff import poll_delay, retry_delay_for
from workers.elastic import DEPTH_CHECK_INTERVAL, optimal_concurrency
from workers.errors import PermanentJobError, RetryLater
from workers.leases import HeldMessage, LeaseJournal, LeaseKeeper
from workers.logfmt import kv, message_context

__all__ = ["Handler", "PoisonHook", "QueueListener", "poll_delay", "retry_delay_for", "MAX_BATCH"]

log = logging.getLogger(__name__)
# The listener's defaults are the application's (dal.config): written once, there.
_DEFAULTS = Settings()

Handler = Callable[[ReceivedMessage], None]
# ``PoisonHook`` (dal.queues.work_queue): called after the listener moved a message to poison, with the
# reason for a person and whether the handler called it permanent; the roles fail the job
# there, and only there. Its own failures are logged, never raised.



class QueueListener:
    """Receive messages from one queue and run ``handler`` on each; see the module docstring.

    ``run`` blocks until the loop ends (stop, ``burst`` and empty, or ``max_messages``
    received and done) and returns how many messages a handler finished (success or not).
    ``stats`` counts receive calls (and empty ones) and message outcomes: received, handled,
    succeeded, failed, poisoned, released, renewed, lost.
    """

    def __init__(
        self,
        queue: ImageProcessingQueue,
        handler: Handler,
        *,
        name: str,
        batch_size: int = _DEFAULTS.batch_size,
        concurrency: int = 1,
        prefetch: int = 0,
        poll_min: float = _DEFAULTS.poll_min_interval,
        poll_max: float = _DEFAULTS.poll_max_interval,
        retry_delay: float = _DEFAULTS.retry_delay,
        max_retry_delay: float = 300.0,
        grace: float = 30.0,
        visibility_timeout: int | None = None,
        on_poison: PoisonHook | None = None,
        rng: random.Random | None = None,
        min_concurrency: int | None = None,
        hints: HintChannel | None = None,
        poll_max_hinted: float | None = None,
        journal: LeaseJournal | None = None,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH}, got {batch_size}")
        if concurrency < 1 or prefetch < 0:
            raise ValueError(f"concurrency must be >= 1 and prefetch >= 0, got {concurrency}, {prefetch}")
        if not 0 < poll_min <= poll_max:
            raise ValueError(f"need 0 < poll_min <= poll_max, got {poll_min}, {poll_max}")
        min_concurrency = concurrency if min_concurrency is None else min_concurrency
        if not 1 <= min_concurrency <= concurrency:
            raise ValueError(f"need 1 <= min_concurrency <= concurrency, got {min_concurrency}, {concurrency}")
        if poll_max_hinted is not None and poll_max_hinted < poll_max:
            raise ValueError(f"poll_max_hinted must be >= poll_max, got {poll_max_hinted} < {poll_max}")
        if visibility_timeout is not None and visibility_timeout < 1:
            raise ValueError(f"visibility_timeout must be >= 1 s, got {visibility_timeout}")
        self.queue = queue
        self.handler = handler
        self.name = name
        self.batch_size = batch_size
        self.concurrency = concurrency  # the most handlers at once
        self.min_concurrency = min_concurrency
        self.active_concurrency = min_concurrency  # the current elastic target
        self.prefetch = prefetch
        self.hints = hints
        self.poll_max_hinted = poll_max_hinted if poll_max_hinted is not None else max(poll_max, _DEFAULTS.poll_max_hinted_interval)
        self.journal = journal
        self._subscription: HintSubscription | None = None
        self._journal_lock = threading.Lock()
        self._woken_by_hint = False
        # Hint credit (module docstring): messages announced and not yet received (inf: unknown),
        # and the hints heard since the current receive started.
        self._credit = math.inf
        self._hinted_during = 0.0
        self._sender = uuid.uuid4().hex[:16]  # names our taken notices, so we ignore our own
        self._notices = itertools.count(1)  # each notice "<sender>.<n>" is unique: heard twice, counted once
        self._heard: collections.deque[str] = collections.deque(maxlen=256)
        self._poll_asked = False  # nudge() since the last receive started
        self._retry_pending = False  # a message we released is visible again: worth a receive
        self._on_credit = False  # the next receive was decided on the hint credit alone
        self._was_idle = False  # the last receive came back empty (nudges do not change it)
        self._last_depth_check = -math.inf
        self._full_streak = 0  # receives in a row that came back full
        self._retry_due: list[float] = []  # heap: when messages we released with a delay are visible again
        self.poll_min = poll_min
        self.poll_max = poll_max
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.grace = grace
        self.visibility_timeout = visibility_timeout
        self.on_poison = on_poison
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._held: dict[str, HeldMessage] = {}
        self._settling = 0  # held messages whose handler returned, being deleted/released now
        self._stopping = threading.Event()
        self._immediate = threading.Event()
        self._changed = threading.Event()  # a handler finished, or stop was requested
        self._wake = threading.Event()  # ends an idle wait early: stop() or nudge()
        # Called (in the receive thread) whenever a batch arrived; ``Role`` uses it to nudge the
        # process's other listeners: work on one queue predicts work on the others.
        self.on_activity: Callable[[], None] | None = None
        self._idle_polls = 0
        self.stats: dict[str, int] = dict.fromkeys(
            ("receives", "empty_receives", "received", "handled", "succeeded", "failed", "poisoned", "released",
             "renewed", "lost", "hints", "hint_pickups", "poll_pickups", "depth_checks", "scale_ups", "scale_downs",
             "peak_concurrency", "running", "peak_running", "peer_taken"),
            0,
        )

    # -- public -----------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Ask ``run`` to end (thread-safe, callable from a signal handler's thread)."""
        if immediate:
            self._immediate.set()
        self._stopping.set()
        self._changed.set()
        self._wake.set()

    def nudge(self) -> None:
        """Poll now and restart the idle back-off from ``poll_min`` (thread-safe)."""
        self._poll_asked = True
        self._idle_polls = 0
        self._wake.set()

    def _on_hint(self, count: int | None = None, lane: int | None = None) -> None:
        """A work-detected hint for our queue arrived (from the hint channel's thread): ``count``
        messages were sent (None: unknown), to priority lane ``lane`` (None: unknown)."""
        added = math.inf if count is None else max(0, count)
        with self._lock:
            self.stats["hints"] += 1
            self._credit += added
            self._hinted_during += added
        hinted = getattr(self.queue, "hinted", None)  # priority lanes: that lane is worth a call again
        if callable(hinted):
            hinted(lane)
        self._woken_by_hint = True
        self._idle_polls = 0
        self._wake.set()  # not nudge(): a hint of 0 messages asks for no poll (the credit decides)

    def _on_taken(self, count: int, sender: str) -> None:
        """A peer on our queue received ``count`` messages: they are no longer ours to expect."""
        if sender.partition(".")[0] == self._sender:
            return
        with self._lock:
            # Over a fan-out channel (local folder and server) a notice arrives twice, while a
            # hint from another machine arrives once: count each notice once, never too low.
            if sender in self._heard:
                return
            self._heard.append(sender)
            self.stats["peer_taken"] += count
            self._credit = max(0.0, self._credit - count)

    def _tell_peers(self, count: int) -> None:
        """Our taken notice (module docstring); only a hint-covered listener's peers keep credit."""
        if self.hints is None or not self.hint_covered:
            return
        try:
            self.hints.publish(self.queue.name, count, taken_by=f"{self._sender}.{next(self._notices)}")
        except Exception:  # an optimisation: a lost notice costs a peer one empty receive
            log.debug("taken notice not published", exc_info=True)

    @property
    def capacity(self) -> int:
        """Messages held at most right now: the elastic target plus the prefetch."""
        return self.active_concurrency + self.prefetch

    @property
    def new_batch_threshold(self) -> int:
        return self.capacity // 2

    @property
    def hint_covered(self) -> bool:
        """Subscribed to hints, and the subscription hears them right now."""
        subscription = self._subscription
        return subscription is not None and subscription.healthy

    @property
    def effective_poll_max(self) -> float:
        """The idle cap: far out while hints cover the queue, ``poll_max`` otherwise (no channel,
        or its server is down right now)."""
        return self.poll_max_hinted if self.hint_covered else self.poll_max

    @property
    def idle_polls(self) -> int:
        """Consecutive empty receives so far; 0 right after a message arrived."""
        return self._idle_polls

    def held_count(self) -> int:
        with self._lock:
            return len(self._held)

    def _in_hand(self) -> int:
        """Held messages still to be handled or running: what counts against ``capacity``."""
        with self._lock:
            return len(self._held) - self._settling

    def run(self, *, burst: bool = False, max_messages: int | None = None) -> int:
        """Receive and handle until stopped (or empty with ``burst``, or ``max_messages``)."""
        timeout = self._timeout()
        if self.hints is not None and self._subscription is None:
            try:
                self._subscription = self.hints.subscribe(self.queue.name, self._on_hint, self._on_taken)
            except (OSError, ValueError) as exc:
                log.warning(kv("listener.hints_unavailable", listener=self.name, error=str(exc)))
        log.info(kv("listener.start", listener=self.name, queue=self.queue.name, batch=self.batch_size,
                    concurrency=f"{self.min_concurrency}..{self.concurrency}", visibility_timeout=timeout,
                    poll_min=self.poll_min, poll_max=self.effective_poll_max,
                    hints=self._subscription is not None))  # fmt: skip
        self.stats["peak_concurrency"] = self.active_concurrency
        executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix=f"{self.name}-handler")
        renewer = LeaseKeeper(self.queue, self._held_records, timeout=timeout, name=f"{self.name}-renewer",
                              on_result=self._lease_result)  # fmt: skip
        renewer.start()
        try:
            self._receive_loop(executor, timeout, burst=burst, max_messages=max_messages)
            self._finish(executor)
        finally:
            if self._subscription is not None:
                self._subscription.close()
                self._subscription = None
            renewer.stop()
            executor.shutdown(wait=not self._immediate.is_set() and self.held_count() == 0, cancel_futures=True)
            self._journal()
        log.info(kv("listener.stop", listener=self.name, queue=self.queue.name, **self.stats))
        return self.stats["handled"]

    # -- the loop ---------------------------------------------------------------------

    def _timeout(self) -> int:
        """The lease: as asked, else the queue's default timeout (its metadata, else the settings')."""
        return self.visibility_timeout or self.queue.timeout

    def _receive_loop(
        self, executor: ThreadPoolExecutor, timeout: int, *, burst: bool, max_messages: int | None
    ) -> None:
        self._idle_polls = 0
        while not self._stopping.is_set():
            if max_messages is not None and self.stats["received"] >= max_messages:
                return
            held = self._in_hand()
            if held > self.new_batch_threshold:
                self._changed.wait(timeout=1.0)  # a finishing handler or stop() wakes us
                self._changed.clear()
                continue
            if self._on_credit:
                # We chose to receive again on the hint credit, and then waited for a free
                # handler: peers' taken notices heard meanwhile may have spent it. Check again
                # before paying for a receive that would come back empty.
                self._on_credit = False
                if not (self._poll_asked or self._expects_more()):
                    self._was_idle = True
                    self._wait_for_announced_work()
                    continue
            want = min(self.batch_size, self.capacity - held)
            if max_messages is not None:
                want = min(want, max_messages - self.stats["received"])
            leased_at = time.monotonic()  # the lease starts no earlier than the request
            by_hint, self._woken_by_hint = self._woken_by_hint, False
            if hasattr(self.queue, "skip_known_empty"):  # priority lanes: trust hints while they are heard
                self.queue.skip_known_empty = self.hint_covered
            with self._lock:  # only hints from here on can announce what this receive misses
                self._hinted_during = 0.0
            self._wake.clear()
            self._poll_asked = False
            self._retry_pending = False
            failed = False
            try:
                batch = self.queue.accept_messages(want, visibility_timeout=timeout, on_poison=self.on_poison)
            except Exception as exc:  # storage trouble the SDK's retries did not ride out
                log.error(kv("listener.receive_failed", listener=self.name, queue=self.queue.name,
                             error=f"{type(exc).__name__}: {exc}"))  # fmt: skip
                batch, failed = [], True
            self._settle_credit(len(batch), want, failed=failed)
            self._count("receives")
            if not batch:
                self._count("empty_receives")
            if batch:
                self._tell_peers(len(batch))
                work_detected, self._was_idle = self._was_idle, False
                if work_detected:  # seed 001's QueueWorkDetected: after idle polls, work is here
                    self._count("hint_pickups" if by_hint else "poll_pickups")
                    log.info(kv("listener.work_detected", listener=self.name, queue=self.queue.name,
                                by="hint" if by_hint else "poll"))  # fmt: skip
                self._idle_polls = 0
                for received in batch:
                    self._start(executor, received, leased_at)
                self._journal()
                # A short batch emptied the queue: no depth worth a transaction. A full one of a
                # single message says nothing yet; two in a row (or a full bigger one) is a backlog,
                # unless the hints announced no more than we took (then it is one message at a time).
                more = burst or self._expects_more()
                self._on_credit = more and not burst and self.hint_covered
                self._full_streak = self._full_streak + 1 if len(batch) >= want and more else 0
                if self._full_streak and (want > 1 or self._full_streak >= 2):
                    self._scale_up()
                self._notify_activity()
                if more:
                    continue
                # Covered by hints and nothing more announced: the QueueEmpty wait, not a receive
                # that would come back empty. A hint, a due retry, stop() or the cap end it.
                self._was_idle = True
                self._wait_for_announced_work()
                continue
            self._was_idle = True
            self._full_streak = 0
            self._scale_down()
            if burst and self.held_count() == 0 and not self._visible_left():
                return
            if burst:
                self._changed.wait(timeout=1.0)
                self._changed.clear()
                continue
            self._idle_polls += 1
            if not self._stopping.is_set():  # a stop between our clear() and here set _stopping first
                self._wake.wait(self._idle_delay())
            self._wake.clear()

    def _settle_credit(self, got: int, want: int, *, failed: bool) -> None:
        """The hint credit after a receive of ``got`` messages out of ``want``."""
        with self._lock:
            during, self._hinted_during = self._hinted_during, 0.0
            if failed:  # we learnt nothing about the queue: poll again, as before
                self._credit = math.inf
            elif got < want:  # the queue had no more: older hints are spent
                self._credit = during
            else:
                self._credit = max(self._credit - got, during)

    def _expects_more(self) -> bool:
        """After a batch: receive again at once? Yes without a healthy hint subscription (no
        credit to trust), with credit left, or when a message we released is due again."""
        if not self.hint_covered:
            return True
        now = time.monotonic()
        with self._lock:
            due = False
            while self._retry_due and self._retry_due[0] <= now:  # visible again: unannounced work
                heapq.heappop(self._retry_due)
                due = True
            self._retry_pending = self._retry_pending or due  # until a receive goes out for it
            return self._retry_pending or self._credit > 0

    def _wait_for_announced_work(self) -> None:
        """After a batch, with the hint credit spent: the ``QueueEmpty`` wait (``_idle_delay``)
        until a hint with credit, a nudge, a retry that is due, stop(), or the safety-net cap.
        A retry scheduled meanwhile (a handler that failed) wakes it to shorten the wait."""
        while not self._stopping.is_set():
            if not self._wake.wait(self._idle_delay()):
                return  # the cap, or the retry it waited for: poll
            self._wake.clear()
            if self._poll_asked or self._expects_more():
                return

    def _idle_delay(self) -> float:
        """How long to wait after an empty receive.

        Covered by a healthy hint subscription, seed 001's ``QueueEmpty`` with push: nothing
        will show up unannounced except a message we released with a retry delay, so wait for
        a hint, that retry, or the safety-net cap, whichever comes first (no ramp of
        0.1, 0.2, 0.4... s polls after every job: they were most of a small job's transactions).
        Otherwise the exponential ramp from ``poll_min`` to ``poll_max``.
        """
        if not self.hint_covered:
            return poll_delay(self._idle_polls, poll_min=self.poll_min, poll_max=self.effective_poll_max, rng=self._rng)
        capped = poll_delay(61, poll_min=self.poll_min, poll_max=self.poll_max_hinted, rng=self._rng)
        now = time.monotonic()
        with self._lock:
            while self._retry_due and self._retry_due[0] <= now:  # visible before this receive: seen
                heapq.heappop(self._retry_due)
            next_retry = self._retry_due[0] if self._retry_due else math.inf
        return min(capped, max(self.poll_min, next_retry - now + 0.05))

    def _scale_up(self) -> None:
        """WorkDetected / a full batch: size the handler pool to the approximate depth."""
        if self.active_concurrency >= self.concurrency:
            return
        now = time.monotonic()
        if now - self._last_depth_check < DEPTH_CHECK_INTERVAL:
            return
        self._last_depth_check = now
        try:
            depth = int(self.queue.approximate_depth())
        except Exception as exc:
            log.warning(kv("listener.depth_failed", listener=self.name, error=f"{type(exc).__name__}: {exc}"))
            return
        self._count("depth_checks")
        # The approximate count includes the messages we hold (invisible): no need to add them.
        target = optimal_concurrency(depth, low=self.min_concurrency, high=self.concurrency)
        if target > self.active_concurrency:
            log.info(kv("listener.scale_up", listener=self.name, depth=depth, concurrency=target))
            self.active_concurrency = target
            self._count("scale_ups")
            with self._lock:
                self.stats["peak_concurrency"] = max(self.stats["peak_concurrency"], target)

    def _scale_down(self) -> None:
        """QueueEmpty: back to the minimum (one slow poller and ``min_concurrency`` handlers)."""
        if self.active_concurrency > self.min_concurrency:
            log.info(kv("listener.scale_down", listener=self.name, concurrency=self.min_concurrency))
            self.active_concurrency = self.min_concurrency
            self._count("scale_downs")

    def _journal(self) -> None:
        if self.journal is not None:
            with self._journal_lock:  # snapshot and write together: the newest snapshot wins
                self.journal.record(self.name, self.queue.name, self._held_records())

    def _notify_activity(self) -> None:
        if self.on_activity is None:
            return
        try:
            self.on_activity()
        except Exception:
            log.exception(kv("listener.activity_hook_failed", listener=self.name))

    def _visible_left(self) -> bool:
        """Burst mode: an empty receive may only mean its messages all went to poison."""
        try:
            return bool(self.queue.peek(1))
        except Exception:
            return False

    def _start(self, executor: ThreadPoolExecutor, received: ReceivedMessage, leased_at: float) -> None:
        record = HeldMessage(received=received, current=received, leased_at=leased_at)
        with self._lock:
            self._held[received.id] = record
            self.stats["received"] += 1
        record.future = executor.submit(self._handle, record)

    def _finish(self, executor: ThreadPoolExecutor) -> None:
        """After receiving ends: hand back unstarted messages, wait for running ones."""
        deadline = math.inf  # burst / max_messages: wait for the work, until a stop comes
        while self.held_count() and not self._immediate.is_set():
            if self._stopping.is_set() and deadline == math.inf:
                self._hand_back_unstarted()
                deadline = time.monotonic() + self.grace
            if time.monotonic() >= deadline:
                break
            self._changed.wait(timeout=min(0.5, deadline - time.monotonic()))
            self._changed.clear()
        with self._lock:
            leftovers = list(self._held.values())
        for record in leftovers:  # grace ran out (or immediate stop): make them visible again
            reason = "immediate stop" if self._immediate.is_set() else f"still running after {self.grace:.0f} s grace"
            self._release(record, delay=0, why=reason)

    def _hand_back_unstarted(self) -> None:
        with self._lock:
            records = list(self._held.values())
        for record in records:  # not started yet: cancel and release at once
            if record.future is not None and record.future.cancel():
                self._release(record, delay=0, why="not started before stop")
                self._forget(record)

    # -- one message ------------------------------------------------------------------

    def _fields(self, record: HeldMessage) -> dict[str, Any]:
        message = record.received.message
        return {
            "listener": self.name,
            "queue": self.queue.name,
            "message_id": record.received.id,
            "dequeue_count": record.received.dequeue_count,
            "request_id": getattr(message, "request_id", None),
            "type": getattr(message, "TYPE", None),
        }

    def _handle(self, record: HeldMessage) -> None:
        fields = self._fields(record)
        with record.lock:
            already_settled = record.done  # released by a stop before it could start
            record.running = not already_settled
        if already_settled:
            self._forget(record)
            return
        started = time.monotonic()
        outcome: tuple[str, str, float] = ("delete", "", 0.0)
        with message_context(**{k: v for k, v in fields.items() if k != "listener"}):
            log.info(kv("message.start", **fields))
            with self._lock:
                self.stats["running"] += 1
                self.stats["peak_running"] = max(self.stats["peak_running"], self.stats["running"])
            try:
                self.handler(record.received)
            except PermanentJobError as exc:
                outcome = ("poison", exc.reason, 0.0)
            except RetryLater as exc:
                outcome = ("retry", exc.reason, exc.delay)
            except Exception as exc:  # broad, per message: one bad message never stops the loop
                log.exception(kv("message.failed", **fields, error=f"{type(exc).__name__}: {exc}"))
                outcome = ("error", f"{type(exc).__name__}: {exc}", 0.0)
            finally:
                seconds = time.monotonic() - started
                # A success is only deleted now: the next receive may go out meanwhile. A failure
                # still counts until it is released (its retry time must be known to the next idle wait).
                settling = outcome[0] == "delete"
                with self._lock:
                    self.stats["running"] -= 1
                    self._settling += settling
                if settling:
                    self._changed.set()
            try:
                self._settle(record, outcome, seconds, fields)
            except Exception as exc:  # storage failed after retries: the lease runs out, it comes back
                log.error(kv("message.settle_failed", **fields, error=f"{type(exc).__name__}: {exc}"))
            finally:
                with self._lock:
                    self._settling -= settling
                self._forget(record)

    def _settle(self, record: HeldMessage, outcome: tuple[str, str, float], seconds: float, fields: dict[str, Any]) -> None:
        kind, reason, delay = outcome
        with self._lock:
            self.stats["handled"] += 1
            self.stats["succeeded" if kind == "delete" else "failed"] += 1
        with record.lock:
            if record.done:  # released by an immediate stop while it ran
                log.warning(kv("message.abandoned", **fields, seconds=seconds, outcome=kind))
                return
            record.done = True
            current, lost = record.current, record.lost
        if kind == "delete":
            if self.queue.delete(current):
                log.info(kv("message.done", **fields, seconds=seconds))
            else:
                if not lost:
                    self._count("lost")
                log.warning(kv("message.lost", **fields, seconds=seconds,
                               note="lease lost before delete; another worker redoes it (idempotent)"))  # fmt: skip
            return
        last_attempt = record.received.dequeue_count >= self.queue.poison_threshold
        if kind == "poison" or (kind == "error" and last_attempt):
            if kind == "error":
                reason = f"failed {record.received.dequeue_count} times; last error: {reason}"
            self.queue.move_to_poison(current, reason)
            self._count("poisoned")
            log.error(kv("message.poisoned", **fields, seconds=seconds, reason=reason))
            self._notify_poison(record.received, reason, fields, permanent=kind == "poison")
            return
        if kind == "error":
            delay = retry_delay_for(
                record.received.dequeue_count, retry_delay=self.retry_delay, max_retry_delay=self.max_retry_delay
            )
        wait = int(math.ceil(max(0.0, delay)))
        self.queue.release(current, delay=wait)
        with self._lock:  # an idle wait covered by hints must still end when this is visible again
            heapq.heappush(self._retry_due, time.monotonic() + wait)
        self._wake.set()  # a wait that began before this retry existed computes its end again
        self._count("released")
        log.info(kv("message.retry", **fields, seconds=seconds, retry_in=wait, reason=reason))

    def _notify_poison(self, received: ReceivedMessage, reason: str, fields: dict[str, Any], *, permanent: bool) -> None:
        if self.on_poison is None:
            return
        try:
            self.on_poison(received, reason, permanent=permanent)
        except Exception as exc:
            log.error(kv("message.poison_hook_failed", **fields, error=f"{type(exc).__name__}: {exc}"))

    def _release(self, record: HeldMessage, *, delay: int, why: str) -> None:
        """Make a held message visible again (stop path); safe to call from any thread."""
        fields = self._fields(record)
        with record.lock:
            if record.done:
                return
            record.done = True
            current = record.current
        try:
            self.queue.release(current, delay=delay)
            self._count("released")
            log.info(kv("message.released", **fields, why=why))
        except Exception as exc:
            log.error(kv("message.release_failed", **fields, why=why, error=f"{type(exc).__name__}: {exc}"))

    def _held_records(self) -> list[HeldMessage]:
        with self._lock:
            return list(self._held.values())

    def _lease_result(self, record: HeldMessage, outcome: str, error: str | None) -> None:
        """From the renewal thread: "renewed", "lost" (someone else has it) or "failed" (retried)."""
        fields = self._fields(record)
        if outcome == "renewed":
            self._count("renewed")
            self._journal()
            log.debug(kv("message.renewed", **fields))
        elif outcome == "lost":
            self._count("lost")
            log.warning(kv("message.lease_lost", **fields))
        else:
            log.warning(kv("message.renew_failed", **fields, error=error))

    def _forget(self, record: HeldMessage) -> None:
        with self._lock:
            self._held.pop(record.received.id, None)
        self._journal()
        self._changed.set()

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1
