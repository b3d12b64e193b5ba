"""The browser's upload flow on the same photos: the libraries page in headless Chromium.

``/usr/bin/chromium`` driven by Playwright, as ``tests/web/test_browser.py`` drives it: the
libraries page, a library name, the folder chosen in its folder input (``#lib-folder``,
``webkitdirectory``), "Upload and create library", then the library's photos panel until it
says nothing is pending. Timed from the click to that. ``seconds`` answers None when the page
has no folder upload (the flow is not in this checkout) or Chromium is missing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def seconds(url: str, library: str, folder: Path, profile: Path, *, timeout: float = 3600.0) -> float | None:
    if not os.path.exists(CHROMIUM):
        return None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=ARGS, headless=True
        )
        try:
            page = context.new_page()
            page.goto(url + "/libraries")
            if page.locator("#lib-folder").count() == 0:
                return None
            page.locator("#lib-name").fill(library)
            page.set_input_files("#lib-folder", str(folder))
            started = time.perf_counter()
            page.locator("#lib-submit").click()
            page.locator("#upload-progress[data-done='1']").wait_for(timeout=timeout * 1000)
            panel = page.locator(f'.library-photos[data-library="{library}"]')
            panel.and_(page.locator("[data-pending='0']")).wait_for(timeout=timeout * 1000)
            return time.perf_counter() - started
        finally:
            context.close()
