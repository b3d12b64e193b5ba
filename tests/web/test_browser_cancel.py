"""Cancel in a real headless Chromium: the job page's Cancel ends an unfinished job, and the
history page then offers to delete it. The app is served alone (no roles): a job stays queued
until it is cancelled, so nothing races the click. Screenshots go to ``artifacts/screenshots/``."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from tests.web.conftest import LIBRARY, png_bytes, served
from tests.web.test_browser import shot, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_owner_cancels_a_queued_job_from_its_page_and_may_then_delete_it(app: Flask, browser_context: Any) -> None:
    with served(app) as url:
        submitted = browser_context.request.post(
            f"{url}/api/jobs",
            headers={"X-Requested-With": "photomosaics"},
            multipart={
                "library": LIBRARY,
                "tile_size": "8",
                "slices": "2",
                "image": {"name": "p.png", "mimeType": "image/png", "buffer": png_bytes(96, 64)},
            },
        )
        assert submitted.status == 202, submitted.text()
        request_id = submitted.json()["request_id"]
        page = browser_context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/jobs/{request_id}")
        cancel = page.locator("#cancel")
        wait_until(page, "!document.getElementById('cancel').hidden")  # queued: nothing has run
        shot(page, "22a-job-queued", full_page=False)
        page.once("dialog", lambda dialog: dialog.accept())
        cancel.click()
        wait_until(page, "document.getElementById('status').dataset.status === 'failed'")
        assert page.locator("#job-error").inner_text().startswith("You cancelled this mosaic")
        assert page.locator("#status").text_content() == "cancelled"
        assert cancel.is_hidden()
        shot(page, "22b-job-cancelled", full_page=False)

        page.goto(f"{url}/jobs")
        card = page.locator(f'.tile-card[data-request-id="{request_id}"]')
        wait_until(page, f"document.querySelector('.tile-card[data-request-id=\"{request_id}\"]') !== null")
        assert card.locator(".badge").text_content() == "cancelled"
        assert card.get_by_role("button", name="Delete").is_visible()
        assert card.get_by_role("button", name="Cancel").count() == 0
        page.once("dialog", lambda dialog: dialog.accept())
        card.get_by_role("button", name="Delete").click()
        wait_until(page, f"document.querySelector('.tile-card[data-request-id=\"{request_id}\"]') === null")
    assert errors == []
    assert browser_context.violations == [], "the page broke its Content-Security-Policy"
