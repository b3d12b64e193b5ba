"""Wrong operator tokens are rate limited per network address (webapp.admin.FailedAttempts):
ten within a minute, then 429 with Retry-After for that address only, the right token too,
until the window has passed; a request without a token is not counted."""

from __future__ import annotations

from typing import Any

from flask import Flask

from webapp.admin import FAILED_ATTEMPTS_WINDOW, MAX_FAILED_ATTEMPTS, FailedAttempts, failed_attempts

WRONG = {"Authorization": "Bearer not-the-operator-token-at-all"}
ELSEWHERE = {"REMOTE_ADDR": "198.51.100.7"}


def test_wrong_tokens_lock_out_their_address_for_a_while(app: Flask, client: Any, operator: dict[str, str]) -> None:
    now = [1000.0]
    with app.app_context():
        attempts = failed_attempts()
    attempts.clock = lambda: now[0]
    for _ in range(MAX_FAILED_ATTEMPTS):
        assert client.get("/api/queues", headers=WRONG).status_code == 401
    locked = client.get("/api/queues", headers=WRONG)
    assert locked.status_code == 429 and locked.get_json()["error"] == "too_many_attempts"
    assert 1 <= int(locked.headers["Retry-After"]) <= FAILED_ATTEMPTS_WINDOW
    assert client.get("/api/queues", headers=operator).status_code == 429  # not compared while locked
    assert client.get("/api/queues").status_code == 401  # no token: nothing guessed, nothing counted
    # Another address is not locked out, and its right token works.
    assert client.get("/api/queues", headers=operator, environ_base=ELSEWHERE).status_code == 200
    now[0] += FAILED_ATTEMPTS_WINDOW + 1
    assert client.get("/api/queues", headers=operator).status_code == 200


def test_the_failures_are_bounded_in_addresses() -> None:
    attempts = FailedAttempts(limit=2, window=60, clock=lambda: 5.0, max_addresses=3)
    for i in range(10):
        attempts.fail(f"net4-10.0.0.{i}")
    assert len(attempts._failures) == 3
    attempts.fail("net4-10.0.0.9")
    assert attempts.retry_after("net4-10.0.0.9") == 60 and attempts.retry_after("net4-10.0.0.1") == 0
