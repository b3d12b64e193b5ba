"""Send availability with a paired secondary account: backlog queues and the syphon (seed 003).

``FailoverSender.submit`` sends a typed message to its queue on the primary account. When the
primary fails after the SDK's own retries (unreachable, or a 5xx that is not ``ServerBusy``:
ServerBusy means "wait", which ``dal.retry`` already does, never "fail over"), the message goes
to one of ``backlog_count`` backlog queues on the secondary account, picked at random per sender
as in seed 003, wrapped in a JSON envelope that keeps its destination queue and its payload
unchanged: ``{"queue": "<full primary queue name>", "payload": "<message text>"}``.

``Syphon.run_once`` pings the primary (one cheap call); once it answers it moves each backlog
message to its primary queue, then deletes it from the backlog. Put-then-delete is the only
order that loses nothing: a crash between the two sends the message twice, which the pipeline
already absorbs (every handler is idempotent under redelivery). Order is not promised.

Cost: with a healthy primary the sender spends nothing on the secondary, and the syphon
reads the backlog only after a failover happened in this process (``dirty``) or when asked to
check (start-up, once per ``check_interval``), so an idle service does not poll the secondary.

Not covered here: receives never fail over (work is only processed on the primary); blobs a
message refers to are not moved (see the README section "Failover").
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

from dal.config import CLAIM_CHECK_CONTAINER, RetryProfile, StorageClients
from dal.messages import QueueMessage
from dal.names import prefixed
from dal.queues import QueueAccessor
from dal.stored_queue import StoredQueue

__all__ = ["SECONDARY_CONNECTION_STRING_ENV", "secondary_from_env", "BACKLOG_PREFIX", "DEFAULT_BACKLOG_COUNT", "FailoverSender", "Syphon", "primary_failed"]

log = logging.getLogger(__name__)

SECONDARY_CONNECTION_STRING_ENV = "PHOTOMOSAICS_SECONDARY_CONNECTION_STRING"
BACKLOG_PREFIX = "backlog"
DEFAULT_BACKLOG_COUNT = 3  # seed 003 spreads senders over a few backlog queues
# After a failover, sends go straight to the secondary this long (seed 003 pings once a minute):
# without it every send would first spend the primary's whole retry budget.
DEFAULT_STAY_ON_SECONDARY = 60.0
_SYPHON_BATCH = 32


def secondary_from_env(environ: Mapping[str, str] | None = None, *, profile: RetryProfile = "worker") -> StorageClients | None:
    """The secondary account's clients, or None when ``PHOTOMOSAICS_SECONDARY_CONNECTION_STRING`` is unset."""
    value = (os.environ if environ is None else environ).get(SECONDARY_CONNECTION_STRING_ENV, "").strip()
    return StorageClients(value, profile=profile) if value else None


def primary_failed(exc: BaseException) -> bool:
    """True for a failure that warrants the secondary: unreachable, or a 5xx other than ServerBusy.

    A ``ServiceResponseError`` (the connection broke after the request went out) counts too:
    the primary may then hold the message as well, a duplicate the idempotent handlers absorb.
    """
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        code = getattr(exc, "error_code", None) or ""
        server_busy = status == 503 and code in ("ServerBusy", "")
        return status >= 500 and not server_busy
    return False


def backlog_queues(storage: StorageClients, prefix: str, count: int) -> list[StoredQueue]:
    claim_container = prefixed(prefix, CLAIM_CHECK_CONTAINER)
    return [StoredQueue(storage, prefixed(prefix, f"{BACKLOG_PREFIX}-{i}"), claim_container=claim_container)
            for i in range(count)]


@dataclass
class FailoverSender:
    """Sends to the primary; on a primary failure, to a random backlog queue on the secondary."""

    primary: QueueAccessor
    secondary: StorageClients | None
    backlog_count: int = DEFAULT_BACKLOG_COUNT
    stay_on_secondary: float = DEFAULT_STAY_ON_SECONDARY
    failovers: int = 0
    _down_until: float = 0.0
    _backlogs: list[StoredQueue] = field(default_factory=list, repr=False)
    _created: bool = False

    def submit(self, message: QueueMessage) -> str:
        """Send ``message``; returns ``"primary"`` or ``"secondary"`` (where it was written)."""
        queue = self.primary.for_message(message)
        if self.secondary is None or time.monotonic() >= self._down_until:
            try:
                queue.submit(message)
                return "primary"
            except Exception as exc:
                if self.secondary is None or not primary_failed(exc):
                    raise
                log.warning("primary send to %s failed (%s); writing to the secondary's backlog", queue.name, exc)
                # The next sends skip the primary's retry budget for a while (seed 003's failover state).
                self._down_until = time.monotonic() + self.stay_on_secondary
        backlog = random.choice(self._backlog())
        backlog.put_text(json.dumps({"queue": queue.name, "payload": message.payload()}))
        self.failovers += 1
        return "secondary"

    def _backlog(self) -> list[StoredQueue]:
        assert self.secondary is not None
        if not self._backlogs:
            self._backlogs = backlog_queues(self.secondary, self.primary.prefix, self.backlog_count)
        if not self._created:
            for q in self._backlogs:
                q.create()  # only ever on a failover: a healthy primary costs the secondary nothing
            self._created = True
        return self._backlogs


@dataclass
class Syphon:
    """Moves backlog messages from the secondary back to their primary queues once the primary answers."""

    primary: QueueAccessor
    secondary: StorageClients
    backlog_count: int = DEFAULT_BACKLOG_COUNT
    moved: int = 0

    def primary_alive(self) -> bool:
        """The ping: one queue-properties call on the primary."""
        try:
            self.primary.image_request.approximate_depth()
            return True
        except Exception as exc:
            if primary_failed(exc):
                return False
            raise

    def run_once(self) -> int:
        """Ping, then drain every backlog queue; returns how many messages moved (0 if the primary is down)."""
        if not self.primary_alive():
            return 0
        moved = 0
        for backlog in backlog_queues(self.secondary, self.primary.prefix, self.backlog_count):
            moved += self._drain(backlog)
        self.moved += moved
        return moved

    def _drain(self, backlog: StoredQueue) -> int:
        moved = 0
        while True:
            # [] when this backlog was never created: nothing failed over to it
            batch = backlog.take_texts(_SYPHON_BATCH, visibility_timeout=60)
            if not batch:
                return moved
            for taken in batch:
                envelope = json.loads(taken.text)
                target = self.primary.by_name(envelope["queue"])
                target.put_text(envelope["payload"])
                backlog.delete_taken(taken)
                moved += 1
                target.announce()


def wait_for_drain(syphon: Syphon, *, timeout: float, interval: float = 0.5) -> int:
    """Run the syphon until a pass moves nothing after moving something, or ``timeout``; returns moved."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if syphon.run_once() == 0 and syphon.primary_alive():
            return syphon.moved
        time.sleep(interval)
    return syphon.moved
