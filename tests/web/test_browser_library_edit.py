"""The owner changes a library from its Photos panel, in real headless Chromium against the
embedded Azurite and a real indexer: rename it inline (a taken name and a name against the rules
are refused beside the field, a good one renames it), tick photos on a page, "select all on this
page", across pages, and remove them after a confirm (a dismissed confirm removes nothing). On a
phone the panel does not scroll sideways. Screenshots go to ``artifacts/screenshots/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.web.test_browser import PHONE, shot, wait_until
from tests.web.test_browser_uploads import QUICK_POLLS, _jpeg

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAMES = ["p1.jpg", "p2.jpg", "p3.jpg", "p4.jpg", "p5.jpg"]
IMAGES_LOADED = "[...document.querySelectorAll('.photo-grid img')].every(i => i.complete && i.naturalWidth > 0)"


def _shown(page: Any) -> list[str]:
    return page.locator(".library-photos .photo").evaluate_all("items => items.map(i => i.dataset.name)")


def _ticked(page: Any) -> list[str]:
    return page.locator(".library-photos .photo").evaluate_all(
        "items => items.filter(i => i.querySelector('.pick').checked).map(i => i.dataset.name)"
    )


def test_the_owner_renames_the_library_and_removes_ticked_photos_from_the_page(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    base, libraries = live_app["url"], live_app["pipeline"].services.libraries
    staging = live_app["pipeline"].services.staging
    files = []
    for i, name in enumerate(NAMES):
        (tmp_path / name).write_bytes(_jpeg(40 + i, (160, 120)))
        files.append(str(tmp_path / name))
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    answers = [False, True]  # the first confirm is dismissed, the second accepted
    dialogs: list[str] = []

    def confirm(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept() if answers.pop(0) else dialog.dismiss()

    page.on("dialog", confirm)
    page.goto(base + "/libraries")
    page.locator("#libraries .card").first.wait_for()
    page.evaluate(f"PMLibraryPhotos.settings.pageSize = 4; {QUICK_POLLS}")
    page.locator("#lib-name").fill("edits")
    page.set_input_files("#lib-files", files)
    page.locator("#lib-submit").click()
    panel = page.locator('.library-photos[data-library="edits"]')
    panel.and_(page.locator("[data-pending='0']")).wait_for(timeout=90_000)
    assert _shown(page) == NAMES[:4]

    # Rename: a taken name, then one against the rules, each refused beside the field.
    panel.get_by_role("button", name="Rename library").click()
    field = panel.get_by_label("New name")
    assert field.input_value() == "edits" and field.evaluate("e => e === document.activeElement")
    error = panel.locator(".rename-form [role=alert]")
    assert field.get_attribute("aria-describedby") == error.get_attribute("id")
    field.fill("demo")
    panel.get_by_role("button", name="Save name").click()
    error.filter(has_text="a library called 'demo' exists already; choose another name").wait_for()
    assert field.get_attribute("aria-invalid") == "true"
    shot(page, "18-library-rename-taken")
    field.fill("Edits_2")
    panel.get_by_role("button", name="Save name").click()
    error.filter(has_text="3 to 63 lowercase letters, digits and single hyphens").wait_for()
    assert libraries.info("edits") is not None  # nothing was asked of the server
    field.fill("our-edits")
    panel.get_by_role("button", name="Save name").click()
    renamed = page.locator('.library-photos[data-library="our-edits"][data-pending="0"]')
    renamed.wait_for()
    page.locator('.library-cards [data-library="our-edits"]').wait_for()
    assert page.locator('.library-cards [data-library="edits"]').count() == 0
    info = libraries.info("our-edits")
    assert info is not None and info.name == "our-edits"
    key = info.key
    assert renamed.locator("h2").inner_text() == "Photos of our-edits"

    # Tick: select all on the first page, untick one, tick the fifth on the next page.
    wait_until(page, IMAGES_LOADED)
    select_all = renamed.get_by_label("Select all on this page")
    remove = renamed.locator(".remove-photos")
    assert remove.is_disabled()
    select_all.check()
    assert _ticked(page) == NAMES[:4]
    assert renamed.locator(".selected-count").inner_text() == "4 selected"
    renamed.get_by_label("Select p2.jpg").uncheck()
    assert select_all.evaluate("e => e.indeterminate") and not select_all.is_checked()
    renamed.get_by_role("button", name="Next ›").click()
    renamed.locator('.photo[data-name="p5.jpg"]').wait_for()
    assert not select_all.is_checked()
    renamed.get_by_label("Select p5.jpg").check()
    assert renamed.locator(".selected-count").inner_text() == "4 selected"
    renamed.get_by_role("button", name="‹ Previous").click()
    renamed.locator('.photo[data-name="p1.jpg"]').wait_for()
    assert _ticked(page) == ["p1.jpg", "p3.jpg", "p4.jpg"]  # kept across pages
    shot(page, "19-library-photos-selected")

    # Remove, asked first: dismissed, nothing goes; accepted, the four go.
    assert remove.inner_text() == "Remove 4 photos…"
    remove.click()
    assert dialogs == ["Remove 4 photos from “our-edits”? Mosaics already made keep them."]
    assert sorted(staging.staged(key)) == NAMES
    remove.click()
    renamed.locator(".remove-status").filter(has_text="Removed 4 photos.").wait_for()
    renamed.locator('.photo[data-name="p2.jpg"]').wait_for()
    wait_until(page, "document.querySelectorAll('.library-photos .photo').length === 1")
    assert _shown(page) == ["p2.jpg"] and _ticked(page) == []
    assert renamed.locator(".selected-count").inner_text() == "" and remove.is_disabled()
    assert sorted(staging.staged(key)) == ["p2.jpg"]
    manifest, _ = libraries.indexed.read(key)
    assert sorted(n for n, p in manifest.photos.items() if p.state == "indexed") == ["p2.jpg"]
    tiles = page.locator('.library-cards [data-library="our-edits"] h2 small')
    tiles.filter(has_text="1 tile").wait_for()
    assert tiles.inner_text() == "1 tile"
    shot(page, "20-library-photos-removed")

    # On a phone: the rename form and its error, the tools and the cards fit the width.
    phone = browser_context.new_page()
    phone.set_viewport_size(PHONE)
    phone.goto(base + "/libraries")
    phone.locator('.library-cards [data-library="our-edits"] .show-photos').click()
    panel = phone.locator('.library-photos[data-library="our-edits"][data-pending="0"]')
    panel.locator(".photo img").first.wait_for()
    panel.get_by_role("button", name="Rename library").click()
    panel.get_by_label("New name").fill("demo")
    panel.get_by_role("button", name="Save name").click()
    panel.locator(".rename-form [role=alert]").filter(has_text="exists already").wait_for()
    panel.get_by_label("Select p2.jpg").check()
    wait_until(phone, IMAGES_LOADED)
    shot(phone, "21-phone-library-edit")
    overflow = phone.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"/libraries scrolls sideways on a phone by {overflow}px"
    assert errors == []
    assert browser_context.violations == [], "the page broke its Content-Security-Policy"
