"""What a ``QueueListener`` does while its queue has nothing for it.

An empty receive costs a transaction, so an idle listener waits before the next one: the
exponential ramp from ``poll_min`` to ``poll_max`` (``backoff.poll_delay``), or, while wake-up
hints cover the queue, until a hint, a released message falling due, or the safety-net cap. After
a batch it receives again at once only when more work is expected (no hints to trust, hint credit
left, a retry due). ``wake`` ends any wait early: ``stop()``, ``nudge()``, a hint, a retry.
"""

from __future__ import annotations

import logging
import random
import threading

from workers.runtime.backoff import RetrySchedule, poll_delay
from workers.runtime.counters import Counters
from workers.runtime.hint_credit import HintSubscriber
from workers.runtime.listener_options import ListenerOptions
from workers.runtime.logfmt import kv

__all__ = ["Idling"]

log = logging.getLogger(__name__)


class Idling:
    def __init__(
        self,
        options: ListenerOptions,
        wakeups: HintSubscriber,
        retries: RetrySchedule,
        stats: Counters,
        *,
        listener: str,
        queue_name: str,
        rng: random.Random | None = None,
    ) -> None:
        self.options, self.wakeups, self.retries, self.stats = options, wakeups, retries, stats
        self.listener, self.queue_name = listener, queue_name
        self.rng = rng or random.Random()
        self.wake = threading.Event()  # ends an idle wait early
        self.stopping = threading.Event()
        self.polls = 0  # consecutive empty receives; 0 right after a message arrived
        self.idle = False  # the last receive came back empty (nudges do not change it)
        self.poll_asked = False  # nudge() since the last receive started

    @property
    def cap(self) -> float:
        """The idle cap: far out while hints cover the queue, ``poll_max`` otherwise."""
        return self.options.hinted_cap if self.wakeups.covered else self.options.poll_max

    def delay(self) -> float:
        """How long to wait after an empty receive: while hints cover the queue, until a hint,
        a released message is due, or the safety-net cap; otherwise the exponential ramp."""
        poll_min = self.options.poll_min
        if not self.wakeups.covered:
            return poll_delay(self.polls, poll_min=poll_min, poll_max=self.cap, rng=self.rng)
        capped = poll_delay(61, poll_min=poll_min, poll_max=self.options.hinted_cap, rng=self.rng)
        return min(capped, max(poll_min, self.retries.next_due() + 0.05))

    def expects_more(self) -> bool:
        """After a batch: receive again at once? Yes without a healthy hint subscription (no
        credit to trust), with credit left, or when a message we released is due again."""
        if not self.wakeups.covered:
            return True
        return self.retries.take_due() or self.wakeups.credit.left

    def went_idle(self, why: str) -> None:
        """The queue has no more work for us: logged once per busy spell (``listener.idle``)."""
        if not self.idle:
            log.info(kv("listener.idle", listener=self.listener, queue=self.queue_name, why=why))
        self.idle = True

    def after_empty(self) -> None:
        """The wait after an empty receive (the ramp, or until announced work)."""
        self.polls += 1
        if not self.stopping.is_set():  # a stop between our clear() and here set ``stopping`` first
            self.stats.add("idle_waits")
            self.stats.add("waiting")  # 1 while in an idle wait: no receive until it ends
            self.wake.wait(self.delay())
            self.stats.add("waiting", -1)
        self.wake.clear()

    def until_announced_work(self) -> None:
        """With the hint credit spent: wait for a hint with credit, a nudge, a retry that is
        due, stop(), or the safety-net cap."""
        self.stats.add("idle_waits")
        self.stats.add("waiting")
        try:
            while not self.stopping.is_set():
                if not self.wake.wait(self.delay()):
                    return  # the cap, or the retry it waited for: poll
                self.wake.clear()
                if self.poll_asked or self.expects_more():
                    return
        finally:
            self.stats.add("waiting", -1)
