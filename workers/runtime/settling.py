"""Running one held message and settling it: delete, retry later, or poison.

``MessageRunner`` is what a listener's handler threads run. The outcome of a handler decides
what happens to its message: success deletes it (at-least-once: only now), ``RetryLater``
releases it for the delay it asks, ``PermanentJobError`` moves it to poison at once with its
reason, any other exception is retried with a doubling delay until the last allowed delivery,
which goes to poison at once (no further receive just to move it). A message released by a
stop before its handler started is only forgotten.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from dal.queues.consumable import Consumable, PoisonHook, ReceivedMessage
from workers.runtime.backoff import RetrySchedule, retry_delay_for
from workers.runtime.counters import Counters
from workers.runtime.errors import PermanentJobError, RetryLater
from workers.runtime.leases import HeldMessage, HeldMessages
from workers.runtime.logfmt import kv, message_context

__all__ = ["Handler", "MessageRunner"]

log = logging.getLogger("workers.runtime.listener")

Handler = Callable[[ReceivedMessage], None]
Outcome = tuple[str, str, float]  # (delete | retry | poison | error, reason, delay)


class MessageRunner:
    """Runs handlers and settles their messages for one listener (see the module docstring)."""

    def __init__(
        self,
        queue: Consumable,
        handler: Handler,
        *,
        name: str,
        held: HeldMessages,
        stats: Counters,
        retries: RetrySchedule,
        retry_delay: float,
        max_retry_delay: float,
        on_poison: PoisonHook | None,
        on_retry: Callable[[], None],
        freed: threading.Event,
    ) -> None:
        self.queue, self.handler, self.name = queue, handler, name
        self.held, self.stats, self.retries = held, stats, retries
        self.retry_delay, self.max_retry_delay = retry_delay, max_retry_delay
        self.on_poison = on_poison
        self._on_retry = on_retry  # a wait that began before this retry existed computes its end again
        self._freed = freed  # set when a handler's slot is free again

    def fields(self, record: HeldMessage) -> dict[str, Any]:
        message = record.received.message
        return {
            "listener": self.name,
            "queue": self.queue.name,
            "message_id": record.received.id,
            "dequeue_count": record.received.dequeue_count,
            "request_id": message.request_id,
            "type": message.TYPE,
        }

    def run(self, record: HeldMessage) -> None:
        """A handler thread's work: run the handler, then settle its message."""
        fields = self.fields(record)
        with record.lock:
            already_settled = record.done  # released by a stop before it could start
            record.running = not already_settled
        if already_settled:
            self.held.forget(record)
            return
        with message_context(**{k: v for k, v in fields.items() if k != "listener"}):
            log.info(kv("message.start", **fields))
            outcome, seconds = self._call(record, fields)
            settling = outcome[0] == "delete"
            try:
                self._settle(record, outcome, seconds, fields)
            except Exception as exc:  # storage failed after retries: the lease runs out, it comes back
                log.error(kv("message.settle_failed", **fields, error=f"{type(exc).__name__}: {exc}"))
            finally:
                self.held.settling(-settling)
                self.held.forget(record)

    def _call(self, record: HeldMessage, fields: dict[str, Any]) -> tuple[Outcome, float]:
        started = time.monotonic()
        outcome: Outcome = ("delete", "", 0.0)
        self.stats.add("running")
        self.stats.peak("peak_running", self.stats["running"])
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
            # A success is only deleted now: the next receive may go out meanwhile. A failure
            # still counts until it is released (its retry time must be known to the next idle wait).
            settling = outcome[0] == "delete"
            self.stats.add("running", -1)
            self.held.settling(settling)
            if settling:
                self._freed.set()
        return outcome, time.monotonic() - started

    def _settle(self, record: HeldMessage, outcome: Outcome, seconds: float, fields: dict[str, Any]) -> None:
        kind, reason, delay = outcome
        self.stats.add("handled")
        self.stats.add("succeeded" if kind == "delete" else "failed")
        with record.lock:
            if record.done:  # released by an immediate stop while it ran
                log.warning(kv("message.abandoned", **fields, seconds=seconds, outcome=kind))
                return
            record.done = True
            current, lost = record.current, record.lost
        if kind == "delete":
            self._delete(current, lost, seconds, fields)
            return
        last_attempt = record.received.dequeue_count >= self.queue.poison_threshold
        if kind == "poison" or (kind == "error" and last_attempt):
            if kind == "error":
                reason = f"failed {record.received.dequeue_count} times; last error: {reason}"
            self.queue.move_to_poison(current, reason)
            self.stats.add("poisoned")
            log.error(kv("message.poisoned", **fields, seconds=seconds, reason=reason))
            self._notify_poison(record.received, reason, fields, permanent=kind == "poison")
            return
        if kind == "error":
            delay = retry_delay_for(
                record.received.dequeue_count, retry_delay=self.retry_delay, max_retry_delay=self.max_retry_delay
            )
        wait = math.ceil(max(0.0, delay))
        self.queue.release(current, delay=wait)
        self.retries.add(wait)  # an idle wait covered by hints must still end when this is visible again
        self._on_retry()
        self.stats.add("released")
        log.info(kv("message.retry", **fields, seconds=seconds, retry_in=wait, reason=reason))

    def _delete(self, current: ReceivedMessage, lost: bool, seconds: float, fields: dict[str, Any]) -> None:
        if self.queue.delete(current):
            log.info(kv("message.done", **fields, seconds=seconds))
            return
        if not lost:
            self.stats.add("lost")
        log.warning(
            kv(
                "message.lost",
                **fields,
                seconds=seconds,
                note="lease lost before delete; another worker redoes it (idempotent)",
            )
        )

    def _notify_poison(
        self, received: ReceivedMessage, reason: str, fields: dict[str, Any], *, permanent: bool
    ) -> None:
        if self.on_poison is None:
            return
        try:
            self.on_poison(received, reason, permanent=permanent)
        except Exception as exc:
            log.error(kv("message.poison_hook_failed", **fields, error=f"{type(exc).__name__}: {exc}"))

    def release(self, record: HeldMessage, *, delay: int, why: str) -> None:
        """Make a held message visible again (stop path); safe to call from any thread."""
        fields = self.fields(record)
        with record.lock:
            if record.done:
                return
            record.done = True
            current = record.current
        try:
            self.queue.release(current, delay=delay)
            self.stats.add("released")
            log.info(kv("message.released", **fields, why=why))
        except Exception as exc:
            log.error(kv("message.release_failed", **fields, why=why, error=f"{type(exc).__name__}: {exc}"))

    def lease_result(self, record: HeldMessage, outcome: str, error: str | None) -> None:
        """From the renewal thread: "renewed", "lost" (someone else has it) or "failed" (retried)."""
        fields = self.fields(record)
        if outcome == "renewed":
            self.stats.add("renewed")
            self.held.write_journal()
            log.debug(kv("message.renewed", **fields))
        elif outcome == "lost":
            self.stats.add("lost")
            log.warning(kv("message.lease_lost", **fields))
        else:
            log.warning(kv("message.renew_failed", **fields, error=error))

    def finish(
        self, *, stopping: threading.Event, immediate: threading.Event, changed: threading.Event, grace: float
    ) -> None:
        """After receiving ends: hand back unstarted messages at a stop, wait up to ``grace`` for
        running ones, then make what is left visible again (an immediate stop: all at once)."""
        deadline = math.inf  # burst / max_messages: wait for the work, until a stop comes
        while len(self.held) and not immediate.is_set():
            if stopping.is_set() and deadline == math.inf:
                self._hand_back_unstarted()
                deadline = time.monotonic() + grace
            if time.monotonic() >= deadline:
                break
            changed.wait(timeout=min(0.5, deadline - time.monotonic()))
            changed.clear()
        for record in self.held.records():  # grace ran out (or immediate stop): make them visible again
            reason = "immediate stop" if immediate.is_set() else f"still running after {grace:.0f} s grace"
            self.release(record, delay=0, why=reason)

    def _hand_back_unstarted(self) -> None:
        for record in self.held.records():  # not started yet: cancel and release at once
            if record.future is not None and record.future.cancel():
                self.release(record, delay=0, why="not started before stop")
                self.held.forget(record)
