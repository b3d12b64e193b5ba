"""Hint credit: how many announced messages nobody has received yet.

A wake-up hint says how many messages its send added (``dal.hints.payload``). A listener
keeps that count as *credit*, minus what it received; a receive that came back short of what
it asked for (the queue had no more) resets it to the hints heard during that receive. While
hints cover the queue, a listener whose credit is spent waits for the next hint instead of
receiving again only to find nothing. Unknown counts (a start-up backlog, a hand-back, a
reconnect) are infinite credit: receive until the queue proves empty.

Competing consumers hear the same hints, so each tells the others what it took (a *taken
notice*, no storage transaction) and a peer lowers its credit by that count. A late notice
costs one empty receive, an early one waits for the next hint or the safety-net poll:
latency at worst, never a lost message.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import threading
import uuid
from collections.abc import Callable

from dal.hints.channel import HintChannel, HintSubscription
from workers.runtime.counters import Counters
from workers.runtime.logfmt import kv

__all__ = ["HintCredit", "HintSubscriber"]

log = logging.getLogger("workers.runtime.listener")


class HintCredit:
    """One listener's credit and its taken notices (thread-safe: the hint channel's thread
    adds, the receive loop spends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credit = math.inf
        self._during = 0.0  # hints heard since the current receive started
        self.sender = uuid.uuid4().hex[:16]  # names our notices, so we ignore our own
        self._notices = itertools.count(1)  # "<sender>.<n>": heard twice, counted once
        self._heard: collections.deque[str] = collections.deque(maxlen=256)

    @property
    def left(self) -> bool:
        """Announced messages are still to be received."""
        with self._lock:
            return self._credit > 0

    def heard_hint(self, count: int | None) -> None:
        """A hint announced ``count`` messages (None: unknown, so any number)."""
        added = math.inf if count is None else max(0, count)
        with self._lock:
            self._credit += added
            self._during += added

    def heard_taken(self, count: int, notice: str) -> bool:
        """A peer took ``count`` messages; False for our own notice or one counted already."""
        if notice.partition(".")[0] == self.sender:
            return False
        with self._lock:
            # Over a fan-out channel (local folder and server) a notice arrives twice, while a
            # hint from another machine arrives once: count each notice once, never too low.
            if notice in self._heard:
                return False
            self._heard.append(notice)
            self._credit = max(0.0, self._credit - count)
            return True

    def next_notice(self) -> str:
        """The id of our next taken notice."""
        return f"{self.sender}.{next(self._notices)}"

    def receive_started(self) -> None:
        """Only hints heard from now on can announce what this receive misses."""
        with self._lock:
            self._during = 0.0

    def settle(self, got: int, want: int, *, failed: bool, poisoned: int = 0) -> None:
        """After a receive of ``got`` messages out of ``want``, and ``poisoned`` more moved aside
        (never announced work, so they spend nothing)."""
        with self._lock:
            during, self._during = self._during, 0.0
            if failed:  # we learnt nothing about the queue: receive again
                self._credit = math.inf
            elif got + poisoned < want:  # the queue had no more: older hints are spent
                self._credit = during
            else:
                self._credit = max(self._credit - got, during)


class HintSubscriber:
    """A listener's wake-up hints: its subscription, its credit, and its taken notices to peers.

    ``on_hint(lane)`` is called (in the channel's thread) after a hint was counted, so that the
    listener wakes; ``covered`` says whether hints are heard right now.
    """

    def __init__(
        self,
        channel: HintChannel | None,
        queue_name: str,
        *,
        listener: str,
        stats: Counters,
        on_hint: Callable[[int | None], None],
    ) -> None:
        self.channel, self.queue_name, self.listener = channel, queue_name, listener
        self.credit = HintCredit()
        self._stats = stats
        self._on_hint = on_hint
        self._subscription: HintSubscription | None = None

    @property
    def subscribed(self) -> bool:
        return self._subscription is not None

    @property
    def covered(self) -> bool:
        """Subscribed, and the subscription hears hints right now."""
        subscription = self._subscription
        return subscription is not None and subscription.healthy

    def subscribe(self) -> None:
        if self.channel is None or self._subscription is not None:
            return
        try:
            self._subscription = self.channel.subscribe(self.queue_name, self.heard_hint, self.heard_taken)
        except (OSError, ValueError) as exc:
            log.warning(kv("listener.hints_unavailable", listener=self.listener, error=str(exc)))

    def close(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None

    def heard_hint(self, count: int | None = None, lane: int | None = None) -> None:
        """``count`` messages were sent (None: unknown) to priority lane ``lane`` (None: unknown)."""
        self._stats.add("hints")
        self.credit.heard_hint(count)
        self._on_hint(lane)

    def heard_taken(self, count: int, notice: str) -> None:
        """A peer on our queue received ``count`` messages: they are no longer ours to expect."""
        if self.credit.heard_taken(count, notice):
            self._stats.add("peer_taken", count)

    def tell_peers(self, count: int) -> None:
        """Our taken notice; only a hint-covered listener's peers keep credit."""
        if self.channel is None or not self.covered:
            return
        try:
            self.channel.publish(self.queue_name, count, taken_by=self.credit.next_notice())
        except Exception:  # an optimisation: a lost notice costs a peer one empty receive
            log.debug("taken notice not published", exc_info=True)
