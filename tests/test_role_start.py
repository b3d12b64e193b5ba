"""``workers.runtime.role.patiently``: how a role's start-up waits out storage that fails transiently.

The storage side is proven on real roles behind the fault proxy
(``tests/test_throttling.py::test_a_role_starts_through_throttling_that_outlasts_its_retries``);
these pin the rule itself: which failures are waited out, and how long each wait is.
"""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

from dal.retry import RETRY_SCALE_ENV, transient
from workers.runtime.role import patiently


def _status(code: int) -> HttpResponseError:
    error = HttpResponseError(message=f"HTTP {code}")
    error.status_code = code
    return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_status(503), True),
        (_status(500), True),
        (_status(429), True),
        (_status(408), True),
        (ServiceRequestError("refused"), True),
        (ServiceResponseError("dropped"), True),
        (_status(403), False),
        (_status(404), False),
        (_status(409), False),
        (ValueError("bad name"), False),
    ],
    ids=lambda v: getattr(v, "status_code", None) or type(v).__name__,
)
def test_which_failures_are_transient(error: BaseException, expected: bool) -> None:
    assert transient(error) is expected


def test_transient_failures_are_waited_out_doubling_to_30_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRY_SCALE_ENV, "1")
    failures = [_status(503)] * 7 + [ServiceRequestError("refused")]
    slept: list[float] = []

    def step() -> str:
        if failures:
            raise failures.pop(0)
        return "ready"

    assert patiently(step, role="test", what="starting", sleep=slept.append) == "ready"
    assert slept == [1, 2, 4, 8, 16, 30, 30, 30]


def test_retry_scale_shortens_every_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRY_SCALE_ENV, "0.01")
    failures = [_status(500)] * 2
    slept: list[float] = []

    def step() -> None:
        if failures:
            raise failures.pop(0)

    patiently(step, role="test", what="starting", sleep=slept.append)
    assert slept == pytest.approx([0.01, 0.02])


@pytest.mark.parametrize("error", [_status(403), ValueError("bad name")], ids=["403", "ValueError"])
def test_anything_else_is_raised_at_once(error: BaseException) -> None:
    slept: list[float] = []

    def step() -> None:
        raise error

    with pytest.raises(type(error)):
        patiently(step, role="test", what="starting", sleep=slept.append)
    assert slept == []
