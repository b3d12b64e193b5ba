"""The Queues page's operator actions in a real headless Chromium: a refused token says so,
the right one lists the poison messages, and Requeue (one, then all) moves them back to their
work queue, which storage confirms. Screenshots go to ``artifacts/screenshots/``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dal.config import Settings, StorageClients
from tests.web.conftest import SECRET, served
from tests.web.test_api_poison import TOKEN, _poison
from tests.web.test_browser import shot, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def operator_app(azurite_connection_string: str, unique: str) -> Iterator[dict[str, Any]]:
    """The web app alone (no roles: nothing consumes the queues) with an operator token."""
    from webapp import create_app

    prefix = f"q{unique}"
    settings = Settings(connection_string=azurite_connection_string, name_prefix=prefix)
    app = create_app(
        {
            "SECRET_KEY": SECRET,
            "SETTINGS": settings,
            "CONNECTION_STRING": azurite_connection_string,
            "ADMIN_TOKEN": TOKEN,
        }
    )
    with served(app) as url:
        yield {"url": url, "prefix": prefix}


def test_an_operator_requeues_poison_messages_from_the_queues_page(
    operator_app: dict[str, Any], browser_context: Any, storage: StorageClients
) -> None:
    accessor = _poison(storage, operator_app["prefix"], 2)
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(operator_app["url"] + "/queues")
    status = page.locator("#poison-status")

    page.locator("#admin-token").fill("not-the-token")
    page.locator("#admin-token-form button[type=submit]").click()
    wait_until(page, "document.getElementById('poison-status').textContent.includes('refused')")

    page.locator("#admin-token").fill(TOKEN)
    page.locator("#admin-token-form button[type=submit]").click()
    wait_until(page, "!document.getElementById('poison-status').textContent.includes('refused')")
    rows = page.locator('.poison-queue[data-queue="slicerequest"] tbody tr')
    wait_until(page, "document.querySelectorAll('.poison-queue[data-queue=\"slicerequest\"] tbody tr').length === 2")
    assert "kept failing" in rows.first.inner_text()
    shot(page, "12-queues-poison")

    rows.first.locator("button.requeue-one").click()
    wait_until(page, "document.querySelectorAll('.poison-queue[data-queue=\"slicerequest\"] tbody tr').length === 1")
    assert status.inner_text().startswith("Requeued 1 message(s) of slicerequest")
    page.locator('.poison-queue[data-queue="slicerequest"] button.requeue-all').click()
    wait_until(page, "document.getElementById('poison-status').textContent.includes('No poison messages')")
    assert status.inner_text().startswith("Requeued 1 message(s) of slicerequest")
    # the depth table follows (the action triggers its refresh)
    wait_until(page, "document.querySelector('tr[data-queue=\"slicerequest\"] td:last-child').textContent === '0'")
    shot(page, "13-queues-requeued")

    assert accessor.slice_request.poison.approximate_depth() == 0
    assert accessor.slice_request.approximate_depth() == 2  # both back on their work queue
    assert errors == []
    assert browser_context.violations == [], "the Queues page broke its Content-Security-Policy"
