"""The one queue listener runtime every consumer uses (controller, processor, responder).

``QueueListener`` receives batches from a ``Consumable`` (a queue, shards or lanes) and runs a
handler on each message, at least once: a message is deleted only after its handler returned.
It is made of a queue, a handler, its ``ListenerOptions`` (``workers.runtime.listener_options``)
and its collaborators (hints, lease journal, poison hook), and composes small parts, each in its
own module:

- ``workers.runtime.elastic.ElasticPool``: how many handlers run at once (grows on a backlog,
  shrinks on an empty receive);
- ``workers.runtime.hint_credit.HintCredit``: what the wake-up hints announced and nobody took, so a
  hint-covered listener does not receive only to find nothing;
- ``workers.runtime.idling.Idling``: how long an idle listener waits (``workers.runtime.backoff``'s
  ramp, or until announced work) and whether a receive is worth its transaction;
- ``workers.runtime.backoff``: the retry delays (``RetrySchedule``);
- ``workers.runtime.leases``: the held messages, their renewal at half-time and the lease journal the
  supervisor hands back after a crash;
- ``workers.runtime.settling.MessageRunner``: a handler's outcome turned into delete, retry or poison.

A receive that yields only poison is not an empty receive: the listener receives again at
once. Every wait is an ``Event.wait(timeout)``, so ``stop()`` is noticed at once. The whole
runtime is described in docs/architecture.md ("The queue runtime").
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from dal.hints.channel import HintChannel
from dal.queues.consumable import Accepted, Consumable, PoisonHook, ReceivedMessage
from workers.runtime.backoff import RetrySchedule
from workers.runtime.counters import Counters
from workers.runtime.elastic import ElasticPool
from workers.runtime.hint_credit import HintSubscriber
from workers.runtime.idling import Idling
from workers.runtime.leases import HeldMessage, HeldMessages, LeaseJournal, LeaseKeeper
from workers.runtime.listener_options import ListenerOptions
from workers.runtime.logfmt import kv
from workers.runtime.settling import Handler, MessageRunner

__all__ = ["QueueListener"]

log = logging.getLogger(__name__)
DEFAULT_OPTIONS = ListenerOptions()  # the application's settings, one consumer at a time
STATS = (
    "receives",
    "empty_receives",
    "poison_receives",
    "idle_waits",
    "waiting",
    "received",
    "handled",
    "succeeded",
    "failed",
    "poisoned",
    "released",
    "renewed",
    "lost",
    "hints",
    "hint_pickups",
    "poll_pickups",
    "depth_checks",
    "scale_ups",
    "scale_downs",
    "peak_concurrency",
    "running",
    "peak_running",
    "peer_taken",
)


class QueueListener:
    """Receive messages from one ``Consumable`` and run ``handler`` on each (module docstring).

    ``run`` blocks until the loop ends (stop, ``burst`` and empty, or ``max_messages`` received
    and done) and returns how many messages a handler finished. ``stats`` counts receives (and
    the empty ones, and those that yielded only poison), idle waits and message outcomes.
    """

    def __init__(
        self,
        queue: Consumable,
        handler: Handler,
        *,
        name: str,
        options: ListenerOptions = DEFAULT_OPTIONS,
        hints: HintChannel | None = None,
        journal: LeaseJournal | None = None,
        on_poison: PoisonHook | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``options``: how it receives (``ListenerOptions``); the rest are its collaborators: the
        wake-up hints it subscribes to, the journal of the leases it holds (handed back by the
        supervisor after a crash), what a poisoned message tells, and the back-off's randomness."""
        self.queue, self.name, self.hints, self.options = queue, name, hints, options
        self.stats = Counters(STATS)
        self.pool = ElasticPool(low=options.low, high=options.concurrency, name=name, stats=self.stats)
        self.wakeups = HintSubscriber(hints, queue.name, listener=name, stats=self.stats, on_hint=self._hinted)
        self.retries = RetrySchedule()
        self.idling = Idling(
            options, self.wakeups, self.retries, self.stats, listener=name, queue_name=queue.name, rng=rng
        )
        self._changed = threading.Event()  # a handler finished, or stop was requested
        self.held = HeldMessages(listener=name, queue_name=queue.name, journal=journal, on_change=self._changed.set)
        self.runner = MessageRunner(
            queue,
            handler,
            name=name,
            held=self.held,
            stats=self.stats,
            retries=self.retries,
            retry_delay=options.retry_delay,
            max_retry_delay=options.max_retry_delay,
            on_poison=on_poison,
            on_retry=self.idling.wake.set,
            freed=self._changed,
        )
        self._stopping = self.idling.stopping
        self._immediate = threading.Event()
        self._woken_by_hint = False
        self._on_credit = False  # the next receive was decided on the hint credit alone
        # Called (in the receive thread) whenever a batch arrived; ``Role`` uses it to nudge the
        # process's other listeners: work on one queue predicts work on the others.
        self.on_activity: Callable[[], None] | None = None

    # -- public -----------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Ask ``run`` to end (thread-safe, callable from a signal handler's thread)."""
        if immediate:
            self._immediate.set()
        self._stopping.set()
        self._changed.set()
        self.idling.wake.set()

    def nudge(self) -> None:
        """Poll now and restart the idle back-off from ``poll_min`` (thread-safe)."""
        self.idling.poll_asked = True
        self.idling.polls = 0
        self.idling.wake.set()

    @property
    def capacity(self) -> int:
        """Messages held at most right now: the elastic target plus the prefetch."""
        return self.pool.active + self.options.prefetch

    @property
    def hint_covered(self) -> bool:
        """Subscribed to hints, and the subscription hears them right now."""
        return self.wakeups.covered

    @property
    def effective_poll_max(self) -> float:
        """The idle cap: far out while hints cover the queue, ``poll_max`` otherwise."""
        return self.idling.cap

    @property
    def idle_polls(self) -> int:
        """Consecutive empty receives; 0 right after a message arrived."""
        return self.idling.polls

    def idle_delay(self) -> float:
        return self.idling.delay()

    def held_count(self) -> int:
        return len(self.held)

    def run(self, *, burst: bool = False, max_messages: int | None = None) -> int:
        """Receive and handle until stopped (or empty with ``burst``, or ``max_messages``)."""
        timeout = self.options.visibility_timeout or self.queue.timeout
        self.wakeups.subscribe()
        _log_start(self, timeout)
        executor = ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix=f"{self.name}-handler")
        renewer = LeaseKeeper(
            self.queue,
            self.held.records,
            timeout=timeout,
            name=f"{self.name}-renewer",
            on_result=self.runner.lease_result,
        )
        renewer.start()
        try:
            self._receive_loop(executor, timeout, burst=burst, max_messages=max_messages)
            self.runner.finish(
                stopping=self._stopping, immediate=self._immediate, changed=self._changed, grace=self.options.grace
            )
        finally:
            self.wakeups.close()
            renewer.stop()
            executor.shutdown(wait=not self._immediate.is_set() and self.held_count() == 0, cancel_futures=True)
            self.held.write_journal()
        log.info(kv("listener.stop", listener=self.name, queue=self.queue.name, **self.stats))
        return self.stats["handled"]

    def _hinted(self, lane: int | None) -> None:
        """A wake-up hint was counted (in the hint channel's thread): wake the loop."""
        self.queue.hinted(lane)  # priority lanes: that lane is worth a call again
        self._woken_by_hint = True
        self.idling.polls = 0
        self.idling.wake.set()  # not nudge(): a hint of 0 messages asks for no poll (the credit decides)

    # -- the loop ---------------------------------------------------------------------

    def _receive_loop(
        self, executor: ThreadPoolExecutor, timeout: int, *, burst: bool, max_messages: int | None
    ) -> None:
        self.idling.polls = 0
        while not self._stopping.is_set():
            if max_messages is not None and self.stats["received"] >= max_messages:
                return
            held = self.held.in_hand()
            if held > self.capacity // 2:  # WebJobs' new-batch threshold: fetch again at half
                self._changed.wait(timeout=1.0)  # a finishing handler or stop() wakes us
                self._changed.clear()
                continue
            if self._on_credit:
                # We chose to receive again on the hint credit, then waited for a free handler:
                # peers' taken notices may have spent it meanwhile. Check before paying for a receive.
                self._on_credit = False
                if not (self.idling.poll_asked or self.idling.expects_more()):
                    self.idling.went_idle("credit spent by peers")
                    self.idling.until_announced_work()
                    continue
            want = min(self.options.batch_size, self.capacity - held)
            if max_messages is not None:
                want = min(want, max_messages - self.stats["received"])
            by_hint, batch, leased_at = self._receive(want, timeout)
            if batch.poisoned and not batch:
                # Nothing but poison: not an empty receive. No credit spent, no idle wait: receive
                # again at once, as after a message we handled (the work may be right behind it).
                self.stats.add("poison_receives")
                self.idling.polls = 0
                self._woken_by_hint = self._woken_by_hint or by_hint  # the pickup still owes the hint
            elif batch:
                self._take(executor, batch, want, leased_at, by_hint=by_hint, burst=burst)
            elif self._after_empty(burst=burst):
                return

    def _receive(self, want: int, timeout: int) -> tuple[bool, Accepted, float]:
        """One receive of up to ``want`` messages: (woken by a hint, the batch, lease start)."""
        leased_at = time.monotonic()  # the lease starts no earlier than the request
        by_hint, self._woken_by_hint = self._woken_by_hint, False
        self.queue.skip_known_empty = self.hint_covered  # lanes: trust hints while they are heard
        self.wakeups.credit.receive_started()
        self.retries.receive_started()
        self.idling.wake.clear()
        self.idling.poll_asked = False
        failed = False
        try:
            batch = self.queue.accept_messages(want, visibility_timeout=timeout, on_poison=self.runner.on_poison)
        except Exception as exc:  # storage trouble the SDK's retries did not ride out
            log.error(
                kv(
                    "listener.receive_failed",
                    listener=self.name,
                    queue=self.queue.name,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            batch, failed = Accepted(), True
        self.wakeups.credit.settle(len(batch), want, failed=failed, poisoned=batch.poisoned)
        self.stats.add("receives")
        self.stats.add("poisoned", batch.poisoned)
        if not batch and not batch.poisoned:
            self.stats.add("empty_receives")
        return by_hint, batch, leased_at

    def _take(
        self, executor: ThreadPoolExecutor, batch: Accepted, want: int, leased_at: float, *, by_hint: bool, burst: bool
    ) -> None:
        """Start a batch's handlers, then receive again or wait for announced work."""
        # Held and journaled before anything else (taken notices, handlers): a process killed
        # from here on holds nothing its supervisor cannot hand back at once.
        records = [self._hold(received, leased_at) for received in batch]
        self.held.write_journal()
        self.wakeups.tell_peers(len(batch))
        work_detected, self.idling.idle = self.idling.idle, False
        if work_detected:  # after idle polls, work is here
            self.stats.add("hint_pickups" if by_hint else "poll_pickups")
            log.info(
                kv(
                    "listener.work_detected",
                    listener=self.name,
                    queue=self.queue.name,
                    by="hint" if by_hint else "poll",
                )
            )
        self.idling.polls = 0
        for record in records:
            record.future = executor.submit(self.runner.run, record)
        # A short batch emptied the queue: no depth worth a transaction. A full one of a single
        # message says nothing yet; two in a row (or a full bigger one) is a backlog, unless the
        # hints announced no more than we took (then it is one message at a time).
        more = burst or self.idling.expects_more()
        self._on_credit = more and not burst and self.hint_covered
        self.pool.after_batch(got=len(batch), want=want, more=more, depth=self.queue.approximate_depth)
        _notify(self.on_activity, self.name)
        if not more:
            # Covered by hints and nothing more announced: the QueueEmpty wait, not a receive
            # that would come back empty. A hint, a due retry, stop() or the cap end it.
            self.idling.went_idle("announced work taken")
            self.idling.until_announced_work()

    def _after_empty(self, *, burst: bool) -> bool:
        """An empty receive: shrink, then wait (True: a burst run is over)."""
        self.idling.went_idle("empty receive")
        self.pool.after_empty()
        if burst and self.held_count() == 0 and not _visible_left(self.queue):
            return True
        if burst:
            self._changed.wait(timeout=1.0)
            self._changed.clear()
            return False
        self.idling.after_empty()
        return False

    def _hold(self, received: ReceivedMessage, leased_at: float) -> HeldMessage:
        record = HeldMessage(received=received, current=received, leased_at=leased_at)
        self.held.add(record)
        self.stats.add("received")
        return record


def _log_start(listener: QueueListener, timeout: int) -> None:
    log.info(
        kv(
            "listener.start",
            listener=listener.name,
            queue=listener.queue.name,
            batch=listener.options.batch_size,
            concurrency=f"{listener.pool.low}..{listener.pool.high}",
            visibility_timeout=timeout,
            poll_min=listener.options.poll_min,
            poll_max=listener.effective_poll_max,
            hints=listener.wakeups.subscribed,
        )
    )


def _notify(hook: Callable[[], None] | None, name: str) -> None:
    """Call a listener's activity hook; its failure is logged, never raised."""
    if hook is None:
        return
    try:
        hook()
    except Exception:
        log.exception(kv("listener.activity_hook_failed", listener=name))


def _visible_left(queue: Consumable) -> bool:
    """Burst mode: an empty receive may only mean its messages all went to poison."""
    try:
        return bool(queue.peek(1))
    except Exception:
        return False
