"""Opening is bounded in the web app: a small file padded with header elements is refused
before Pillow reads it (``mosaic.image_structure``), as a job photo, as a library file and
inside a library zip, with a JSON 4xx, nothing stored and the decoding budget untouched.

The files are those of ``tests.support.hostile_images``: an 8 x 8 JPEG padded with empty
segments (before the check: accepted, 500 MB and 8 s to open at 14 MB) and 64 x 64 TIFFs
listing a million strips each (285 MB and 3 s apiece)."""

from __future__ import annotations

import io
from typing import Any

from dal.blobs.libraries import LibraryStore
from dal.config import Settings, StorageClients
from tests.support.hostile_images import (
    avif_cut_in_half,
    damaged_avif,
    many_strips_tiff,
    many_text_png,
    padded_jpeg,
    tiff_zip,
)
from tests.web.conftest import submit
from webapp.decode_budget import DECODES


def test_a_padded_jpeg_photo_is_refused_unopened(client: Any) -> None:
    granted = DECODES.granted
    answer = submit(client, image=padded_jpeg(1536 * 1024), filename="padded.jpg")
    assert answer.status_code == 400, answer.get_json()
    assert answer.get_json()["error"] == "image_too_complex"
    assert "segments" in answer.get_json()["detail"]
    assert DECODES.granted == granted  # nothing was decoded
    assert client.get("/api/jobs").get_json()["jobs"] == []


def test_a_tiff_of_a_million_strips_is_refused_as_a_photo(client: Any) -> None:
    answer = submit(client, image=many_strips_tiff(1_000_000)[: 2 * 1024 * 1024 - 1], filename="strips.tif")
    assert answer.status_code == 400 and answer.get_json()["error"] == "image_too_complex"


def test_a_damaged_avif_photo_is_a_client_error_not_a_server_error(client: Any) -> None:
    """libavif's failures are RuntimeErrors, which the decoder once let through as a 500; an
    AVIF cut short was 415 "not an image in a known format" (libavif cannot read its container)."""
    damaged = {how: damaged_avif(how) for how in ("zeroed", "inverted", "cut-short")} | {
        "cut-in-half": avif_cut_in_half()
    }
    for how, data in damaged.items():
        answer = submit(client, image=data, filename="damaged.avif")
        assert 400 <= answer.status_code < 500, (how, answer.status_code, answer.get_data(as_text=True)[:300])
        assert answer.get_json()["error"] == "corrupt_image", (how, answer.get_json())
    assert client.get("/api/jobs").get_json()["jobs"] == []


def test_a_png_of_many_text_chunks_is_refused_as_a_photo(client: Any) -> None:
    answer = submit(client, image=many_text_png(20_000), filename="texts.png")
    assert answer.status_code == 400 and answer.get_json()["error"] == "image_too_complex"


def test_a_zip_of_tiffs_of_a_million_strips_makes_no_library(
    client: Any, web_storage: StorageClients, web_settings: Settings
) -> None:
    granted = DECODES.granted
    data = tiff_zip(4, 1_000_000)
    assert len(data) < 200 * 1024  # four 8 MB TIFFs, deflated
    answer = client.post("/api/libraries", data={"name": "strips-zip", "files": [(io.BytesIO(data), "strips.zip")]})
    assert answer.status_code == 422, answer.get_json()
    body = answer.get_json()
    assert body["error"] == "no_usable_images" and "strips or tiles" in body["detail"]
    assert DECODES.granted == granted
    assert not LibraryStore(web_storage, prefix=web_settings.name_prefix).exists("strips-zip")


def test_a_padded_jpeg_among_library_files_is_skipped_with_its_reason(client: Any) -> None:
    good = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (64, 64), (10, 200, 30)).save(good, "PNG")
    answer = client.post(
        "/api/libraries",
        data={
            "name": "padded-files",
            "files": [(io.BytesIO(good.getvalue()), "good.png"), (io.BytesIO(padded_jpeg(1024 * 1024)), "bad.jpg")],
        },
    )
    assert answer.status_code == 201, answer.get_json()
    [skipped] = answer.get_json()["skipped"]
    assert skipped["file"] == "bad.jpg" and "segments" in skipped["reason"]
