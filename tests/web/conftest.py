"""Fixtures of the web tests: an app over the session's Azurite, clients, a small tile library,
and a headless Chromium.

One name prefix per test session isolates these tests' containers, tables and queues from
every other test; each test client gets its own client id (cookie), which is all the
isolation the jobs need. The tile library is made once per session (a few dozen tiles), and
so is the browser: each browser test gets a fresh context in it (``browser_context``).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from PIL import Image

from benchmarks.browser_upload import ARGS as CHROMIUM_ARGS  # one list of the flags, the benchmark's
from benchmarks.browser_upload import CHROMIUM
from dal.config import Settings, StorageClients
from dal.queues.accessor import QueueAccessor
from tests.support.prereqs import require
from webapp import create_app
from webapp.csrf import CSRF_HEADER, CSRF_VALUE

SECRET = "test-secret-key-for-the-web-tests"
OPERATOR_TOKEN = "operator-token-for-the-web-tests"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}  # reads /api/queues and /metrics
LIBRARY = "webtiles"
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
LAPTOP = {"width": 1366, "height": 900}


def png_bytes(
    width: int = 64, height: int = 48, *, fmt: str = "PNG", colour: tuple[int, int, int] | None = None
) -> bytes:
    """A small photo-like image (a gradient) in the given format."""
    image = Image.new("RGB", (width, height), colour or (0, 0, 0))
    if colour is None:
        for x in range(width):
            for y in range(height):
                image.putpixel((x, y), (x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), 128))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


class ApiClient(FlaskClient):
    """A test client that sends the CSRF header on every request unless told otherwise."""

    def open(self, *args: Any, **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", None) or {})
        if kwargs.pop("csrf", True):
            headers.setdefault(CSRF_HEADER, CSRF_VALUE)
        response = super().open(*args, headers=headers, **kwargs)
        # werkzeug's test client spools a large body to a temporary file it never closes.
        body = response.request.environ.get("wsgi.input") if response.request is not None else None
        if body is not None and hasattr(body, "fileno"):
            body.close()
        return response


@pytest.fixture(scope="session")
def web_prefix() -> str:
    return "w" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def web_settings(azurite_connection_string: str, web_prefix: str) -> Settings:
    return Settings(
        connection_string=azurite_connection_string,
        name_prefix=web_prefix,
        max_upload_bytes=2 * 1024 * 1024,
        max_input_pixels=4_000_000,
        max_output_pixels=4_000_000,
        max_slices=16,
        # The shared app serves many tests' submissions under few client ids and no worker ever
        # finishes them: quotas are raised here on purpose and tested on their own (test_quotas.py).
        max_unfinished_jobs=100_000,
        submissions_per_minute=100_000,
        address_burst=100_000,
        address_submissions_per_hour=100_000,
        library_address_burst=100_000,
        library_client_burst=100_000,
        libraries_per_hour=100_000,
    )


@pytest.fixture(scope="session")
def web_storage(azurite_connection_string: str) -> StorageClients:
    return StorageClients(azurite_connection_string, profile="probe")


@pytest.fixture(scope="session")
def tile_library(web_storage: StorageClients, web_prefix: str) -> str:
    """A library of 18 flat-coloured tiles, made once per session."""
    from dal.blobs.libraries import LibraryStore

    colours = [(r, g, b) for r in (0, 120, 240) for g in (0, 120, 240) for b in (0, 240)]
    tiles = [(f"c{i:02d}.png", png_bytes(64, 64, colour=c)) for i, c in enumerate(colours)]
    LibraryStore(web_storage, prefix=web_prefix).create_from(
        LIBRARY, "Flat colours for the web tests", tiles, shared=True
    )
    return LIBRARY


@pytest.fixture
def app(
    web_settings: Settings, web_storage: StorageClients, azurite_connection_string: str, tile_library: str
) -> Flask:
    # The session's tests share queues, and nothing consumes them here: each test starts with
    # empty imagerequest lanes, so the at most 32 messages a peek shows hold its own.
    for lane in QueueAccessor(web_storage, settings=web_settings, prefix=web_settings.name_prefix).image_request_lanes:
        lane.clear()
    flask_app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": web_settings,
            "CONNECTION_STRING": azurite_connection_string,
            "SSE_POLL_SECONDS": 0.05,
        }
    )
    flask_app.test_client_class = ApiClient
    return flask_app


@pytest.fixture
def operator(app: Flask) -> dict[str, str]:
    """The app given an operator token; the headers that carry it (operations endpoints)."""
    app.config["ADMIN_TOKEN"] = OPERATOR_TOKEN
    return OPERATOR


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def other_client(app: Flask) -> FlaskClient:
    """A second browser: its own cookie jar, so its own client id."""
    return app.test_client()


@pytest.fixture(scope="session")
def live_storage(azurite_connection_string: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The browser tests' name prefix in the session Azurite with the demo library a person gets
    (2,100 tiles of the sample photos), made once: ``live_app`` runs the roles and the app on it."""
    from photomosaics.render_library import demo_library
    from tests.support.pipelines import Pipeline
    from workers.demo_library import DEMO_DESCRIPTION, DEMO_LIBRARY_NAME

    pipeline = Pipeline(azurite_connection_string, tmp_path_factory.mktemp("browser"))
    pipeline.services.libraries.create(DEMO_LIBRARY_NAME, DEMO_DESCRIPTION, demo_library()[0], shared=True)
    return pipeline


@pytest.fixture(scope="module")
def live_app(live_storage: Any, azurite_connection_string: str) -> Iterator[dict[str, Any]]:
    """Real controller, processor, responder and indexer processes on ``live_storage``'s prefix,
    and the app served on a free loopback port, whose origins (127.0.0.1 and localhost) the Blob
    service's CORS rule allows (the page uploads library photos straight to storage, as
    ``photomosaics run`` sets it up). One module's: idle roles poll their queues, and four of
    them kept for the rest of the session cost more CPU than starting them again."""
    from dal.blobs.cors import local_origins, set_upload_cors
    from webapp import create_app

    pipeline = live_storage
    pipeline.start("controller")
    pipeline.start("responder")
    # Slow each slice down a little, so that a page sees slices arrive one by one.
    pipeline.start("processor", env={"PHOTOMOSAICS_TEST_SLICE_DELAY": "0.7"})
    pipeline.start("indexer")
    app = create_app(
        {
            "SECRET_KEY": SECRET,
            "SETTINGS": pipeline.settings,
            "CONNECTION_STRING": azurite_connection_string,
            "SSE_POLL_SECONDS": 0.2,
            "ADMIN_TOKEN": OPERATOR_TOKEN,
        }
    )
    try:
        with served(app) as url:
            # As `photomosaics run`: the page typed as 127.0.0.1 or as localhost may upload.
            set_upload_cors(pipeline.services.storage, local_origins("127.0.0.1", int(url.rsplit(":", 1)[1])))
            yield {"url": url, "pipeline": pipeline}
    finally:
        pipeline.stop_all()


def enter_operator_token(page: Any) -> None:
    """On the Queues page: the operator token in its form (the depths are for operators)."""
    page.locator("#admin-token").fill(OPERATOR_TOKEN)
    page.locator("#admin-token-form button[type=submit]").click()


@contextlib.contextmanager
def served(app: Flask) -> Iterator[str]:
    """``app`` served by a thread on a free loopback port; yields its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="web", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def submit(client: FlaskClient, *, image: bytes | None = None, filename: str = "photo.png", **fields: Any) -> Any:
    """POST /api/jobs with good defaults; any field can be overridden or set to None to omit it."""
    form: dict[str, Any] = {"library": LIBRARY, "tile_size": "8", "slices": "2"}
    form.update({k: v for k, v in fields.items()})
    form = {k: v for k, v in form.items() if v is not None}
    if image is not False:  # type: ignore[comparison-overlap]
        form["image"] = (io.BytesIO(png_bytes() if image is None else image), filename)
    return client.post("/api/jobs", data=form, content_type="multipart/form-data")


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Chromium per test worker, started by the first test that asks: each test
    gets a fresh context of its own (``browser_context``), as isolated as a new profile
    (cookies, storage, IndexedDB), without a browser start each (about 0.6 s of CPU)."""
    require(os.path.exists(CHROMIUM), f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_context(chromium: Any) -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = chromium.new_context(viewport=LAPTOP, accept_downloads=True)
    # The app's Content-Security-Policy is on: any violation Chromium reports fails the test.
    context.violations = []
    context.expose_binding("reportCspViolation", lambda _source, text: context.violations.append(text))
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation',"
        " e => window.reportCspViolation(`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`));"
    )
    try:
        yield context
    finally:
        context.close()
