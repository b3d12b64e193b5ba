"""Prerequisites of a test: fail with a clear message in CI, skip with the same one elsewhere."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(condition: bool, reason: str) -> None:
    """Fail in CI, skip elsewhere, when a prerequisite of a test is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"missing prerequisite (CI=true): {reason}", pytrace=False)
    pytest.skip(reason)
