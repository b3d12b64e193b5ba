"""What one request may cost and what it may see: the decoding budget (503 + Retry-After),
library limits across every file and zip of a request, one decoder allowlist, integers of
bounded length, previews made once and in fixed sizes, operations data for operators only,
and nothing of the storage account's internals in an answer."""

from __future__ import annotations

import gc
import io
import threading
import uuid
import warnings
import zipfile
from typing import Any

import numpy as np
import pytest
from flask import Flask
from PIL import Image

from tests.web.conftest import LIBRARY, SECRET, ApiClient, png_bytes, served, submit
from webapp import api_libraries
from webapp.decode_budget import DECODES, DecodeBudget, decode_cost
from webapp.errors import ApiError
from webapp.previews import PREVIEW_SIDES, PreviewCache, snap_side

HUGE = "9" * 5000


def _eps() -> bytes:
    return b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n%%EOF\n"


def _sgi() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(out, "SGI")
    return out.getvalue()


def test_the_decoding_budget_answers_503_with_retry_after_when_full(app: Flask, client: Any) -> None:
    app.config["DECODE_WAIT_SECONDS"] = 0.0
    DECODES.configure(1, wait_seconds=0.0)  # 1 MP in this process, all held below
    try:
        with DECODES.reserve(1_000_000):
            refused = submit(client, image=png_bytes(64, 48))
            assert refused.status_code == 503, refused.get_json()
            assert refused.get_json()["error"] == "busy_decoding" and int(refused.headers["Retry-After"]) >= 1
            library = client.post(
                "/api/libraries", data={"name": "budgeted", "files": [(io.BytesIO(png_bytes()), "a.png")]}
            )
            assert library.status_code == 503 and library.headers["Retry-After"]
        assert client.get("/api/jobs").get_json()["jobs"] == []  # nothing was stored
        assert submit(client, image=png_bytes(64, 48)).status_code == 202  # room again
        assert DECODES.in_use == 0
    finally:
        DECODES.configure(app.config["SETTINGS"].web_decode_megapixels)


def test_a_progressive_jpeg_reserves_its_coefficients_too(app: Flask, client: Any) -> None:
    """The same 2,000 x 1,500 picture as a baseline JPEG fits beside 3 MP already held in an
    8 MP budget; as a progressive one with full-resolution colour (17.2 MiB of coefficients,
    4.5 M more units) it does not, and waits for room: here a 503."""
    rng = np.random.default_rng(3)
    picture = Image.fromarray(rng.integers(0, 255, (15, 20, 3), dtype=np.uint8)).resize((2000, 1500))

    def jpeg(progressive: bool) -> bytes:
        out = io.BytesIO()
        picture.save(out, "JPEG", quality=85, progressive=progressive, subsampling=0)
        return out.getvalue()

    assert decode_cost(jpeg(False), 3_000_000) == 3_000_000
    assert decode_cost(jpeg(True), 3_000_000) == 3_000_000 + 250 * 188 * 3 * 128 // 4  # blocks x components x 128 B
    app.config["DECODE_WAIT_SECONDS"] = 0.0
    DECODES.configure(8, wait_seconds=0.0)
    try:
        with DECODES.reserve(3_000_000):
            assert submit(client, image=jpeg(False), filename="baseline.jpg").status_code == 202
            refused = submit(client, image=jpeg(True), filename="progressive.jpg")
            assert refused.status_code == 503 and refused.get_json()["error"] == "busy_decoding"
        assert submit(client, image=jpeg(True), filename="progressive.jpg").status_code == 202  # room again
    finally:
        DECODES.configure(app.config["SETTINGS"].web_decode_megapixels)


def test_a_decode_waits_for_room_and_a_larger_one_than_the_budget_runs_alone() -> None:
    budget = DecodeBudget(2, wait_seconds=30.0)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with budget.reserve(1_500_000):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(30)
    release.set()  # the waiter below gets in once the holder leaves, within its 30 s
    with budget.reserve(50_000_000):  # larger than the whole budget: clamped, alone
        assert budget.in_use == 2_000_000
    thread.join(30)
    assert budget.in_use == 0
    with pytest.raises(ApiError):
        refusing = DecodeBudget(1, wait_seconds=0.0)
        with refusing.reserve(1_000_000), refusing.reserve(1):
            pass


def test_library_limits_hold_across_every_file_and_zip_of_a_request(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def zip_of(count: int, size: int = 64) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            for i in range(count):
                archive.writestr(f"p{i}.png", png_bytes(size, size, colour=(i * 40 % 256, 90, 30)))
        return out.getvalue()

    # Bytes unpacked: each zip alone is under the limit, the two together are not.
    one = zip_of(3)
    unpacked = sum(i.file_size for i in zipfile.ZipFile(io.BytesIO(one)).infolist())
    monkeypatch.setattr(
        api_libraries,
        "LIBRARY_LIMITS",
        api_libraries.SourceLimits(max_files=100, max_unpacked_bytes=unpacked + 10, max_pixels=10**9),
    )
    files = [(io.BytesIO(one), "a.zip"), (io.BytesIO(one), "b.zip")]
    response = client.post("/api/libraries", data={"name": "twozips", "files": files})
    assert response.status_code == 413 and "unpack" in response.get_json()["detail"], response.get_json()
    # Files: members of zips and plain photos count together.
    monkeypatch.setattr(api_libraries, "LIBRARY_LIMITS", api_libraries.SourceLimits(max_files=4))
    files = [(io.BytesIO(zip_of(3)), "a.zip"), (io.BytesIO(png_bytes()), "x.png"), (io.BytesIO(png_bytes()), "y.png")]
    response = client.post("/api/libraries", data={"name": "fivefiles", "files": files})
    assert response.status_code == 413 and "4 files" in response.get_json()["detail"], response.get_json()
    # Pixels, from the headers: three 64 x 64 photos are 12,288 pixels.
    monkeypatch.setattr(api_libraries, "LIBRARY_LIMITS", api_libraries.SourceLimits(max_pixels=10_000))
    response = client.post("/api/libraries", data={"name": "manypixels", "files": [(io.BytesIO(zip_of(3)), "a.zip")]})
    assert response.status_code == 413 and "pixels" in response.get_json()["detail"], response.get_json()
    for name in ("twozips", "fivefiles", "manypixels"):
        assert client.get(f"/api/libraries/{name}").status_code == 404


def test_eps_and_sgi_files_are_refused_for_libraries_and_photos(client: Any) -> None:
    files = [(io.BytesIO(_eps()), "drawing.eps"), (io.BytesIO(_sgi()), "render.sgi")]
    response = client.post("/api/libraries", data={"name": "notphotos", "files": files})
    assert response.status_code == 422 and response.get_json()["error"] == "no_usable_images", response.get_json()
    assert "accepted format" in response.get_json()["detail"]
    mixed = [(io.BytesIO(_sgi()), "render.sgi"), (io.BytesIO(png_bytes()), "photo.png")]
    created = client.post("/api/libraries", data={"name": "onephoto", "files": mixed})
    assert created.status_code == 201 and created.get_json()["tile_count"] == 1
    assert [s["file"] for s in created.get_json()["skipped"]] == ["render.sgi"]
    for data in (_eps(), _sgi()):
        refused = submit(client, image=data)
        assert refused.status_code == 415, refused.get_json()


@pytest.mark.parametrize(
    "call",
    [
        lambda c: submit(c, tile_size=HUGE),
        lambda c: submit(c, slices=HUGE),
        lambda c: submit(c, tiles_across=HUGE),
        lambda c: submit(c, max_uses="-" + HUGE),
        lambda c: c.get(f"/api/plan?width={HUGE}&height=10&tile_size=8"),
        lambda c: c.get(f"/api/print-plan/for-grid?tile_size=16&dpi=300&tiles_across={HUGE}"),
        lambda c: c.get(f"/api/print-plan/for-paper?tile_size={HUGE}&dpi=300&width_cm=10"),
        lambda c: c.get(f"/api/print-plan/for-paper?tile_size=16&dpi=300&width_cm={HUGE}x"),  # not 3 s of backtracking
        lambda c: c.get(f"/api/libraries/{LIBRARY}?samples={HUGE}"),
        lambda c: c.get(f"/api/jobs?limit={HUGE}"),
    ],
)
def test_a_5000_digit_integer_is_400(client: Any, call: Any) -> None:
    response = call(client)
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"] == "invalid_field" and len(response.get_json()["detail"]) < 200


def test_a_5000_digit_preview_size_is_400_and_sizes_snap(client: Any) -> None:
    request_id = submit(client).get_json()["request_id"]
    assert client.get(f"/api/jobs/{request_id}/preview?size={HUGE}").status_code == 400
    assert client.get(f"/api/jobs/{request_id}/preview?size=5000").status_code == 400
    assert [snap_side(s) for s in (64, 240, 241, 480, 500, 1000, 1600)] == [240, 240, 480, 480, 960, 1600, 1600]
    from webapp.previews import PREVIEWS

    made = PREVIEWS.made
    first = client.get(f"/api/jobs/{request_id}/preview?size=300")
    for size in (301, 400, 479, 480):  # every one of these is the 480 preview: made once
        again = client.get(f"/api/jobs/{request_id}/preview?size={size}")
        assert again.status_code == 200 and again.data == first.data
    assert PREVIEWS.made == made + 1
    assert set(PREVIEW_SIDES) >= {480, 1600}  # the page's card and stage


def test_identical_previews_asked_at_once_are_made_once() -> None:
    cache = PreviewCache()
    callers = 8
    arrived = threading.Semaphore(0)
    release = threading.Event()
    results: list[bytes] = []

    def make() -> bytes:
        release.wait(30)
        return b"jpeg"

    def ask() -> None:
        arrived.release()
        results.append(cache.get(("job", "source", "480"), make))

    threads = [threading.Thread(target=ask) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for _ in range(callers):
        arrived.acquire(timeout=30)
    release.set()
    for thread in threads:
        thread.join(30)
    assert results == [b"jpeg"] * callers
    assert cache.made == 1


def test_a_failed_preview_fails_its_waiters_and_is_tried_again_later() -> None:
    cache = PreviewCache()

    def broken() -> bytes:
        raise ApiError(404, "not_found", "not there")

    with pytest.raises(ApiError):
        cache.get(("k",), broken)
    assert cache.get(("k",), lambda: b"ok") == b"ok" and cache.made == 2


def test_operations_data_needs_the_metrics_port_or_the_token(web_settings: Any, tile_library: str) -> None:
    from webapp import create_app

    app = create_app(
        {"SECRET_KEY": SECRET, "SETTINGS": web_settings, "CONNECTION_STRING": web_settings.connection_string}
    )
    app.test_client_class = ApiClient
    import urllib.error
    import urllib.request

    with served(app) as url:
        for path in ("/metrics", "/api/queues"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=10)
            refused.value.close()
            assert refused.value.code == 403  # no token configured: only the metrics port
        app.config["METRICS_PORT"] = url.rsplit(":", 1)[1].strip("/")  # this server's port is now the metrics port
        for path in ("/metrics", "/api/queues"):
            with urllib.request.urlopen(url + path, timeout=10) as answer:
                assert answer.status == 200
        # A Host header naming the metrics port does not make another port one.
        app.config["METRICS_PORT"] = "1"
        request = urllib.request.Request(url + "/metrics", headers={"Host": "127.0.0.1:1"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        refused.value.close()
        assert refused.value.code == 403


def test_healthz_says_storage_is_unavailable_and_nothing_else(web_settings: Any) -> None:
    """Not even the account's name: with the endpoint it is half of what an attacker needs."""
    from dataclasses import replace

    from dal.connection_strings import azurite_connection_string
    from webapp import create_app

    dead = azurite_connection_string("127.0.0.1", 9, 9, 9)
    app = create_app({"TESTING": True, "SECRET_KEY": SECRET, "SETTINGS": replace(web_settings, connection_string=dead)})
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.get_json() == {"error": "storage_unavailable", "detail": "storage unavailable"}
    assert b"devstoreaccount1" not in response.data


def test_settings_and_storage_clients_never_show_the_key_in_repr() -> None:
    from dal.config import Settings, StorageClients
    from dal.connection_strings import DEVSTORE_KEY, azurite_connection_string

    connection = azurite_connection_string("127.0.0.1", 10000, 10001, 10002)
    assert DEVSTORE_KEY in connection
    for obj in (Settings(connection_string=connection), StorageClients(connection)):
        assert DEVSTORE_KEY not in repr(obj) and "AccountKey" not in repr(obj)


def test_a_stored_error_reaches_a_client_as_one_bounded_line() -> None:
    from webapp.serialize import public_text
    from workers.failures import client_reason

    assert client_reason("failed 5 times; last error: OSError: [Errno 28] /var/lib/x: no space") == "failed 5 times"
    trace = "Traceback (most recent call last):\n  File \"/app/workers/x.py\", line 3\nKeyError: 'k'"
    assert "File" not in public_text(trace) and "/app" not in public_text(trace)
    assert public_text("first line\nsecond line") == "first line"
    assert len(public_text("x" * 5000) or "") == 300


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("library", [LIBRARY, LIBRARY]),
        ("tile_size", ["8", "16"]),
        ("slices", ["1", "2"]),
        ("tiles_across", ["10", "20"]),
        ("max_uses", ["5", "6"]),
        ("correction", ["10", "90"]),
        ("use_every_photo", ["true", "false"]),
        ("image", "two files"),
    ],
)
def test_a_field_sent_twice_is_refused_not_the_first_taken(client: Any, field: str, values: Any) -> None:
    """The fuzzer's ``correction`` as an array was accepted (the first part won): every field is
    sent once, except a library's ``files``."""
    form: dict[str, Any] = {"library": LIBRARY, "tile_size": "8", "slices": "1"}
    if values == "two files":
        form["image"] = [(io.BytesIO(png_bytes()), "a.png"), (io.BytesIO(png_bytes()), "b.png")]
    else:
        form[field] = values
        form["image"] = (io.BytesIO(png_bytes()), "a.png")
    answer = client.post("/api/jobs", data=form, content_type="multipart/form-data")
    assert answer.status_code == 400, answer.get_json()
    assert answer.get_json()["error"] == "repeated_field" and field in answer.get_json()["detail"]
    assert client.get("/api/jobs").get_json()["jobs"] == []


def test_a_library_name_sent_twice_is_refused_and_files_may_repeat(client: Any) -> None:
    twice = client.post(
        "/api/libraries", data={"name": ["aa-one", "aa-two"], "files": [(io.BytesIO(png_bytes()), "a.png")]}
    )
    assert twice.status_code == 400 and twice.get_json()["error"] == "repeated_field"
    name = f"rep-{uuid.uuid4().hex[:8]}"
    files = [(io.BytesIO(png_bytes(64, 64, colour=(i * 40, 0, 0))), f"{i}.png") for i in range(3)]
    assert client.post("/api/libraries", data={"name": name, "files": files}).status_code == 201


def test_a_field_no_endpoint_reads_may_repeat_like_any_other_unknown_field(client: Any) -> None:
    """The spec allows fields it does not name, and the app ignores them: sent twice they are still
    ignored (the fuzzer's schema-valid job with an unknown field three times was a 400)."""
    form: dict[str, Any] = {"library": LIBRARY, "tile_size": "8", "slices": "1", "note": ["a", "b", "c"]}
    form["image"] = (io.BytesIO(png_bytes()), "a.png")
    answer = client.post("/api/jobs", data=form, content_type="multipart/form-data")
    assert answer.status_code == 202, answer.get_json()


def test_every_form_field_the_code_reads_is_held_to_once() -> None:
    import re
    from pathlib import Path

    from webapp.validation import LIST_FIELDS, READ_FIELDS

    code = "\n".join(p.read_text() for p in (Path(__file__).resolve().parents[2] / "webapp").glob("*.py"))
    # request.form, or the form handed to a helper as ``form`` (webapp.job_cells)
    read = set(re.findall(r"(?:request\.)?\b(?:form|files)\.get(?:list)?\(\"(\w+)\"", code))
    read |= set(re.findall(r"(?:int_field|flag_field)\((?:request\.)?form, \"(\w+)\"", code))
    assert read - LIST_FIELDS == READ_FIELDS


def test_a_form_field_is_small_and_never_echoed_whole(client: Any) -> None:
    """A text field is held in memory: 256 KiB at most (413), and an error repeats its start only;
    a photo of megabytes is no text field (a limit of werkzeug's 64 KiB read chunk refused it)."""
    huge = client.post(
        "/api/libraries", data={"name": "a" * (1024 * 1024), "files": [(io.BytesIO(png_bytes()), "a.png")]}
    )
    assert huge.status_code == 413 and huge.get_json()["error"] == "too_large"
    long = client.post("/api/libraries", data={"name": "b" * 60_000, "files": [(io.BytesIO(png_bytes()), "a.png")]})
    assert long.status_code == 400 and len(long.get_json()["detail"]) < 300, long.get_json()["detail"][:300]
    job = submit(client, library="c" * 60_000)
    assert job.status_code == 400 and len(job.get_json()["detail"]) < 300
    number = submit(client, correction="9" * 60_000)
    assert number.status_code == 400 and len(number.get_json()["detail"]) < 300
    noise = np.random.default_rng(0).integers(0, 256, (700, 700, 3), dtype=np.uint8)
    photo = io.BytesIO()
    Image.fromarray(noise).save(photo, format="PNG")
    assert len(photo.getvalue()) > 1024 * 1024
    assert submit(client, image=photo.getvalue(), slices="1").status_code == 202


@pytest.mark.parametrize("token", ["short", "x" * 23])
def test_an_operator_token_short_enough_to_guess_stops_the_app(web_settings: Any, token: str) -> None:
    from webapp import create_app

    with pytest.raises(RuntimeError, match="at least 24"):
        create_app({"TESTING": True, "SECRET_KEY": SECRET, "SETTINGS": web_settings, "ADMIN_TOKEN": token})
    create_app({"TESTING": True, "SECRET_KEY": SECRET, "SETTINGS": web_settings, "ADMIN_TOKEN": "y" * 24})


def test_an_upload_cut_short_leaves_no_file_open(client: Any) -> None:
    """A client that goes away in the middle of a file (a page cancelling its preview request):
    werkzeug drops the half-written spooled file unclosed; the app's request closes it too."""
    photo = b"\xff\xd8" + bytes(700_000)  # past werkzeug's 500 KB: spooled to a file on disk
    head = (
        b'--cut\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\nContent-Type: image/jpeg\r\n\r\n'
    )
    body = head + photo  # no closing boundary: the connection ends here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        answer = client.post(
            "/api/jobs",
            data=body,
            content_type="multipart/form-data; boundary=cut",
            environ_overrides={"CONTENT_LENGTH": str(len(body) + 1_000_000)},
        )
        del answer
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", f"/api/libraries/{LIBRARY}/uploads"),
        ("PATCH", f"/api/libraries/{LIBRARY}"),
        ("POST", f"/api/libraries/{LIBRARY}/remove-photos"),
        ("POST", "/api/queues/slicerequest/poison/requeue"),
    ],
)
def test_a_json_body_nested_past_the_decoders_depth_is_400_not_500(
    client: Any, operator: dict[str, str], method: str, path: str
) -> None:
    """100,000 nested arrays are 200 KB, well inside the request limits: Python's decoder
    recurses once per level, and the body must be refused as malformed like any other."""
    deep = "[" * 100_000 + "]" * 100_000
    for body in (deep, '{"files": ' + deep + "}"):
        answer = client.open(path, method=method, data=body, content_type="application/json", headers=operator)
        assert answer.status_code == 400, (answer.status_code, answer.get_data(as_text=True)[:300])
