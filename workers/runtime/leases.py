"""Holding a message: its current pop receipt, and the thread that keeps its lease alive.

A received message is invisible for the visibility timeout. ``LeaseKeeper`` extends every
held message (running or waiting) once half of that time has passed, so a slow handler
never loses its message to another worker, and it stores the new pop receipt: the old one
stops working after an update, and the final delete must use the newest. ``HeldMessage.lock``
serialises the receipt between renewal, the final delete and a release on stop.

**Fast crash recovery.** A SIGKILLed process cannot hand anything back, and its messages
would wait out their lease. So on one machine every role keeps a ``LeaseJournal``: the file
``<PHOTOMOSAICS_LEASE_DIR>/<pid>.json`` lists the messages it holds with their *current* pop
receipt (rewritten, atomically, on every receive, renewal and settle: a local file write,
no storage transaction). When a child dies, the supervisor calls ``hand_back``: one
``update_message(visibility 0)`` per held message with that receipt, plus a work-detected
hint, and a surviving worker starts the message at once. A receipt that no longer works
(the child settled or renewed it after its last write) just fails: that message then comes
back when its lease runs out, as it does across machines, where the short lease (60 s,
renewed at half-time) bounds a silent death instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dal.queues.work_queue import make_visible_now

if TYPE_CHECKING:
    from dal.queues.consumable import Consumable, ReceivedMessage

__all__ = ["LEASE_DIR_ENV", "HeldMessage", "HeldMessages", "LeaseJournal", "LeaseKeeper", "hand_back"]

log = logging.getLogger(__name__)

LEASE_DIR_ENV = "PHOTOMOSAICS_LEASE_DIR"


@dataclasses.dataclass(eq=False)
class HeldMessage:
    """One message in a listener's hands."""

    received: ReceivedMessage  # the delivery the handler sees (original pop receipt)
    current: ReceivedMessage  # the latest pop receipt (after renewals)
    leased_at: float  # monotonic time the current invisibility started (or earlier)
    future: Future[None] | None = None
    running: bool = False
    done: bool = False  # deleted, released or poisoned: nothing more to do
    lost: bool = False  # a renewal found someone else owns it
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class HeldMessages:
    """The messages one listener holds, and the journal that lists them for a hand-back.

    ``in_hand`` leaves out the messages whose handler returned and that are being deleted:
    the next receive may go out beside that delete. ``on_change`` is called whenever one is
    forgotten (a free slot, or a stop that waits for the last one).
    """

    def __init__(
        self, *, listener: str, queue_name: str, journal: LeaseJournal | None, on_change: Callable[[], None]
    ) -> None:
        self._listener, self._queue_name, self._journal = listener, queue_name, journal
        self._on_change = on_change
        self._lock = threading.Lock()
        self._journal_lock = threading.Lock()
        self._held: dict[str, HeldMessage] = {}
        self._settling = 0

    def add(self, record: HeldMessage) -> None:
        with self._lock:
            self._held[record.received.id] = record

    def forget(self, record: HeldMessage) -> None:
        with self._lock:
            self._held.pop(record.received.id, None)
        self.write_journal()
        self._on_change()

    def records(self) -> list[HeldMessage]:
        with self._lock:
            return list(self._held.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def in_hand(self) -> int:
        """Held messages still to be handled or running: what counts against a listener's capacity."""
        with self._lock:
            return len(self._held) - self._settling

    def settling(self, delta: int) -> None:
        """``delta`` messages start (+) or finish (-) being deleted after their handler returned."""
        with self._lock:
            self._settling += delta

    def write_journal(self) -> None:
        if self._journal is not None:
            with self._journal_lock:  # snapshot and write together: the newest snapshot wins
                self._journal.record(self._listener, self._queue_name, self.records())


class LeaseKeeper(threading.Thread):
    """Renews the held messages' invisibility at half-time until ``stop``.

    ``on_result(record, outcome, error)`` reports each attempt: ``"renewed"``, ``"lost"`` or
    ``"failed"`` (a storage error: tried again next tick, the lease still has half its time).
    """

    def __init__(
        self,
        queue: Consumable,
        held: Callable[[], list[HeldMessage]],
        *,
        timeout: int,
        name: str,
        on_result: Callable[[HeldMessage, str, str | None], None],
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.queue = queue
        self.held = held
        self.timeout = timeout
        self.on_result = on_result
        self.tick = min(5.0, max(0.1, timeout / 4))
        self._stop_event = threading.Event()

    def stop(self, *, wait: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=wait)

    def run(self) -> None:
        while not self._stop_event.wait(self.tick):
            now = time.monotonic()
            for record in self.held():
                if now - record.leased_at >= self.timeout / 2:
                    self.renew(record)

    def renew(self, record: HeldMessage) -> None:
        with record.lock:
            if record.done or record.lost:
                return
            try:
                renewed = self.queue.renew(record.current, self.timeout)
            except Exception as exc:
                error: str | None = f"{type(exc).__name__}: {exc}"
                outcome = "failed"
            else:
                error = None
                if renewed is None:
                    record.lost = True
                    outcome = "lost"
                else:
                    record.current = renewed
                    record.leased_at = time.monotonic()
                    outcome = "renewed"
        self.on_result(record, outcome, error)


class LeaseJournal:
    """``<folder>/<pid>.json``: the messages this process holds, for the supervisor's hand-back."""

    def __init__(self, folder: str | Path, *, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{pid or os.getpid()}.json"
        self._lock = threading.Lock()
        self._by_listener: dict[str, list[dict[str, str]]] = {}
        self.writes = 0

    @classmethod
    def from_env(cls) -> LeaseJournal | None:
        folder = os.environ.get(LEASE_DIR_ENV, "")
        return cls(folder) if folder else None

    def record(self, listener: str, queue_name: str, held: list[HeldMessage]) -> None:
        """Replace what ``listener`` holds; writes the file (atomically) only on a change."""
        entries = []
        for record in held:
            if record.done:
                continue
            current = record.current
            # The message's own queue: a sharded or laned listener (dal.queues.shards, dal.queues.lanes) holds
            # messages of several. The hint goes to the name the listeners subscribe to (the
            # base queue's): a hint for "slicerequest-lane1" would reach no one.
            queue = current.queue_name or queue_name
            entries.append({"queue": queue, "hint": queue_name, "id": current.id, "pop_receipt": current.pop_receipt})
        with self._lock:
            if self._by_listener.get(listener, []) == entries:
                return
            self._by_listener[listener] = entries
            everything = [e for held_by_one in self._by_listener.values() for e in held_by_one]
            try:
                if not everything:
                    self.path.unlink(missing_ok=True)
                else:
                    tmp = self.path.with_suffix(".tmp")
                    tmp.write_text(json.dumps(everything))
                    os.replace(tmp, self.path)
                self.writes += 1
            except OSError as exc:  # the journal only speeds recovery up: never fail work for it
                log.warning("lease journal %s not written: %s", self.path, exc)


def read_journal(folder: str | Path, pid: int) -> list[dict[str, Any]]:
    path = Path(folder) / f"{pid}.json"
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict) and {"queue", "id", "pop_receipt"} <= e.keys()]


def hand_back(folder: str | Path, pid: int, queue_service: Any, *, announce: Any = None) -> int:
    """Make visible at once the messages a dead process ``pid`` held; returns how many.

    ``queue_service`` is an ``azure.storage.queue.QueueServiceClient``; ``announce(name)``,
    if given, publishes a work-detected hint (no count, no lane: "poll now, anywhere") under
    the name each listener that got a message back subscribes to.
    """

    handed, queues = 0, set()
    for entry in read_journal(folder, pid):
        try:
            if not make_visible_now(queue_service, entry["queue"], entry["id"], entry["pop_receipt"]):
                continue  # settled or renewed after the last write: the lease decides
        except Exception as exc:
            log.warning("hand-back of message %s in %s failed: %s", entry["id"], entry["queue"], exc)
            continue
        handed += 1
        queues.add(str(entry.get("hint") or entry["queue"]))
    if announce is not None:
        for name in sorted(queues):
            with contextlib.suppress(Exception):
                announce(name)
    (Path(folder) / f"{pid}.json").unlink(missing_ok=True)
    return handed
