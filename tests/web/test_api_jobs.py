"""The jobs API against a real Azurite: submit, validation (nothing stored on rejection),
listing and paging, progress (JSON and SSE), slices, result, preview, delete, CSRF."""

from __future__ import annotations

import io
import json
import struct
import zlib
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from dal.blobs.rendered import encode_rendered
from dal.blobs.store import BlobStore
from dal.config import (
    IMAGE_INPUT_CONTAINER,
    IMAGE_OUTPUT_CONTAINER,
    SLICE_REQUEST_CONTAINER,
    SLICE_RESPONSE_CONTAINER,
    Settings,
    StorageClients,
)
from dal.jobs.store import JobStore
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import ImageRequestMessage
from mosaic.grid import plan_grid
from tests.web.conftest import LIBRARY, png_bytes, submit

# 12 x 100 px at 4 px tiles: 100 rows of tiles, two parts of the grid (mosaic.parts), two slices
TWO_PARTS = png_bytes(12, 100)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` × ``height`` but holds no pixel data (a bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture
def stores(web_storage: StorageClients, web_settings: Settings) -> dict[str, Any]:
    prefix = web_settings.name_prefix
    blobs = BlobStore(web_storage, prefix=prefix)
    blobs.ensure_containers()  # as a deployment has them: a test does not rely on an earlier one's job
    return {
        "prefix": prefix,
        "blobs": blobs,
        "jobs": JobStore(web_storage, prefix=prefix),
        "queues": QueueAccessor(web_storage, settings=web_settings, prefix=prefix),
    }


def queued_request_ids(stores: dict[str, Any]) -> set[str]:
    return {m.message.request_id for m in stores["queues"].image_request.peek(32)}


def client_id_of(client: Any, stores: dict[str, Any], request_id: str) -> str:
    """The client id the app gave this test client (its signed session cookie), checked against the job row."""
    with client.session_transaction() as session:
        owner = str(session["cid"])
    assert stores["jobs"].get(owner, request_id) is not None, f"no job {request_id} for client {owner}"
    return owner


def finish(stores: dict[str, Any], owner: str, request_id: str, *, slices: int = 2) -> bytes:
    """Do what the workers do, straight in storage: slice mosaics, the stitched result, status done."""
    mosaic = png_bytes(96, 64, fmt="JPEG")
    for n in range(slices):
        stores["blobs"].upload(
            SLICE_RESPONSE_CONTAINER, f"{request_id}/{n}.png", png_bytes(96, 32), content_type="image/png"
        )
    stores["blobs"].upload(IMAGE_OUTPUT_CONTAINER, f"{request_id}.jpg", mosaic, content_type="image/jpeg")
    stores["jobs"].update(
        owner,
        request_id,
        lambda j: replace(j, status="done", slices_done=frozenset(range(j.slices)), output_name=f"{request_id}.jpg"),
    )
    return mosaic


def test_more_slices_than_the_grid_has_parts_become_one_slice_per_part(client: Any) -> None:
    # Slices are whole parts of the grid (mosaic.parts): a small grid is one part, one slice.
    response = submit(client, slices="16", tiles_across="4")
    assert response.status_code == 202, response.json
    job = client.get(response.json["status_url"]).json
    assert job["slices"] == 1 and job["bands"] == [[0, job["tiles_down"]]]


def test_submit_stores_the_photo_the_job_and_one_message(client: Any, stores: dict[str, Any]) -> None:
    photo = png_bytes(64, 48)
    response = submit(client, image=photo, tile_size="8", slices="3", tiles_across="32")
    assert response.status_code == 202, response.json
    request_id = response.json["request_id"]
    assert response.json["status_url"] == f"/api/jobs/{request_id}"
    assert response.headers["Location"] == response.json["status_url"]

    assert stores["blobs"].download(IMAGE_INPUT_CONTAINER, f"{request_id}.png") == photo
    message = next(m.message for m in stores["queues"].image_request.peek(32) if m.message.request_id == request_id)
    assert isinstance(message, ImageRequestMessage)
    # 24 rows of tiles are one part of the grid (mosaic.parts): one slice, whatever was asked
    assert (message.tile_size, message.slices, message.tiles_across) == (8, 1, 32)
    assert message.image_library_uri.rstrip("/").endswith(f"/{stores['prefix']}{LIBRARY}")

    job = client.get(f"/api/jobs/{request_id}").json
    grid = plan_grid(64, 48, tile_size=8, tiles_across=32, max_output_pixels=4_000_000)
    assert job["status"] == "queued"
    assert (job["tiles_across"], job["tiles_down"]) == (grid.tiles_across, grid.tiles_down)
    assert (job["output_width"], job["output_height"]) == (grid.output_width, grid.output_height)
    assert job["slices"] == 1 and job["slices_done"] == [] and job["progress"] == 0
    assert [e["kind"] for e in job["events"]] == ["submitted"]
    assert job["result_url"] is None
    assert job["bands"] == [[0, grid.tiles_down]]


def test_the_event_log_shows_each_rendered_slice_kept_in_the_job_row(client: Any, stores: dict[str, Any]) -> None:
    """A slice's log line lives in the job row (Job.slice_events, written with its progress): the
    API's events list it among the event rows, in time order, with its timing."""
    from dal.jobs.model import JobEvent, utcnow

    request_id = submit(client, image=TWO_PARTS, tile_size="4", slices="2").json["request_id"]
    owner = client_id_of(client, stores, request_id)
    lines = tuple(
        JobEvent(
            request_id=request_id,
            kind="slice_done",
            actor="processor-x",
            at=utcnow(),
            slice=n,
            seconds=0.25,
            stages={"render": 0.2},
            message=f"slice {n + 1} rendered",
        )
        for n in (1, 0)
    )
    stores["jobs"].update(owner, request_id, lambda j: replace(j, slices_done=frozenset({0, 1}), slice_events=lines))
    stores["jobs"].add_event(request_id, "stitched", actor="controller-x", message="stitched")
    events = client.get(f"/api/jobs/{request_id}").json["events"]
    assert [(e["kind"], e["slice"]) for e in events] == [
        ("submitted", None),
        ("slice_done", 1),
        ("slice_done", 0),
        ("stitched", None),
    ]
    assert [e["seconds"] for e in events if e["kind"] == "slice_done"] == [0.25, 0.25]
    assert events[1]["actor"] == "processor-x" and events[1]["message"] == "slice 2 rendered"


def test_max_uses_travels_in_the_request_message(client: Any, stores: dict[str, Any]) -> None:
    response = submit(client, image=png_bytes(64, 48), tile_size="8", slices="2", tiles_across="8", max_uses="3")
    assert response.status_code == 202, response.json  # 8 x 6 = 48 cells <= 18 tiles x 3
    request_id = response.json["request_id"]
    message = next(m.message for m in stores["queues"].image_request.peek(32) if m.message.request_id == request_id)
    assert isinstance(message, ImageRequestMessage) and message.max_uses == 3
    assert "each tile at most 3 times" in client.get(f"/api/jobs/{request_id}").json["events"][0]["message"]


@pytest.mark.parametrize("correction", ["0", "35", "100"])
def test_the_colour_correction_travels_in_the_request_message(
    client: Any, stores: dict[str, Any], correction: str
) -> None:
    response = submit(client, image=png_bytes(64, 48), tile_size="8", slices="2", correction=correction)
    assert response.status_code == 202, response.json
    request_id = response.json["request_id"]
    message = next(m.message for m in stores["queues"].image_request.peek(32) if m.message.request_id == request_id)
    assert isinstance(message, ImageRequestMessage) and message.correction == int(correction)
    assert f"colour correction {correction} %" in client.get(f"/api/jobs/{request_id}").json["events"][0]["message"]


def test_cells_of_several_sizes_travel_in_the_request_message_and_slices_align_to_the_largest(
    client: Any, stores: dict[str, Any]
) -> None:
    """A job of cells of 1, 2 and 4 tiles: the message carries the sizes and the split, the job
    says its sizes, and every slice starts on a multiple of 4 rows (no large cell across two)."""
    response = submit(
        client, image=png_bytes(40, 400), tile_size="8", slices="3", tiles_across="10", cell_sizes="1,2,4", split="70"
    )
    assert response.status_code == 202, response.json
    request_id = response.json["request_id"]
    message = next(m.message for m in stores["queues"].image_request.peek(32) if m.message.request_id == request_id)
    assert isinstance(message, ImageRequestMessage) and (message.cell_sizes, message.split) == ((1, 2, 4), 70)
    job = client.get(f"/api/jobs/{request_id}").json
    assert job["cell_sizes"] == [1, 2, 4] and job["slices"] == 3 == len(job["bands"])
    assert [start % 4 for start, _ in job["bands"]] == [0, 0, 0] and job["bands"][-1][1] == job["tiles_down"]
    assert "cells of 1, 2 and 4 tiles (split 70)" in job["events"][0]["message"]
    second = submit(client, image=png_bytes(64, 48), tile_size="8", slices="1", cell_sizes="1")
    assert second.status_code == 202, second.json
    one = second.json["request_id"]
    assert client.get(f"/api/jobs/{one}").json["cell_sizes"] == [1]  # "1" is one size, as without the field


def test_without_a_correction_the_job_gets_the_engines_default_which_the_spec_documents(
    client: Any, stores: dict[str, Any]
) -> None:
    from mosaic.options import DEFAULT_OPTIONS

    request_id = submit(client, image=TWO_PARTS, tile_size="4", slices="2").json["request_id"]
    message = next(m.message for m in stores["queues"].image_request.peek(32) if m.message.request_id == request_id)
    assert message.correction is None  # the processors use the engine's default
    spec = client.get("/openapi.yaml")
    import yaml

    body = yaml.safe_load(spec.data)["paths"]["/api/jobs"]["post"]["requestBody"]["content"]["multipart/form-data"]
    field = body["schema"]["properties"]["correction"]
    assert (field["minimum"], field["maximum"], field["default"]) == (0, 100, DEFAULT_OPTIONS.correction)


def test_default_grid_follows_the_planner(client: Any) -> None:
    response = submit(client, image=png_bytes(60, 40, fmt="JPEG"), filename="p.jpg", tile_size="16", slices="1")
    assert response.status_code == 202
    job = client.get(response.json["status_url"]).json
    grid = plan_grid(60, 40, tile_size=16, tiles_across=None, max_output_pixels=4_000_000)
    assert (job["output_width"], job["output_height"]) == (grid.output_width, grid.output_height)


@pytest.mark.parametrize(
    ("fields", "status", "error"),
    [
        ({"image": False}, 400, "missing_field"),
        ({"library": None}, 400, "missing_field"),
        ({"tile_size": None}, 400, "missing_field"),
        ({"tile_size": "0"}, 400, "invalid_field"),
        ({"tile_size": "65"}, 400, "invalid_field"),
        ({"tile_size": "big"}, 400, "invalid_field"),
        ({"slices": "0"}, 400, "invalid_field"),
        ({"slices": "17"}, 400, "invalid_field"),
        ({"tiles_across": "0"}, 400, "invalid_field"),
        ({"max_uses": "0"}, 400, "invalid_field"),
        ({"correction": "-1"}, 400, "invalid_field"),
        ({"correction": "101"}, 400, "invalid_field"),
        ({"correction": "50.5"}, 400, "invalid_field"),
        ({"correction": "half"}, 400, "invalid_field"),
        ({"correction": ""}, 400, "invalid_field"),
        ({"cell_sizes": "1,2,3"}, 400, "invalid_field"),
        ({"cell_sizes": "2,4"}, 400, "invalid_field"),  # one size is always allowed
        ({"cell_sizes": "1, 2, 4"}, 400, "invalid_field"),  # the spec's texts, exactly
        ({"cell_sizes": "\uff11,\uff12"}, 400, "invalid_field"),  # other scripts' digits
        ({"cell_sizes": "1,2," * 20_000}, 400, "invalid_field"),  # 80 KB of it: refused, echoed short
        ({"cell_sizes": "1,2", "split": "101"}, 400, "invalid_field"),
        ({"split": "50"}, 422, "invalid_plan"),  # how several sizes split, without several sizes
        ({"cell_sizes": "1,2,4", "tile_size": "32"}, 422, "invalid_plan"),  # a 128 px cell from 64 px tiles
        ({"cell_sizes": "1,2", "tile_size": "2"}, 422, "invalid_plan"),  # too small to show a layout
        ({"cell_sizes": "1,2", "max_uses": "5"}, 422, "invalid_plan"),
        ({"cell_sizes": "1,4", "use_every_photo": "true"}, 422, "invalid_plan"),
        ({"max_uses": "1", "tiles_across": "32"}, 422, "tile_budget"),  # 32 x 24 cells, 18 tiles x 1
        ({"max_uses": "1000", "tiles_across": "600"}, 422, "tile_budget"),  # 600 x 450 cells > MAX_FAIR_CELLS
        ({"library": "Not A Name"}, 400, "invalid_field"),
        ({"library": "nosuchlibrary"}, 404, "library_not_found"),
        ({"image": b"hello, I am not an image"}, 415, "unsupported_media_type"),
        ({"image": b""}, 400, "empty_file"),
        ({"image": "ico"}, 415, "unsupported_media_type"),
        ({"image": "truncated"}, 400, "corrupt_image"),
        ({"image": png_header_only(3000, 3000)}, 413, "too_many_pixels"),  # our limit, from the header
        ({"image": png_header_only(10_000, 10_000)}, 413, "too_many_pixels"),  # Pillow's bomb warning
        ({"image": png_header_only(20_000, 20_000)}, 413, "too_many_pixels"),  # Pillow's bomb error
        ({"image": "huge"}, 413, "too_large"),  # over Settings.max_upload_bytes
        ({"image": "huger"}, 413, "too_large"),  # over the request size limit: never parsed
    ],
)
def test_rejections_store_and_enqueue_nothing(
    client: Any, stores: dict[str, Any], fields: dict[str, Any], status: int, error: str
) -> None:
    image = fields.pop("image", None)
    if image == "ico":
        out = io.BytesIO()
        Image.new("RGB", (32, 32), (200, 10, 10)).save(out, "ICO")
        image = out.getvalue()
    elif image == "truncated":
        image = png_bytes(64, 48)[:-60]
    elif image in {"huge", "huger"}:
        image = b"\x89PNG\r\n\x1a\n" + b"\0" * (2 * 1024 * 1024 + (1000 if image == "huge" else 10**6))
    inputs_before = set(stores["blobs"].list_names(IMAGE_INPUT_CONTAINER))
    queued_before = queued_request_ids(stores)

    response = submit(client, image=image, **fields)

    assert response.status_code == status, response.json
    assert response.json["error"] == error
    assert response.json["detail"]
    assert set(stores["blobs"].list_names(IMAGE_INPUT_CONTAINER)) == inputs_before
    assert queued_request_ids(stores) == queued_before
    assert client.get("/api/jobs").json["jobs"] == []


def test_a_header_past_pillows_own_limit_is_refused_with_its_pixels_and_ours(client: Any) -> None:
    """Pillow refuses 400 MP as it reads the header, in its words ("could be decompression bomb
    DOS attack"); the client is told the photo's pixels and the app's limit, as below that."""
    limit = client.application.config["SETTINGS"].max_input_pixels
    response = submit(client, image=png_header_only(20_000, 20_000))
    assert response.status_code == 413, response.json
    assert response.json["detail"] == f"the photo is 400,000,000 pixels; the limit is {limit:,}"


def test_a_photo_cut_short_is_told_so_in_plain_words(client: Any) -> None:
    """Not Pillow's "image file is truncated (60 bytes not processed)"."""
    response = submit(client, image=png_bytes(64, 48)[:-60])
    assert response.status_code == 400, response.json
    assert (
        response.json["detail"] == "the photo could not be decoded: the file is cut short: damaged, or not copied whole"
    )


def test_exif_rotation_is_planned_upright(client: Any) -> None:
    image = Image.new("RGB", (80, 40), (10, 200, 30))
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif)
    response = submit(client, image=out.getvalue(), filename="phone.jpg", slices="1", tiles_across="20")
    assert response.status_code == 202, response.json
    job = client.get(response.json["status_url"]).json
    grid = plan_grid(40, 80, tile_size=8, tiles_across=20, max_output_pixels=4_000_000)
    assert (job["tiles_across"], job["tiles_down"]) == (grid.tiles_across, grid.tiles_down) == (20, 40)


def test_every_allowed_format_is_accepted(client: Any, stores: dict[str, Any]) -> None:
    import pillow_heif

    heic = io.BytesIO()
    pillow_heif.from_pillow(Image.open(io.BytesIO(png_bytes(40, 30)))).save(heic, format="HEIF", quality=90)
    photos = [
        (fmt, png_bytes(40, 30, fmt=fmt), ext) for fmt, ext in [("JPEG", "jpg"), ("WEBP", "webp"), ("GIF", "gif")]
    ]
    photos += [
        (fmt, png_bytes(40, 30, fmt=fmt), ext) for fmt, ext in [("BMP", "bmp"), ("TIFF", "tif"), ("AVIF", "avif")]
    ]
    photos.append(("HEIF", heic.getvalue(), "heic"))  # an iPhone's photo
    for fmt, data, ext in photos:
        response = submit(client, image=data, filename=f"a.{ext}", slices="1")
        assert response.status_code == 202, (fmt, response.json)
        assert stores["blobs"].download(IMAGE_INPUT_CONTAINER, f"{response.json['request_id']}.{ext}") == data
        preview = client.get(f"/api/jobs/{response.json['request_id']}/preview")  # the photo, while it is queued
        assert preview.status_code == 200 and preview.mimetype == "image/jpeg", fmt
        with Image.open(io.BytesIO(preview.data)) as shown:
            assert shown.size == (40, 30), fmt


def test_a_phone_jpeg_with_a_second_picture_is_accepted_as_a_jpeg(client: Any, stores: dict[str, Any]) -> None:
    """Pillow reads a JPEG carrying a depth map or preview (Multi-Picture Format) as "MPO": it
    was refused with 415 "MPO images are not accepted", though it is a JPEG like any other."""
    photo = Image.new("RGB", (40, 30), (200, 60, 20))
    out = io.BytesIO()
    photo.save(out, "MPO", save_all=True, append_images=[Image.new("RGB", (40, 30), (0, 0, 0))])
    assert Image.open(io.BytesIO(out.getvalue())).format == "MPO"
    response = submit(client, image=out.getvalue(), filename="IMG_0001.JPG", slices="1")
    assert response.status_code == 202, response.json
    stored = stores["blobs"].download(IMAGE_INPUT_CONTAINER, f"{response.json['request_id']}.jpg")
    assert stored == out.getvalue()


def test_list_is_newest_first_and_paged(client: Any) -> None:
    ids = [submit(client, slices="1").json["request_id"] for _ in range(3)]
    first = client.get("/api/jobs?limit=2").json
    assert [j["request_id"] for j in first["jobs"]] == ids[::-1][:2]
    assert first["continuation"]
    second = client.get(f"/api/jobs?limit=2&continuation={first['continuation']}").json
    assert [j["request_id"] for j in second["jobs"]] == [ids[0]]
    assert second["continuation"] is None


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=x", "continuation=garbage"])
def test_list_rejects_bad_paging(client: Any, query: str) -> None:
    response = client.get(f"/api/jobs?{query}")
    assert response.status_code == 400
    assert response.json["error"] == "invalid_field"


@pytest.mark.parametrize("path", ["", "/events", "/result", "/slices/0", "/preview"])
@pytest.mark.parametrize("job_id", ["not-a-uuid", "00000000-0000-4000-8000-000000000000"])
def test_unknown_jobs_are_404(client: Any, path: str, job_id: str) -> None:
    response = client.get(f"/api/jobs/{job_id}{path}")
    assert response.status_code == 404
    assert response.json["error"] == "job_not_found"
    assert client.delete(f"/api/jobs/{job_id}").status_code == 404


def test_slices_result_and_preview_follow_progress(client: Any, stores: dict[str, Any]) -> None:
    request_id = submit(client, image=TWO_PARTS, tile_size="4", slices="2").json["request_id"]
    owner = client_id_of(client, stores, request_id)
    base = f"/api/jobs/{request_id}"

    assert client.get(f"{base}/result").status_code == 409
    not_yet = client.get(f"{base}/slices/0")
    assert not_yet.status_code == 409 and not_yet.json["error"] == "not_ready"
    assert client.get(f"{base}/slices/2").status_code == 404
    source = client.get(f"{base}/preview")
    assert source.status_code == 200 and source.mimetype == "image/jpeg"
    assert Image.open(io.BytesIO(source.data)).size == (12, 100)  # the source photo, never scaled up

    stores["blobs"].upload(SLICE_RESPONSE_CONTAINER, f"{request_id}/1.png", png_bytes(96, 32), content_type="image/png")
    stores["jobs"].update(owner, request_id, lambda j: replace(j, status="rendering", slices_done=frozenset({1})))
    job = client.get(base).json
    assert (job["status"], job["slices_done"], job["progress"]) == ("rendering", [1], 0.5)
    piece = client.get(f"{base}/slices/1")
    assert piece.status_code == 200 and Image.open(io.BytesIO(piece.data)).size == (96, 32)
    assert client.get(f"{base}/slices/0").status_code == 409  # not rendered yet
    # Today's processors write raw .npy slices (slice 1 above is a PNG of an older processor).
    pixels = np.zeros((32, 96, 3), dtype=np.uint8)
    stores["blobs"].upload(
        SLICE_RESPONSE_CONTAINER,
        f"{request_id}/0.npy",
        encode_rendered(pixels),
        content_type="application/octet-stream",
    )
    stores["jobs"].update(owner, request_id, lambda j: replace(j, slices_done=frozenset({0, 1})))
    piece = client.get(f"{base}/slices/0")
    assert piece.status_code == 200 and Image.open(io.BytesIO(piece.data)).size == (96, 32)

    mosaic = finish(stores, owner, request_id)
    job = client.get(base).json
    assert job["status"] == "done" and job["progress"] == 1 and job["finished_at"]
    assert job["result_url"] == f"{base}/result"
    result = client.get(job["result_url"])
    assert result.status_code == 200 and result.mimetype == "image/jpeg" and result.data == mosaic
    assert result.headers["Content-Disposition"].startswith("inline;")
    download = client.get(f"{base}/result?download=1")
    assert download.data == mosaic
    assert download.headers["Content-Disposition"] == f'attachment; filename="mosaic-{request_id[:8]}.jpg"'
    thumb = client.get(f"{base}/preview?size=64")
    assert Image.open(io.BytesIO(thumb.data)).size == (96, 64)  # 64 snaps up to 240: the mosaic whole
    assert client.get(f"{base}/preview?size=1").status_code == 400


def test_events_stream_each_change_until_done(client: Any, stores: dict[str, Any]) -> None:
    """Read the stream event by event, changing the job in between: each change is one event."""
    request_id = submit(client, image=TWO_PARTS, tile_size="4", slices="2").json["request_id"]
    owner = client_id_of(client, stores, request_id)
    response = client.get(f"/api/jobs/{request_id}/events")
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    chunks = iter(response.response)

    def next_event() -> tuple[str, dict[str, Any]]:
        while True:
            block = next(chunks).decode()
            fields = dict(line.split(": ", 1) for line in block.strip().splitlines() if not line.startswith(":"))
            if "event" in fields:
                return fields["event"], json.loads(fields["data"])

    kind, job = next_event()
    assert (kind, job["status"], job["progress"]) == ("job", "queued", 0)
    stores["jobs"].update(owner, request_id, lambda j: replace(j, status="rendering"))
    kind, job = next_event()
    assert (kind, job["status"], job["progress"]) == ("job", "rendering", 0)
    stores["jobs"].update(owner, request_id, lambda j: replace(j, slices_done=frozenset({1})))
    kind, job = next_event()
    assert (kind, job["slices_done"], job["progress"]) == ("job", [1], 0.5)
    finish(stores, owner, request_id)
    kind, job = next_event()
    assert (kind, job["status"], job["result_url"]) == ("job", "done", f"/api/jobs/{request_id}/result")
    assert next_event() == ("end", {"status": "done"})
    assert list(chunks) == []  # the stream is over


def test_delete_refuses_running_jobs_and_removes_finished_ones(client: Any, stores: dict[str, Any]) -> None:
    request_id = submit(client, slices="2").json["request_id"]
    owner = client_id_of(client, stores, request_id)
    refused = client.delete(f"/api/jobs/{request_id}")
    assert refused.status_code == 409 and refused.json["error"] == "job_running"

    finish(stores, owner, request_id)
    assert client.delete(f"/api/jobs/{request_id}").status_code == 204
    assert client.get(f"/api/jobs/{request_id}").status_code == 404
    assert stores["jobs"].get(owner, request_id) is None
    assert stores["jobs"].events(request_id) == []
    assert not stores["blobs"].exists(IMAGE_INPUT_CONTAINER, f"{request_id}.png")
    assert not stores["blobs"].exists(IMAGE_OUTPUT_CONTAINER, f"{request_id}.jpg")
    assert list(stores["blobs"].list_names(SLICE_RESPONSE_CONTAINER, f"{request_id}/")) == []
    assert client.delete(f"/api/jobs/{request_id}").status_code == 404


@pytest.mark.parametrize(
    ("headers", "csrf"),
    [
        ({}, False),  # no custom header
        ({"X-Requested-With": "XMLHttpRequest"}, False),  # the wrong value
        ({"Origin": "http://evil.example"}, True),
        ({"Origin": "null"}, True),
        ({"Referer": "http://evil.example/page"}, True),
    ],
)
def test_state_changes_need_the_csrf_header_and_our_origin(
    client: Any, stores: dict[str, Any], headers: dict[str, str], csrf: bool
) -> None:
    queued_before = queued_request_ids(stores)
    form = {"library": LIBRARY, "tile_size": "8", "slices": "1", "image": (io.BytesIO(png_bytes()), "p.png")}
    response = client.post("/api/jobs", data=form, headers=headers, csrf=csrf)
    assert response.status_code == 403 and response.json["error"] == "csrf"
    assert queued_request_ids(stores) == queued_before
    deleted = client.delete("/api/jobs/00000000-0000-4000-8000-000000000000", headers=headers, csrf=csrf)
    assert deleted.status_code == 403


def test_same_origin_browser_requests_pass(client: Any) -> None:
    form = {"library": LIBRARY, "tile_size": "8", "slices": "1", "image": (io.BytesIO(png_bytes()), "p.png")}
    headers = {"Origin": "http://localhost", "Referer": "http://localhost/"}
    assert client.post("/api/jobs", data=form, headers=headers).status_code == 202


def test_unknown_routes_and_methods_answer_json(client: Any) -> None:
    missing = client.get("/api/nothing-here")
    assert missing.status_code == 404 and missing.json["error"] == "not_found"
    wrong = client.put("/api/jobs")
    assert wrong.status_code == 405 and wrong.json["error"] == "method_not_allowed"


def test_cancel_ends_an_unfinished_job_so_it_can_be_deleted_and_a_finished_one_keeps_its_end(
    client: Any, stores: dict[str, Any]
) -> None:
    request_id = submit(client, slices="2").json["request_id"]
    owner = client_id_of(client, stores, request_id)
    band = f"{request_id}/0.png"  # what a controller would have written by now (no roles run here)
    stores["blobs"].upload(SLICE_REQUEST_CONTAINER, band, png_bytes(8, 8), content_type="image/png")
    cancelled = client.post(f"/api/jobs/{request_id}/cancel")
    assert cancelled.status_code == 200, cancelled.json
    assert cancelled.json["status"] == "failed" and cancelled.json["error"] == "cancelled by its owner"
    job = stores["jobs"].get(owner, request_id)
    assert job.status == "failed" and job.finished_at is not None  # what every role checks before working
    assert [e.kind for e in stores["jobs"].events(request_id)] == ["submitted", "cancelled"]
    assert not stores["blobs"].exists(SLICE_REQUEST_CONTAINER, band)  # a processor finds it gone and renders nothing
    again = client.post(f"/api/jobs/{request_id}/cancel")
    assert again.status_code == 409 and again.json["error"] == "job_finished"
    assert client.delete(f"/api/jobs/{request_id}").status_code == 204

    done = submit(client, slices="2").json["request_id"]
    finish(stores, owner, done)
    refused = client.post(f"/api/jobs/{done}/cancel")
    assert refused.status_code == 409 and refused.json["error"] == "job_finished"
    assert stores["jobs"].get(owner, done).status == "done"  # its end kept
    assert client.post("/api/jobs/00000000-0000-4000-8000-000000000000/cancel").status_code == 404
    assert client.post(f"/api/jobs/{done}/cancel", csrf=False).status_code == 403  # a state change: the CSRF rule
