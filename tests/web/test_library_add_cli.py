"""``photomosaics library add`` against a live web app: photos go straight to the staging blobs
with the granted SAS URLs, the indexer (run here on the received IndexRequests) makes tiles, a
second run uploads nothing, and the failures are clear."""

from __future__ import annotations

import io
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from azure.core.exceptions import ResourceNotFoundError
from click.testing import CliRunner
from PIL import Image

from dal.blobs.staging import STAGING_PREFIX, safe_photo_name
from dal.config import Settings, StorageClients
from photomosaics.cli import main
from tests.web.conftest import SECRET, served
from workers.indexer.indexer import Indexer
from workers.services import RoleServices

pytestmark = pytest.mark.slow


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(6, 8, 3)).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(small).resize((160, 120), Image.Resampling.BICUBIC).save(out, "JPEG", quality=90)
    return out.getvalue()


def run(*args: str) -> Any:
    return CliRunner().invoke(main, ["library", "add", *args], catch_exceptions=False)


@pytest.fixture
def app_url(web_settings: Settings, azurite_connection_string: str, tile_library: str) -> Iterator[str]:
    from webapp import create_app

    app = create_app({"SECRET_KEY": SECRET, "SETTINGS": web_settings, "CONNECTION_STRING": azurite_connection_string})
    with served(app) as url:
        yield url


@pytest.fixture
def indexer(web_settings: Settings, web_storage: StorageClients) -> Iterator[RoleServices]:
    """An indexer on a thread: handles the IndexRequests on the queue until the test ends."""
    services = RoleServices(web_storage, web_settings, "indexer@test")
    worker = Indexer(services)
    queue = services.queues.index_request
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                batch = queue.accept_messages(32, visibility_timeout=60)
            except ResourceNotFoundError:  # the app creates the queue with its first message
                batch = []
            for received in batch:
                worker.handle_index_request(received)
                queue.delete(received)
            if not batch:
                stop.wait(0.2)

    thread = threading.Thread(target=loop, name="indexer", daemon=True)
    thread.start()
    yield services
    stop.set()
    thread.join(timeout=30)


@pytest.fixture
def folder(tmp_path: Path) -> dict[str, bytes]:
    """Three small JPEGs (one in a sub-folder, one with an upper-case suffix), a text file and a hidden photo."""
    root = tmp_path / "photos"
    (root / "day 2").mkdir(parents=True)
    photos = {"a.jpg": _jpeg(1), "b.JPEG": _jpeg(2), "day 2/c.jpg": _jpeg(3)}
    for rel, data in photos.items():
        (root / rel).write_bytes(data)
    (root / "notes.txt").write_text("not a photo\n")
    (root / ".hidden.jpg").write_bytes(_jpeg(4))
    return photos


def test_add_uploads_straight_to_staging_indexes_and_a_second_run_uploads_nothing(
    app_url: str, indexer: RoleServices, folder: dict[str, bytes], tmp_path: Path, client_file: Path
) -> None:
    name = f"add-{uuid.uuid4().hex[:10]}"
    result = run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "60")
    assert result.exit_code == 0, result.output
    assert "3 photos in" in result.output and "3 uploaded, 0 already there, 0 refused, 0 failed" in result.output
    assert "2 files left out: hidden file, not a photo (.txt)." in result.output  # as the page says it
    assert "3 indexed, 0 skipped" in result.output

    container = indexer.libraries.container_client(name)
    staged = {b.name: b.size for b in container.list_blobs(name_starts_with=STAGING_PREFIX)}
    assert set(staged) == {STAGING_PREFIX + safe_photo_name(rel) for rel in folder}  # no notes.txt, no hidden file
    for rel, data in folder.items():
        assert container.get_blob_client(STAGING_PREFIX + safe_photo_name(rel)).download_blob().readall() == data
    assert len(indexer.libraries.load(name)) == 3
    assert client_file.stat().st_mode & 0o077 == 0  # the client id is this user's only

    again = run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "30")
    assert again.exit_code == 0, again.output
    assert "0 uploaded, 3 already there" in again.output and "3 indexed" in again.output

    # Another machine (another client id) does not see this client's library.
    client_file.unlink()
    other = run(name, str(tmp_path / "photos"), "--url", app_url)
    assert other.exit_code == 1 and f"no tile library called '{name}' (HTTP 404 library_not_found)" in other.output


def test_the_photos_the_indexer_refuses_are_named_beside_why(
    app_url: str, indexer: RoleServices, tmp_path: Path, client_file: Path
) -> None:
    """A person with 5 refused photos among 1,000 needs to know which files to look at."""
    root = tmp_path / "mixed"
    root.mkdir()
    (root / "good.jpg").write_bytes(_jpeg(1))
    for name in ("cut-1.jpg", "cut-2.jpg", "cut-3.jpg", "cut-4.jpg"):
        (root / name).write_bytes(_jpeg(2)[:400])  # truncated: each the same reason
    (root / "notes.jpg").write_bytes(b"a text file named like a photo\n")
    result = run(f"add-{uuid.uuid4().hex[:10]}", str(root), "--url", app_url, "--timeout", "60")
    assert result.exit_code == 0, result.output
    assert "1 indexed, 5 skipped" in result.output
    lines = [line.strip() for line in result.output.splitlines() if line.strip().startswith("skipped ")]
    assert "skipped 1 (notes.jpg): not an image in an accepted format" in "\n".join(lines), result.output
    truncated = next(line for line in lines if line.startswith("skipped 4 ("))
    assert truncated.startswith("skipped 4 (cut-1.jpg, cut-2.jpg, cut-3.jpg, ...): "), truncated


def test_a_photo_storage_loses_after_acknowledging_it_is_sent_again(
    web_settings: Settings,
    azurite_connection_string: str,
    tile_library: str,
    indexer: RoleServices,
    folder: dict[str, bytes],
    tmp_path: Path,
    client_file: Path,
) -> None:
    """The embedded Azurite answers a write before it saves its index: killed then, it forgets the
    last photos it acknowledged (seen under ``make run``: 300 uploaded, 285 in storage, exit 0).
    That moment cannot be hit on demand, so its result is made here: a staged photo deleted once
    the command has asked for indexing. The command finds it missing, sends it again, and every
    photo ends indexed."""
    from webapp import create_app

    name = f"lost-{uuid.uuid4().hex[:10]}"
    lost = STAGING_PREFIX + safe_photo_name("day 2/c.jpg")
    app = create_app({"SECRET_KEY": SECRET, "SETTINGS": web_settings, "CONNECTION_STRING": azurite_connection_string})
    deleted: list[str] = []

    @app.after_request
    def lose_one(response: Any) -> Any:
        from flask import request

        if request.path.endswith("/index") and not deleted:
            indexer.libraries.container_client(name).get_blob_client(lost).delete_blob()
            deleted.append(lost)
        return response

    with served(app) as url:
        result = run(name, str(tmp_path / "photos"), "--url", url, "--timeout", "60")
    assert deleted == [lost]
    assert result.exit_code == 0, result.output
    assert "1 photo is not in storage after the upload: sending again" in result.output
    assert "3 indexed, 0 skipped" in result.output
    blob = indexer.libraries.container_client(name).get_blob_client(lost)
    assert blob.download_blob().readall() == folder["day 2/c.jpg"]
    assert len(indexer.libraries.load(name)) == 3


def test_a_short_timeout_says_the_indexing_goes_on(
    app_url: str, folder: dict[str, bytes], tmp_path: Path, client_file: Path
) -> None:
    name = f"add-{uuid.uuid4().hex[:10]}"  # no indexer runs here: the photos stay uploaded
    result = run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "0.5")
    assert result.exit_code == 1
    assert "3 uploaded" in result.output and "3 of 3 photos not indexed yet" in result.output


def test_a_shared_library_is_not_yours(
    app_url: str, tile_library: str, folder: dict[str, bytes], tmp_path: Path, client_file: Path
) -> None:
    result = run(tile_library, str(tmp_path / "photos"), "--url", app_url)
    assert result.exit_code == 1 and "HTTP 403 not_owner" in result.output


def test_unreachable_app_exits_1(folder: dict[str, bytes], tmp_path: Path, client_file: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run("mine", str(tmp_path / "photos"), "--url", f"http://127.0.0.1:{port}")
    assert result.exit_code == 1 and "cannot reach the web app" in result.output


def test_once_the_app_has_answered_its_restart_is_waited_for(
    web_settings: Settings, azurite_connection_string: str, tile_library: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client of ``library add`` and ``submit``: a deploy, or a web process killed and brought
    back by ``photomosaics run``, refuses connections for a moment; the next call waits for the
    app on the same port (saying so) instead of ending the command. Never answered: see above."""
    from werkzeug.serving import make_server

    from photomosaics.web_api import WebApi
    from webapp import create_app

    def start(port: int) -> tuple[Any, threading.Thread, list[str]]:
        app = create_app(
            {"SECRET_KEY": SECRET, "SETTINGS": web_settings, "CONNECTION_STRING": azurite_connection_string}
        )
        served: list[str] = []

        @app.after_request
        def close(response: Any) -> Any:  # no kept-alive connection outlives its server
            served.append(response.status)
            response.headers["Connection"] = "close"
            return response

        server = make_server("127.0.0.1", port, app, threaded=True)
        thread = threading.Thread(target=server.serve_forever, name="web", daemon=True)
        thread.start()
        return server, thread, served

    first, first_thread, _ = start(0)
    port = first.server_port
    api = WebApi(f"http://127.0.0.1:{port}", timeout=30)
    assert api.call("GET", "/api/libraries").status_code == 200
    first.shutdown()
    first.server_close()  # nothing listens: connections are refused
    first_thread.join(timeout=10)
    later: list[Any] = []
    back = threading.Timer(1.5, lambda: later.append(start(port)))  # the supervisor's restart
    back.start()
    try:
        assert api.call("GET", "/api/libraries").status_code == 200
        back.join()
        served = later[0][2]
        assert served == ["200 OK"]  # answered by the app that came back
        assert "the web app is not answering (restarting?): trying again in" in capsys.readouterr().err
    finally:
        back.join()
        for server, thread, _ in later:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def test_no_photos_or_no_folder_is_a_usage_error(tmp_path: Path, client_file: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("mine", str(empty))
    assert result.exit_code == 2 and "no photos in" in result.output
    (empty / "notes.txt").write_text("text")
    (empty / ".secret.jpg").write_bytes(b"x")
    assert run("mine", str(empty)).exit_code == 2
    assert run("mine", str(tmp_path / "missing")).exit_code == 2
    assert run("mine", str(tmp_path / "photos"), "--url", "ftp://host").exit_code == 2


def test_remove_takes_photos_out_by_the_names_add_used(
    app_url: str, indexer: RoleServices, folder: dict[str, bytes], tmp_path: Path, client_file: Path
) -> None:
    name = f"rm-{uuid.uuid4().hex[:10]}"
    assert run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "60").exit_code == 0
    before = indexer.libraries.load(name).version
    result = CliRunner().invoke(main, ["library", "remove", name, "day 2/c.jpg", "a.jpg", "--url", app_url])
    assert result.exit_code == 0 and f"library {name}: 2 removed, now version" in result.output, result.output
    after = indexer.libraries.load(name)
    assert after.names == (safe_photo_name("b.JPEG"),) and after.version != before
    missing = CliRunner().invoke(main, ["library", "remove", name, "a.jpg", "nope.jpg", "--url", app_url])
    assert missing.exit_code == 1 and "no photo called nope.jpg" in missing.output and "1 removed" in missing.output


def test_rename_gives_the_library_a_new_name_and_says_when_it_is_taken(
    app_url: str, indexer: RoleServices, folder: dict[str, bytes], tmp_path: Path, client_file: Path, tile_library: str
) -> None:
    name, new = f"rn-{uuid.uuid4().hex[:10]}", f"rn-{uuid.uuid4().hex[:10]}"
    assert run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "60").exit_code == 0
    result = CliRunner().invoke(main, ["library", "rename", name, new, "--url", app_url])
    assert result.exit_code == 0 and f"library {name} is now called {new}" in result.output, result.output
    assert indexer.libraries.info(new) is not None and indexer.libraries.info(new).key == name  # type: ignore[union-attr]
    taken = CliRunner().invoke(main, ["library", "rename", new, tile_library, "--url", app_url])
    assert taken.exit_code == 1 and "HTTP 409 library_exists" in taken.output, taken.output


def test_a_photo_staged_earlier_and_never_asked_for_is_indexed_once_nothing_moves(
    app_url: str,
    indexer: RoleServices,
    folder: dict[str, bytes],
    tmp_path: Path,
    client_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command asks for its own photos as they land; one uploaded before and never asked for
    (an upload stopped before its index request, its file since gone) would keep it waiting, so
    once nothing moves it asks for every photo not indexed yet."""
    monkeypatch.setattr("photomosaics.library_upload.STILL_SECONDS", 0.5)
    name = f"add-{uuid.uuid4().hex[:10]}"
    assert run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "60").exit_code == 0
    container = indexer.libraries.container_client(name)
    container.upload_blob(STAGING_PREFIX + "left-behind.jpg", _jpeg(7))  # staged, never asked for
    (tmp_path / "photos" / "d.jpg").write_bytes(_jpeg(8))
    result = run(name, str(tmp_path / "photos"), "--url", app_url, "--timeout", "60")
    assert result.exit_code == 0, result.output
    assert "1 uploaded, 3 already there" in result.output and "5 indexed, 0 skipped" in result.output
    assert "left-behind.jpg" in indexer.libraries.load(name).names


def test_the_page_and_the_command_take_the_same_photo_types() -> None:
    """``upload_files.js`` and ``library add`` choose a folder's photos by the same extensions, so
    the page and the command line upload the same files (and leave out the same ones)."""
    import re

    from photomosaics.library_upload import PHOTO_SUFFIXES

    script = (Path(__file__).resolve().parents[2] / "webapp" / "static" / "upload_files.js").read_text()
    declared = re.search(r"const PHOTO_TYPES = new Set\(\[([^\]]*)\]\)", script)
    assert declared, "upload_files.js no longer declares PHOTO_TYPES"
    page = {f".{name}" for name in re.findall(r'"([a-z0-9]+)"', declared.group(1))}
    assert page == set(PHOTO_SUFFIXES)


def test_a_pipe_or_a_dangling_link_named_like_a_photo_is_left_out_unread(tmp_path: Path) -> None:
    """A pipe would block the upload that reads it: it is left out by what it is, not by its size."""
    import os

    from photomosaics.library_upload import folder_photos

    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "a.jpg")
    os.mkfifo(tmp_path / "pipe.jpg")
    (tmp_path / "dangling.jpg").symlink_to(tmp_path / "gone.jpg")
    (tmp_path / "empty.jpg").touch()
    found = folder_photos(tmp_path)
    assert [name for _, name, _ in found.photos] == ["a.jpg"]
    assert dict(found.left_out) == {
        "dangling.jpg": "cannot read (No such file or directory)",
        "empty.jpg": "empty file",
        "pipe.jpg": "not a regular file",
    }
