"""The operator token: what guards the API calls that change queues.

``PHOTOMOSAICS_ADMIN_TOKEN`` (or ``ADMIN_TOKEN`` in the app config) enables operator actions.
Unset: they are off, the Queues page shows no buttons and the API answers 403. Set: a
request must carry ``Authorization: Bearer <token>``, else 401 with ``WWW-Authenticate:
Bearer`` (RFC 9110 and RFC 6750: missing or wrong credentials are 401, 403 is for a request
no credentials can allow); the comparison is constant-time (``hmac.compare_digest``) and the
token is never logged nor echoed. Reading depths stays public. A token shorter than
``MIN_ADMIN_TOKEN_LENGTH`` characters stops the app at start-up (``check_admin_token``).

Wrong tokens are rate limited per network address (an IPv4 address or an IPv6 /64, as the
quotas count them): after ``MAX_FAILED_ATTEMPTS`` wrong tokens within ``FAILED_ATTEMPTS_WINDOW``
seconds, a request from that address that carries a token is ``429 too_many_attempts`` with
``Retry-After``, right or wrong, until the oldest failure leaves the window; the token is not
compared meanwhile. A request with no token at all is 401 and not counted (nothing was guessed).
The counts are per web process, in memory (``FailedAttempts``), bounded in addresses.
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from flask import current_app, request

from dal.admission.address_quotas import network_key
from webapp.errors import ApiError
from webapp.ingress import client_address

ADMIN_TOKEN_ENV = "PHOTOMOSAICS_ADMIN_TOKEN"
MIN_ADMIN_TOKEN_LENGTH = 24  # secrets.token_urlsafe(18): 144 random bits
MAX_FAILED_ATTEMPTS = 10
FAILED_ATTEMPTS_WINDOW = 60.0  # seconds
_ATTEMPTS = "photomosaics.admin_attempts"


class FailedAttempts:
    """Wrong operator tokens per address within a sliding window (one web process)."""

    def __init__(
        self,
        *,
        limit: int = MAX_FAILED_ATTEMPTS,
        window: float = FAILED_ATTEMPTS_WINDOW,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = 10_000,
    ) -> None:
        self.limit, self.window, self.clock, self.max_addresses = limit, window, clock, max_addresses
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        failures = self._failures.get(key, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            self._failures.pop(key, None)
        return failures

    def retry_after(self, key: str) -> int:
        """0 while ``key`` may try a token; else the seconds until it may again."""
        with self._lock:
            now = self.clock()
            failures = self._recent(key, now)
            if len(failures) < self.limit:
                return 0
            return max(1, math.ceil(failures[0] + self.window - now))

    def fail(self, key: str) -> None:
        with self._lock:
            now = self.clock()
            failures = self._recent(key, now)
            if key not in self._failures and len(self._failures) >= self.max_addresses:
                self._failures.pop(next(iter(self._failures)))  # the address that failed longest ago first
            failures.append(now)
            self._failures[key] = failures


def failed_attempts() -> FailedAttempts:
    found: FailedAttempts | None = current_app.extensions.get(_ATTEMPTS)
    if found is None:  # the app config's ADMIN_MAX_FAILED_ATTEMPTS, for tests that share one address
        limit = int(current_app.config.get("ADMIN_MAX_FAILED_ATTEMPTS") or MAX_FAILED_ATTEMPTS)
        found = current_app.extensions.setdefault(_ATTEMPTS, FailedAttempts(limit=limit))
    return found


def check_admin_token(token: object) -> None:
    """Refuse to start with an operator token short enough to guess (unset is fine: actions are off)."""
    if token and len(str(token)) < MIN_ADMIN_TOKEN_LENGTH:
        raise RuntimeError(
            f"{ADMIN_TOKEN_ENV} has {len(str(token))} characters; at least {MIN_ADMIN_TOKEN_LENGTH} are needed; "
            "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )


def admin_enabled() -> bool:
    return bool(current_app.config.get("ADMIN_TOKEN"))


def require_admin() -> None:
    """Raise 403 when operator actions are off, 401 unless the request carries the token."""
    expected = current_app.config.get("ADMIN_TOKEN") or ""
    if not expected:
        raise ApiError(403, "forbidden", f"operator actions are disabled: set {ADMIN_TOKEN_ENV} on the web app")
    header = request.headers.get("Authorization", "")
    attempts, key = failed_attempts(), network_key(client_address())
    if header:
        wait = attempts.retry_after(key)
        if wait:
            raise ApiError(
                429,
                "too_many_attempts",
                f"too many wrong operator tokens from this address; try again in {wait} s",
                headers={"Retry-After": str(wait)},
            )
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        if header:
            attempts.fail(key)
        raise ApiError(
            401,
            "unauthorized",
            "this operation needs the operator token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": 'Bearer realm="photomosaics operator"'},
        )
