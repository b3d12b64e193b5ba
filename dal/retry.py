"""Retry policies for throttling and transient failures: the Azure SDK's, taught two things.

Azure Storage throttles with ``503 ServerBusy`` (and ``500 OperationTimedOut``); its advice
(the service's own guidance) is to back off with jitter, never spin, and to wait about 10 s
after a ServerBusy before sending that request again, instead of failing over. The SDK's own
policies already retry 408/5xx and connection errors; these subclasses only change *how long*
they wait, so the retry loop stays the SDK's:

- ``ThrottleAwareRetry`` (blob and queue: the storage SDK's ``ExponentialRetry``, jittered)
  waits at least ``server_busy_wait`` (±20 %) after a ServerBusy answer. Tables keep
  azure-data-tables' ``TablesRetryPolicy``: that SDK ignores ``retry_policy=`` (it builds
  its own from keyword arguments), so it is tuned by ``retry_backoff_factor`` only.
- A request whose connection dropped (reset, closed, refused: no answer at all) is retried
  at once the first time, on a fresh connection, as azure-core's own policy does for
  tables; the back-off starts with the second failure. The usual cause is a pooled
  keep-alive connection the server closed under the request (after a pause of the server,
  every idle connection at once), which a new connection cures; waiting the first back-off
  (3 s ± 1 for workers) there only stalls every request in flight.
- ``scale`` multiplies every wait. 1 in production; tests set ``PHOTOMOSAICS_RETRY_SCALE``
  (e.g. 0.05) so a throttling test takes seconds, with the same shape of back-off.
- Tables: azure-core repeats a request whose connection dropped only for methods safe to
  repeat (GET, PUT, DELETE, ...), never a POST, which may already have run. Two of this
  project's POSTs are safe anyway and pass ``retry_on_methods=REPEATABLE_POST`` (an
  azure-core request option): creating a table that may exist (``ensure_table``: a repeat
  answers 409, which ``create_table_if_not_exists`` accepts) and a transaction of upserts
  with keys the writer made (a job's events: a repeat writes the same rows). A connection
  dropped under them must not cost a role its start-up or a job its "done" line.
- ``on_retry(kind, seconds)`` is told of every retry before its sleep: ``kind`` is
  ``throttled`` (ServerBusy / OperationTimedOut), ``server`` (other 5xx, 408) or
  ``connection`` (reset, refused, timeout). ``dal.observability.transactions.TransactionCounter.record_retry``
  is such a callback, so the transaction counts show retries and back-off time.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from typing import Any

from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.storage.blob import ExponentialRetry

__all__ = [
    "DEFAULT_SERVER_BUSY_WAIT",
    "REPEATABLE_POST",
    "RETRY_SCALE_ENV",
    "SERVER_BUSY_ENV",
    "THROTTLE_ERROR_CODES",
    "ThrottleAwareRetry",
    "ensure_table",
    "retry_kind",
    "retry_tuning_from_env",
    "transient",
]

RETRY_SCALE_ENV = "PHOTOMOSAICS_RETRY_SCALE"
SERVER_BUSY_ENV = "PHOTOMOSAICS_SERVER_BUSY_SECONDS"
DEFAULT_SERVER_BUSY_WAIT = 10.0  # "wait 10 seconds and send the message again"
THROTTLE_ERROR_CODES = frozenset({"ServerBusy", "OperationTimedOut"})
_JITTER = 0.2

RetryCallback = Callable[[str, float], None]


def _status_and_code(response: Any) -> tuple[int, str]:
    if response is None:
        return 0, ""
    status = int(getattr(response, "status_code", 0) or 0)
    headers = getattr(response, "headers", None) or {}
    return status, str(headers.get("x-ms-error-code", "") or "")


def retry_kind(response: Any) -> str:
    """``throttled``, ``server`` or ``connection`` for the response (None) that caused a retry."""
    status, code = _status_and_code(response)
    if status == 0:
        return "connection"
    if code in THROTTLE_ERROR_CODES or status == 503:
        return "throttled"
    return "server"


def transient(exc: BaseException) -> bool:
    """True for a failure that trying again later may cure: 408, 429, 5xx, no answer at all.

    What is left after a call's own retries: the caller decides whether to wait longer (a
    role starting in a storm of throttling) or to give up (a person waiting).
    """
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        return status >= 500 or status in (408, 429)
    return False


def _is_server_busy(response: Any) -> bool:
    status, code = _status_and_code(response)
    return status == 503 and code in ("ServerBusy", "")


def _last_response(settings: Mapping[str, Any]) -> Any:
    history = settings.get("history") or []
    return getattr(history[-1], "http_response", None) if history else None


def _first_failure_without_answer(settings: Mapping[str, Any]) -> bool:
    """The one attempt so far failed with no answer: its connection dropped (or never opened)."""
    history = settings.get("history") or []
    return len(history) == 1 and getattr(history[0], "http_response", None) is None


def _jittered(seconds: float) -> float:
    return random.uniform(seconds * (1 - _JITTER), seconds * (1 + _JITTER))


def retry_tuning_from_env(environ: Mapping[str, str] | None = None) -> tuple[float, float]:
    """``(scale, server_busy_wait)`` from ``PHOTOMOSAICS_RETRY_SCALE`` / ``..._SERVER_BUSY_SECONDS``."""
    env = os.environ if environ is None else environ
    try:
        scale = float(env.get(RETRY_SCALE_ENV) or 1.0)
        busy = float(env.get(SERVER_BUSY_ENV) or DEFAULT_SERVER_BUSY_WAIT)
    except ValueError as exc:
        raise ValueError(f"{RETRY_SCALE_ENV} and {SERVER_BUSY_ENV} must be numbers: {exc}") from None
    if scale <= 0 or busy < 0:
        raise ValueError(f"{RETRY_SCALE_ENV} must be > 0 and {SERVER_BUSY_ENV} >= 0")
    return scale, busy


class ThrottleAwareRetry(ExponentialRetry):
    """The storage SDK's jittered exponential retry, with a ServerBusy floor and a retry callback."""

    def __init__(
        self,
        *,
        scale: float = 1.0,
        server_busy_wait: float = DEFAULT_SERVER_BUSY_WAIT,
        on_retry: RetryCallback | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.scale = scale
        self.server_busy_wait = server_busy_wait
        self.on_retry = on_retry

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        if _first_failure_without_answer(settings):
            return 0.0
        seconds = super().get_backoff_time(settings)
        if _is_server_busy(_last_response(settings)):
            seconds = max(seconds, _jittered(self.server_busy_wait))
        return seconds * self.scale

    def sleep(self, settings: dict[str, Any], transport: Any) -> None:
        seconds = self.get_backoff_time(settings)
        if self.on_retry is not None:
            self.on_retry(retry_kind(_last_response(settings)), seconds)
        if seconds > 0:
            transport.sleep(seconds)


REPEATABLE_POST = frozenset({"HEAD", "GET", "PUT", "DELETE", "OPTIONS", "TRACE", "POST"})


def ensure_table(table_service: Any, name: str) -> None:
    """Create table ``name`` unless it exists; a dropped connection is retried (a repeat is safe)."""
    table_service.create_table_if_not_exists(name, retry_on_methods=REPEATABLE_POST)
