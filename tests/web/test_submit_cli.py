"""``photomosaics submit`` against a live web app: a real job through real role processes, and
every way it can fail (bad input, unknown library, unreachable app, failed job, timeout)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from PIL import Image

from dal.config import IMAGE_OUTPUT_CONTAINER, Settings, StorageClients
from dal.jobs.store import JobStore
from photomosaics.cli import main
from tests.web.conftest import LIBRARY, SECRET, png_bytes

pytestmark = pytest.mark.slow


def run(*args: str) -> Any:
    return CliRunner().invoke(main, ["submit", *args], catch_exceptions=False)


def _twelve_across(photo: Path, library: str, out: Path, url: str) -> Any:
    """A small job: 12 tiles of 8 px across."""
    return run(
        str(photo), "--library", library, "--tile-size", "8", "--tiles-across", "12", "-o", str(out), "--url", url
    )


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    path = tmp_path / "photo.png"
    path.write_bytes(png_bytes(90, 60))
    return path


@pytest.fixture
def idle_app(web_settings: Settings, azurite_connection_string: str, tile_library: str) -> Iterator[str]:
    """The app over the API tests' prefix, where no worker runs: jobs stay queued."""
    from werkzeug.serving import make_server

    from webapp import create_app

    app = create_app({"SECRET_KEY": SECRET, "SETTINGS": web_settings, "CONNECTION_STRING": azurite_connection_string})
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


def test_submit_makes_and_saves_the_mosaic(live_app: dict[str, Any], photo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jpg"
    result = run(
        str(photo),
        "--library",
        "demo",
        "--tile-size",
        "8",
        "--slices",
        "3",
        "--tiles-across",
        "30",
        "--correction",
        "35",
        "--cell-sizes",
        "1,2",
        "--split",
        "40",
        "-o",
        str(out),
        "--url",
        live_app["url"],
    )
    assert result.exit_code == 0, result.output
    request_id = re.search(r"job ([0-9a-f-]{36})", result.output).group(1)  # type: ignore[union-attr]
    submitted = next(e for e in live_app["pipeline"].services.jobs.events(request_id) if e.kind == "submitted")
    assert "colour correction 35 %" in submitted.message and "cells of 1 and 2 tiles (split 40)" in submitted.message
    assert "30×20 tiles of 8 px" in result.output and "saved" in result.output
    stored = live_app["pipeline"].services.blobs.download(IMAGE_OUTPUT_CONTAINER, f"{request_id}.jpg")
    assert out.read_bytes() == stored
    with Image.open(out) as image:
        assert image.size == (240, 160)
    assert not out.with_name("out.jpg.part").exists()


def test_an_iphone_heic_photo_makes_a_mosaic(live_app: dict[str, Any], tmp_path: Path) -> None:
    """The photo a person has on their phone is a HEIC: accepted, decoded by the controller and
    rendered through the real roles like any other."""
    import io

    import pillow_heif

    photo = tmp_path / "IMG_0001.HEIC"
    out = io.BytesIO()
    with Image.open(io.BytesIO(png_bytes(120, 90))) as image:
        pillow_heif.from_pillow(image).save(out, format="HEIF", quality=90)
    photo.write_bytes(out.getvalue())
    mosaic = tmp_path / "mosaic.jpg"
    result = _twelve_across(photo, "demo", mosaic, live_app["url"])
    assert result.exit_code == 0, result.output
    with Image.open(mosaic) as made:
        assert made.size == (96, 72)


def test_a_library_made_with_library_add_is_this_machines_to_submit_with(
    live_app: dict[str, Any], photo: Path, tmp_path: Path, client_file: Path
) -> None:
    """A person's first two commands: ``library add wedding ~/photos``, then ``submit me.jpg
    --library wedding``. The library is private to the client that made it, so both commands are
    one client: the cookie the app gave the first is kept (``photomosaics.client_file``)."""
    import uuid

    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(3):
        (folder / f"IMG_{seed}.png").write_bytes(png_bytes(120, 90, colour=(60 + 80 * seed, 40, 220 - 70 * seed)))
    name = f"mine-{uuid.uuid4().hex[:8]}"
    added = CliRunner().invoke(main, ["library", "add", name, str(folder), "--url", live_app["url"], "--timeout", "60"])
    assert added.exit_code == 0 and "3 indexed" in added.output, added.output
    out = tmp_path / "out.jpg"
    result = _twelve_across(photo, name, out, live_app["url"])
    assert result.exit_code == 0, result.output
    with Image.open(out) as mosaic:
        assert f"from {name!r}" in result.output and mosaic.size == (96, 64)
    # Another machine (no client file) is another client: the library is not its to use.
    client_file.unlink()
    other = run(str(photo), "--library", name, "--tile-size", "8", "-o", str(out), "--url", live_app["url"])
    assert other.exit_code == 1 and f"no tile library called {name!r}" in other.output, other.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--library", "nosuchlibrary"], "no tile library called 'nosuchlibrary' (HTTP 404 library_not_found)"),
        (["--library", LIBRARY, "--slices", "999"], "HTTP 400 invalid_field"),
        (["--library", LIBRARY, "--use-every-photo", "--tiles-across", "4"], "tiles across to use every photo"),
        (["--library", LIBRARY, "--cell-sizes", "1,2,4", "--tile-size", "32"], "HTTP 422 invalid_plan"),
    ],
)
def test_refusals_are_clear_and_exit_1(idle_app: str, photo: Path, args: list[str], message: str) -> None:
    result = run(str(photo), *args, "--url", idle_app)
    assert result.exit_code == 1
    assert message in result.output


def test_more_tiles_across_than_the_service_makes_is_said(idle_app: str, photo: Path, web_settings: Settings) -> None:
    """The service fits the grid under its output limit (here 4 MP): the command says it did."""
    args = ["--library", LIBRARY, "--tile-size", "8", "--tiles-across", "5000", "--timeout", "1", "--url", idle_app]
    result = run(str(photo), *args)
    assert result.exit_code == 1 and "still queued" in result.output, result.output  # no roles: it waits
    planned = re.search(r": (\d+)×(\d+) px, (\d+)×\d+ tiles of 8 px", result.output)
    assert planned, result.output
    width, height, across = (int(group) for group in planned.groups())
    assert across < 5000 and width == across * 8 and width * height <= web_settings.max_output_pixels
    assert "note: 5,000 tiles across would be over the service's output limit" in result.output


def test_not_an_image_is_refused(idle_app: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.png"
    path.write_text("not a picture")
    result = run(str(path), "--library", LIBRARY, "--url", idle_app)
    assert result.exit_code == 1 and "HTTP 415 unsupported_media_type" in result.output


def test_a_photo_from_a_pipe_is_read_once_and_makes_the_mosaic(
    live_app: dict[str, Any], photo: Path, tmp_path: Path
) -> None:
    """``submit <(curl ...)``: a pipe can be read once, but the plan and the job both send the photo."""
    read_end, write_end = os.pipe()
    data = photo.read_bytes()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        out = tmp_path / "piped.jpg"
        result = _twelve_across(Path(f"/dev/fd/{read_end}"), "demo", out, live_app["url"])
    finally:
        writer.join(timeout=10)
        os.close(read_end)
    assert result.exit_code == 0, result.output
    with Image.open(out) as made:
        assert made.size == (96, 64)
    unread, unwritten = os.pipe()
    try:
        unnamed = run(f"/dev/fd/{unread}", "--library", "demo", "--url", live_app["url"])  # /dev/fd/N-mosaic.jpg?
    finally:
        os.close(unread)
        os.close(unwritten)
    assert unnamed.exit_code == 2 and "is not a file: name the mosaic's file with --output" in unnamed.output


def test_a_photo_larger_than_the_app_takes_is_refused_without_being_read_into_memory(
    idle_app: str, tmp_path: Path
) -> None:
    import tracemalloc

    huge = tmp_path / "huge.jpg"
    with huge.open("wb") as sparse:  # 128 MiB of nothing on disk (over the app's 30): streamed, then refused
        sparse.truncate(128 << 20)
    tracemalloc.start()
    try:
        result = run(str(huge), "--library", LIBRARY, "--url", idle_app)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 1 and "HTTP 413 too_large" in result.output
    assert peak < 64 << 20, f"{peak >> 20} MiB held to send a 128 MiB file"


def test_usage_errors_exit_2_before_any_request(tmp_path: Path, photo: Path) -> None:
    assert run(str(tmp_path / "missing.png"), "--library", LIBRARY).exit_code == 2
    assert run(str(photo), "--library", LIBRARY, "--tile-size", "0").exit_code == 2
    assert run(str(photo), "--library", LIBRARY, "--correction", "101").exit_code == 2
    assert run(str(photo), "--library", LIBRARY, "--cell-sizes", "1,3").exit_code == 2
    assert run(str(photo), "--library", LIBRARY, "--split", "40").exit_code == 2  # split without several sizes
    assert run(str(photo)).exit_code == 2  # --library is required


@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://", "http://127.0.0.1:99999", "http://[::1"])
def test_a_malformed_url_is_a_usage_error(photo: Path, url: str) -> None:
    result = run(str(photo), "--library", LIBRARY, "--url", url)  # requests' own exceptions were a traceback
    assert result.exit_code == 2 and "--url" in result.output


def test_unreachable_app(photo: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run(str(photo), "--library", LIBRARY, "--url", f"http://127.0.0.1:{port}")
    assert result.exit_code == 1 and "cannot reach the web app" in result.output


def test_failed_job_and_timeout_exit_1(
    idle_app: str, photo: Path, tmp_path: Path, web_storage: StorageClients, web_settings: Settings
) -> None:
    timed_out = run(
        str(photo),
        "--library",
        LIBRARY,
        "--slices",
        "1",
        "--url",
        idle_app,
        "--timeout",
        "1",
        "-o",
        str(tmp_path / "never.jpg"),
    )
    assert timed_out.exit_code == 1 and "is still queued after 1 s" in timed_out.output
    assert not (tmp_path / "never.jpg").exists()
    jobs = JobStore(web_storage, prefix=web_settings.name_prefix)
    # Given up on, the job is cancelled: its client id is this machine's, nothing else would fetch it.
    _assert_cancelled(web_storage, jobs, timed_out.output)

    stop = threading.Event()

    def fail_new_jobs() -> None:  # stands in for a controller that gives up on the job
        table = web_storage.table_service.get_table_client(jobs.jobs_table)
        while not stop.is_set():
            for entity in table.query_entities("status eq 'queued'"):
                jobs.update(
                    entity["PartitionKey"],
                    entity["RowKey"],
                    lambda j: replace(j, status="failed", error="the library went away"),
                )
            time.sleep(0.2)

    failer = threading.Thread(target=fail_new_jobs, daemon=True)
    failer.start()
    try:
        failed = run(str(photo), "--library", LIBRARY, "--slices", "1", "--url", idle_app, "--timeout", "60")
    finally:
        stop.set()
        failer.join(timeout=10)
    assert failed.exit_code == 1
    assert "failed: the library went away" in failed.output


def _assert_cancelled(storage: StorageClients, jobs: JobStore, output: str) -> None:
    found = re.search(r"job ([0-9a-f-]{36}) cancelled", output)
    assert found, output
    table = storage.table_service.get_table_client(jobs.jobs_table)
    (row,) = table.query_entities(f"RowKey eq '{found.group(1)}'")
    job = jobs.get(row["PartitionKey"], found.group(1))
    assert job is not None and job.status == "failed" and job.error == "cancelled by its owner", job


def test_ctrl_c_cancels_the_job_it_was_following(
    idle_app: str, photo: Path, web_storage: StorageClients, web_settings: Settings
) -> None:
    """Ctrl-C while the job runs (here: stays queued, no roles): the job is cancelled, not left
    to use the workers and a place in this machine's quota for a result nobody fetches."""
    command = [sys.executable, "-c", "from photomosaics.cli import main; main()", "submit", str(photo)]
    submit = subprocess.Popen(
        [*command, "--library", LIBRARY, "--slices", "1", "--url", idle_app, "--timeout", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C must reach it as it reaches a terminal's command, whatever this test inherited
        # (under `nohup` or `make test &` SIGINT is ignored, and a child would keep that).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert submit.stderr is not None
        said = [submit.stderr.readline()]
        while said[-1] and not said[-1].startswith("job "):
            said.append(submit.stderr.readline())
        assert said[-1].startswith("job "), said
        submit.send_signal(signal.SIGINT)
        _, rest = submit.communicate(timeout=60)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
    assert submit.returncode == 130, rest
    assert "interrupted:" in rest
    _assert_cancelled(web_storage, JobStore(web_storage, prefix=web_settings.name_prefix), "".join(said) + rest)


def test_a_missing_output_folder_is_refused_before_the_job_runs(photo: Path, tmp_path: Path) -> None:
    # No app at the default URL is needed: the folder is checked before any request.
    result = run(str(photo), "--library", LIBRARY, "-o", str(tmp_path / "nowhere" / "out.jpg"))
    assert result.exit_code == 2 and "folder" in result.output and "does not exist" in result.output


def test_an_output_that_is_the_photo_itself_is_refused_before_the_job(photo: Path) -> None:
    kept = photo.read_bytes()
    result = run(str(photo), "--library", LIBRARY, "-o", str(photo))  # no app needed: refused before any request
    assert result.exit_code == 2 and "is the photo itself: choose another file" in result.output
    assert photo.read_bytes() == kept


def test_a_mosaic_too_large_for_a_jpeg_is_saved_as_its_zip(live_app: dict[str, Any], tmp_path: Path) -> None:
    tall = tmp_path / "tall.png"  # 1 px tiles, one across: a 1 x 66,000 px mosaic, over JPEG's 65,500
    Image.new("RGB", (1, 66_000), (200, 80, 40)).save(tall)
    out = tmp_path / "tall.jpg"
    result = run(
        str(tall),
        "--library",
        "demo",
        "--tile-size",
        "1",
        "--tiles-across",
        "1",
        "--slices",
        "1",
        "-o",
        str(out),
        "--url",
        live_app["url"],
    )
    assert result.exit_code == 0, result.output
    saved = tmp_path / "tall.zip"
    assert not out.exists() and zipfile.is_zipfile(saved)
    assert "mosaic.dzi" in zipfile.ZipFile(saved).namelist()
    assert "too large for a JPEG" in result.output


@pytest.mark.parametrize("streams_per_client", [3, 0], ids=["streams-end-and-reconnect", "streams-refused"])
def test_submit_follows_the_job_across_ended_and_refused_streams(
    web_settings: Settings,
    azurite_connection_string: str,
    tile_library: str,
    photo: Path,
    web_storage: StorageClients,
    streams_per_client: int,
) -> None:
    """Streams that end after SSE_MAX_SECONDS (event: reconnect) are opened again; refused ones
    (429) are replaced by polling; either way submit sees the job finish (here: fail)."""
    from flask import Response, request

    from tests.web.conftest import served
    from webapp import create_app

    settings = replace(web_settings, event_streams_per_client=streams_per_client)
    app = create_app(
        {
            "SECRET_KEY": SECRET,
            "SETTINGS": settings,
            "CONNECTION_STRING": azurite_connection_string,
            "SSE_POLL_SECONDS": 0.05,
            "SSE_MAX_SECONDS": 0.3,
        }
    )
    answers: list[int] = []

    @app.after_request
    def count_streams(response: Response) -> Response:
        if request.path.endswith("/events"):
            answers.append(response.status_code)
        return response

    jobs = JobStore(web_storage, prefix=web_settings.name_prefix)
    stop = threading.Event()

    def fail_jobs_once_followed() -> None:  # stands in for a controller, once submit has followed a while
        table = web_storage.table_service.get_table_client(jobs.jobs_table)
        while not stop.is_set():
            if len(answers) >= 3:
                for entity in table.query_entities("status eq 'queued'"):
                    jobs.update(
                        entity["PartitionKey"],
                        entity["RowKey"],
                        lambda j: replace(j, status="failed", error="followed to the end"),
                    )
            time.sleep(0.1)

    failer = threading.Thread(target=fail_jobs_once_followed, daemon=True)
    with served(app) as url:
        failer.start()
        try:
            result = run(str(photo), "--library", LIBRARY, "--slices", "1", "--url", url, "--timeout", "120")
        finally:
            stop.set()
            failer.join(timeout=10)
    assert result.exit_code == 1 and "failed: followed to the end" in result.output, result.output
    assert len(answers) >= 3
    assert set(answers) == ({200} if streams_per_client else {429})


def test_a_library_that_lacks_the_photos_colours_is_said_before_the_job(idle_app: str, tmp_path: Path) -> None:
    # The API tests' library is 18 flat colours: a red photo cannot be covered by its one red
    # tile (no tile repeats next to itself), so the mosaic would come out in other colours.
    red = tmp_path / "red.png"
    red.write_bytes(png_bytes(90, 60, colour=(240, 0, 0)))
    result = run(str(red), "--library", LIBRARY, "--tile-size", "8", "--timeout", "1", "--url", idle_app)
    assert "note: This library lacks some of the photo's colours" in result.output, result.output
    assert result.output.index("note:") < result.output.index("job ")  # said before the job, not after


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_client_id_the_app_no_longer_signs_is_replaced_not_sent_beside_the_new_one(
    idle_app: str, photo: Path, client_file: Path, host: str
) -> None:
    """The app's secret changed (its data folder made anew) and this machine's client file still
    holds the cookie it signed before: the app gives a new one, and from then on the commands are
    that one client. Both used to be sent, the stale one first, so each request was a stranger
    and ``submit`` answered "no such job" for the job it had just made."""
    import json

    import requests

    from photomosaics.client_file import load_client
    from webapp.csrf import CSRF_HEADER, CSRF_VALUE

    base = idle_app.replace("127.0.0.1", host)
    client_file.write_text(json.dumps({base: {"pm_client": "eyJjaWQiOiJvbGQifQ.signed.by-another-secret"}}))
    session = requests.Session()
    session.headers[CSRF_HEADER] = CSRF_VALUE
    load_client(session, base)
    made = session.post(
        f"{base}/api/jobs",
        data={"library": LIBRARY, "tile_size": "8", "tiles_across": "12", "slices": "1"},
        files={"image": ("photo.png", photo.read_bytes(), "image/png")},
    )
    assert made.status_code == 202, made.text
    followed = session.get(f"{base}/api/jobs/{made.json()['request_id']}")
    assert followed.status_code == 200, (followed.text, followed.request.headers.get("Cookie"))
    assert followed.request.headers["Cookie"].count("pm_client=") == 1
