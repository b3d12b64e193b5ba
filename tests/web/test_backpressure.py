"""Backpressure on POST /api/jobs (dal.admission.backpressure), against the session's Azurite.

Each test serves the app on its own name prefix with no roles running, so nothing drains the
queues: the test fills ``slicerequest`` past what the measured render rate finishes in the
allowed wait (10 s here), the way a real backlog would, and records the rate a processor
would have reported (``dal.admission.render_rates``). The cache is off (0 s) so a change is seen at once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask

from dal.admission.render_rates import RenderRates
from dal.blobs.libraries import LibraryStore
from dal.config import IMAGE_INPUT_CONTAINER, Settings, StorageClients
from dal.jobs.model import JobStatus
from dal.jobs.store import JobStore
from dal.queues.accessor import QueueAccessor
from photomosaics.cli import main
from tests.web.conftest import (
    LIBRARY,
    OPERATOR,
    OPERATOR_TOKEN,
    SECRET,
    ApiClient,
    enter_operator_token,
    png_bytes,
    served,
    submit,
)
from tests.web.test_browser import shot, wait_until
from webapp import create_app

MAX_WAIT = 10
SECONDS_PER_SLICE = 2.0  # 0.5 slices/s: 6 waiting slices are a 12 s wait, over the 10 s allowed


@pytest.fixture
def busy(azurite_connection_string: str, unique: str, storage: StorageClients) -> Iterator[dict[str, Any]]:
    prefix = f"b{unique}"
    settings = Settings(
        connection_string=azurite_connection_string,
        name_prefix=prefix,
        backpressure_max_wait_seconds=MAX_WAIT,
        backlog_cache_seconds=0,
    )
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": settings,
            "CONNECTION_STRING": azurite_connection_string,
            "SSE_POLL_SECONDS": 0.1,
        }
    )
    app.test_client_class = ApiClient
    colours = [(0, 0, 0), (255, 255, 255), (200, 30, 30), (30, 200, 30), (30, 30, 200)]
    tiles = [(f"c{i}.png", png_bytes(32, 32, colour=c)) for i, c in enumerate(colours)]
    LibraryStore(storage, prefix=prefix).create_from(LIBRARY, "flat colours", tiles, shared=True)
    queues = QueueAccessor(storage, settings=settings, prefix=prefix)
    queues.ensure_all()
    rates = RenderRates(storage, prefix=prefix)
    rates.ensure_table()
    yield {
        "app": app,
        "prefix": prefix,
        "queues": queues,
        "rates": rates,
        "jobs": JobStore(storage, prefix=prefix),
        "settings": settings,
    }


def _fill(queues: QueueAccessor, count: int) -> None:
    """Waiting slices; nothing consumes them in these tests, so their content does not matter."""
    client = queues.storage.queue_service.get_queue_client(queues.slice_request.name)
    for i in range(count):
        client.send_message(f"waiting slice {i}")


def _inputs(storage: StorageClients, prefix: str) -> list[str]:
    container = storage.blob_service.get_container_client(f"{prefix}{IMAGE_INPUT_CONTAINER}")
    return [blob.name for blob in container.list_blobs()]


def test_a_backlog_over_the_measured_capacity_answers_503_and_stores_nothing(
    busy: dict[str, Any], storage: StorageClients
) -> None:
    app: Flask = busy["app"]
    app.config["ADMIN_TOKEN"] = OPERATOR_TOKEN
    client = app.test_client()
    queues: QueueAccessor = busy["queues"]
    _fill(queues, 6)

    # Nothing measured yet (no processor reported a rate): the service admits (fail open).
    assert client.get("/api/queues", headers=OPERATOR).get_json()["backlog"]["estimated_wait_seconds"] is None
    first = submit(client)
    assert first.status_code == 202, first.get_json()

    busy["rates"].record("processor@test:1", seconds_per_slice=SECONDS_PER_SLICE, slices=3)
    backlog = client.get("/api/queues", headers=OPERATOR).get_json()["backlog"]
    # 6 slices + 4 for the image request not yet sliced, at 0.5 slices/s
    assert backlog == {
        "waiting_slices": 10,
        "processors": 1,
        "slices_per_second": 0.5,
        "estimated_wait_seconds": 20.0,
        "max_wait_seconds": MAX_WAIT,
        "busy": True,
    }
    inputs = _inputs(storage, busy["prefix"])
    depth = queues.image_request.approximate_depth()

    refused = submit(client)

    assert refused.status_code == 503
    assert refused.get_json()["error"] == "service_busy"
    assert "busy" in refused.get_json()["detail"]
    assert int(refused.headers["Retry-After"]) == 10  # 20 s of work, 10 s allowed: back in 10 s
    assert _inputs(storage, busy["prefix"]) == inputs
    assert queues.image_request.approximate_depth() == depth
    assert len(client.get("/api/jobs").get_json()["jobs"]) == 1  # and no quota slot was taken

    queues.slice_request.clear()  # the processors caught up
    assert submit(client).status_code == 202


def test_backpressure_can_be_turned_off(busy: dict[str, Any]) -> None:
    settings = replace(busy["settings"], backpressure_max_wait_seconds=0)
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": settings,
            "CONNECTION_STRING": settings.connection_string,
            "ADMIN_TOKEN": OPERATOR_TOKEN,
        }
    )
    app.test_client_class = ApiClient
    _fill(busy["queues"], 50)
    busy["rates"].record("processor@test:1", seconds_per_slice=SECONDS_PER_SLICE, slices=3)
    response = submit(app.test_client())
    assert response.status_code == 202
    assert app.test_client().get("/api/queues", headers=OPERATOR).get_json()["backlog"]["busy"] is False


def _fail_the_job_once_stored(jobs: JobStore, prefix: str, stop: threading.Event) -> None:
    """Stand-in for the (absent) workers: the first job stored ends failed, so the CLI returns."""
    table = jobs.storage.table_service.get_table_client(f"{prefix}jobs")
    while not stop.wait(0.2):
        rows = [r for r in table.query_entities("RowKey lt '~'", select=["PartitionKey", "RowKey", "status"])]
        for row in rows:
            if row["status"] != JobStatus.FAILED:
                jobs.update(
                    row["PartitionKey"],
                    row["RowKey"],
                    lambda j: replace(j, status=JobStatus.FAILED, error="stopped by the test"),
                )
                return


def test_the_cli_waits_out_a_busy_service_and_then_submits(busy: dict[str, Any], tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes(90, 60))
    queues: QueueAccessor = busy["queues"]
    _fill(queues, 6)  # 12 s of work at 0.5 slices/s: busy, Retry-After 5 s (the minimum)
    busy["rates"].record("processor@test:1", seconds_per_slice=SECONDS_PER_SLICE, slices=3)
    stop, refused = threading.Event(), threading.Event()

    @busy["app"].after_request
    def note_refusals(response: Any) -> Any:  # the helper below waits for the first 503 to go out
        if response.status_code == 503:
            refused.set()
        return response

    def catch_up() -> None:
        refused.wait(60)
        queues.slice_request.clear()
        _fail_the_job_once_stored(busy["jobs"], busy["prefix"], stop)

    helper = threading.Thread(target=catch_up, daemon=True)
    with served(busy["app"]) as url:
        helper.start()
        try:
            result = CliRunner().invoke(
                main,
                [
                    "submit",
                    str(photo),
                    "--library",
                    LIBRARY,
                    "--tile-size",
                    "8",
                    "--slices",
                    "2",
                    "--url",
                    url,
                    "--timeout",
                    "60",
                ],
                catch_exceptions=False,
            )
        finally:
            stop.set()
            helper.join(timeout=10)
    assert "the service is busy" in result.output
    assert "(HTTP 503 service_busy): retrying in 5 s (attempt 2)" in result.output
    assert re.search(r"job [0-9a-f-]{36}: ", result.output), result.output  # accepted on the second attempt
    assert "failed: stopped by the test" in result.output
    assert result.exit_code == 1


def test_the_cli_gives_up_when_told_not_to_wait(busy: dict[str, Any], tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes(90, 60))
    _fill(busy["queues"], 6)
    busy["rates"].record("processor@test:1", seconds_per_slice=SECONDS_PER_SLICE, slices=3)
    with served(busy["app"]) as url:
        result = CliRunner().invoke(
            main, ["submit", str(photo), "--library", LIBRARY, "--url", url, "--retry-for", "0"], catch_exceptions=False
        )
    assert result.exit_code == 1
    assert "(HTTP 503 service_busy); gave up after 1 attempt(s)" in result.output
    assert "retrying" not in result.output


@pytest.mark.browser
@pytest.mark.slow
def test_the_browser_says_busy_and_the_queues_page_shows_the_wait(
    busy: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes(90, 60))
    _fill(busy["queues"], 30)  # 60 s of work at 0.5 slices/s: Retry-After 50 s
    busy["rates"].record("processor@test:1", seconds_per_slice=SECONDS_PER_SLICE, slices=3)
    busy["app"].config["ADMIN_TOKEN"] = OPERATOR_TOKEN
    with served(busy["app"]) as url:
        page = browser_context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/")
        page.locator(f'.library-option[data-library="{LIBRARY}"]').click()
        page.set_input_files("#image", str(photo))
        page.locator("#final-dims").filter(has_text="×").wait_for()
        page.locator("#submit").click()
        page.locator("#form-error").filter(has_text="The service is busy, try again in 50 s.").wait_for()
        assert page.url == url + "/"
        shot(page, "14-create-busy")

        page.goto(url + "/queues")
        enter_operator_token(page)
        wait_until(page, "document.getElementById('estimated-wait').dataset.busy === 'true'")
        assert page.locator("#estimated-wait").inner_text().startswith("about 60 s for 30 waiting slices")
        shot(page, "15-queues-busy")
    assert errors == []
    assert browser_context.violations == [], "a page broke its Content-Security-Policy"


def test_the_cli_retries_a_quota_refusal_and_reports_it(
    busy: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """429 through ``photomosaics submit``: every CLI run is a new client, so the quota that
    refuses it here is the unfinished limit at 0; the helper raises it once the first 429 has
    gone out (as an operator would), and the CLI's retry after ``Retry-After`` gets in."""
    import dal.admission.quotas

    monkeypatch.setattr(dal.admission.quotas, "UNFINISHED_RETRY_AFTER", 1)  # 15 s in production
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes(90, 60))
    app = busy["app"]
    with app.app_context():
        from webapp.services import services

        quotas = services().quotas
    quotas.max_unfinished = 0
    stop, refused = threading.Event(), threading.Event()

    @app.after_request
    def note_refusals(response: Any) -> Any:
        if response.status_code == 429:
            refused.set()
        return response

    def raise_the_limit() -> None:
        refused.wait(60)
        quotas.max_unfinished = 3
        _fail_the_job_once_stored(busy["jobs"], busy["prefix"], stop)

    helper = threading.Thread(target=raise_the_limit, daemon=True)
    with served(app) as url:
        gave_up = CliRunner().invoke(
            main, ["submit", str(photo), "--library", LIBRARY, "--url", url, "--retry-for", "0"], catch_exceptions=False
        )
        refused.clear()  # the helper waits for the next run's 429
        helper.start()
        try:
            result = CliRunner().invoke(
                main,
                ["submit", str(photo), "--library", LIBRARY, "--tile-size", "8", "--url", url, "--timeout", "60"],
                catch_exceptions=False,
            )
        finally:
            stop.set()
            helper.join(timeout=10)
    assert gave_up.exit_code == 1
    assert "at most 0 unfinished jobs per client" in gave_up.output
    assert "(HTTP 429 quota_exceeded); gave up after 1 attempt(s)" in gave_up.output
    assert "(HTTP 429 quota_exceeded): retrying in 1 s (attempt 2)" in result.output, result.output
    assert re.search(r"job [0-9a-f-]{36}: ", result.output), result.output
    assert "failed: stopped by the test" in result.output
    assert result.exit_code == 1
