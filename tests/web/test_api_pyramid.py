"""The pyramid routes: the DZI descriptor, single tiles by range read, and the zip download."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from PIL import Image

from dal.blobs.names import pyramid_blob_name
from dal.blobs.store import BlobStore
from dal.config import IMAGE_OUTPUT_CONTAINER, Settings, StorageClients
from dal.jobs.store import JobStore
from mosaic.deepzoom import DZI_TILE_SIZE, write_dzi_zip
from tests.web.conftest import png_bytes, submit
from workers.imaging.stitching import open_slice, save_pyramid


@pytest.fixture
def blobs(web_storage: StorageClients, web_settings: Settings) -> BlobStore:
    return BlobStore(web_storage, prefix=web_settings.name_prefix)


def test_a_done_job_serves_its_descriptor_tiles_and_zip(
    client: Any,
    other_client: Any,
    blobs: BlobStore,
    web_storage: StorageClients,
    web_settings: Settings,
    tmp_path: Path,
) -> None:
    request_id = submit(client, image=png_bytes(64, 48), slices="1").json["request_id"]
    base = f"/api/jobs/{request_id}"
    assert client.get(f"{base}/dzi").status_code == 409  # not done yet
    assert client.get(f"{base}/dzi_files/0/0_0.jpg").status_code == 409
    assert client.get(f"{base}/pyramid").status_code == 409

    jobs = JobStore(web_storage, prefix=web_settings.name_prefix)
    with client.session_transaction() as session:  # the client id the app gave this test client
        owner = str(session["cid"])
    assert jobs.get(owner, request_id) is not None, f"no job {request_id} for client {owner}"
    jobs.update(owner, request_id, lambda j: replace(j, status="done", output_name=f"{request_id}.jpg"))
    assert client.get(f"{base}/dzi").json["error"] == "result_missing"  # done, but no pyramid (an older job)

    np.save(tmp_path / "m.npy", np.random.default_rng(0).integers(0, 256, (300, 517, 3), dtype=np.uint8))
    opened = open_slice(tmp_path / "m.npy")
    save_pyramid(opened, tmp_path / "mosaic.zip")
    opened.close()
    data = (tmp_path / "mosaic.zip").read_bytes()
    blobs.upload(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(request_id), data, content_type="application/zip")

    status = client.get(base).json
    assert status["dzi_url"] == f"{base}/dzi" and status["pyramid_url"] == f"{base}/pyramid"
    archive = zipfile.ZipFile(io.BytesIO(data))
    dzi = client.get(f"{base}/dzi")
    assert dzi.status_code == 200 and dzi.mimetype == "application/xml" and b'Width="517"' in dzi.data
    assert b'TileSize="510"' in dzi.data  # 517 x 300 at the top level (10): 2 x 1 tiles
    for level, column, row in [(0, 0, 0), (10, 1, 0), (9, 0, 0)]:
        tile = client.get(f"{base}/dzi_files/{level}/{column}_{row}.jpg")
        assert tile.status_code == 200 and tile.mimetype == "image/jpeg"
        assert tile.data == archive.read(f"mosaic_files/{level}/{column}_{row}.jpg")
    assert client.get(f"{base}/dzi_files/10/2_0.jpg").json["error"] == "not_found"  # past the edge
    whole = client.get(f"{base}/pyramid")
    assert whole.status_code == 200 and whole.mimetype == "application/zip" and whole.data == data
    assert whole.headers["Content-Disposition"].startswith("attachment;")
    assert other_client.get(f"{base}/dzi").status_code == 404  # another browser's job does not exist for it


def client_of(app: Flask, cookie: str) -> str:
    """The client id inside a browser's signed session cookie (``webapp.clients``)."""
    return str(app.session_interface.get_signing_serializer(app).loads(cookie)["cid"])  # type: ignore[attr-defined]


def finish_with_pyramid(
    owner: str,
    request_id: str,
    web_storage: StorageClients,
    web_settings: Settings,
    tmp_path: Path,
    *,
    width: int,
    height: int,
    output_name: str,
    tile_size: int = DZI_TILE_SIZE,
) -> None:
    """Make a submitted job done straight in storage: a gradient ``width`` x ``height`` pyramid
    (red along x, green along y) of ``tile_size`` px tiles, and no other output blob."""
    import pyvips

    xy = pyvips.Image.xyz(width, height)
    gradient = (xy[0] * (255 / width)).bandjoin([xy[1] * (255 / height), xy[0] * 0 + 128]).cast("uchar")
    zipped = tmp_path / request_id / "mosaic.zip"  # (the members are named after the file: mosaic_files/...)
    zipped.parent.mkdir()
    write_dzi_zip(gradient.copy(interpretation="srgb"), zipped, tile_size=tile_size)
    BlobStore(web_storage, prefix=web_settings.name_prefix).upload(
        IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(request_id), zipped.read_bytes(), content_type="application/zip"
    )
    JobStore(web_storage, prefix=web_settings.name_prefix).update(
        owner,
        request_id,
        lambda j: replace(
            j,
            status="done",
            slices_done=frozenset(range(j.slices)),
            output_width=width,
            output_height=height,
            output_name=output_name.format(request_id),
        ),
    )


def _done_with_pyramid(
    app: Flask, client: Any, web_storage: StorageClients, web_settings: Settings, tmp_path: Path, **size: Any
) -> str:
    request_id = submit(client, image=png_bytes(64, 48), slices="1").json["request_id"]
    owner = client_of(app, client.get_cookie(app.config["SESSION_COOKIE_NAME"]).value)
    finish_with_pyramid(owner, request_id, web_storage, web_settings, tmp_path, **size)
    return str(request_id)


@pytest.mark.parametrize("tile_size", [DZI_TILE_SIZE, 254])  # 254: a job stored before the tiles grew to 510
def test_a_done_jobs_preview_is_made_from_its_pyramid(
    app: Flask, client: Any, web_storage: StorageClients, web_settings: Settings, tmp_path: Path, tile_size: int
) -> None:
    # The job's JPEG is not even there: the preview reads only the pyramid's tiles, cut as its
    # descriptor says.
    request_id = _done_with_pyramid(
        app,
        client,
        web_storage,
        web_settings,
        tmp_path,
        width=2000,
        height=1500,
        output_name="{}.jpg",
        tile_size=tile_size,
    )
    for size in (480, 1600):  # level 9 (500 x 375) and level 11 (the full size: 4 x 3 tiles of 510, 8 x 6 of 254)
        answer = client.get(f"/api/jobs/{request_id}/preview?size={size}")
        assert answer.status_code == 200 and answer.mimetype == "image/jpeg"
        preview = np.asarray(Image.open(io.BytesIO(answer.data)).convert("RGB"), dtype=float)
        h, w = preview.shape[:2]
        assert (w, h) == (size, size * 3 // 4)
        # Every tile in its place: red grows along x, green along y, as in the mosaic.
        expected_red = (np.arange(w) + 0.5) * 255 / w
        expected_green = (np.arange(h) + 0.5) * 255 / h
        assert np.abs(preview[:, :, 0].mean(axis=0) - expected_red).max() < 6
        assert np.abs(preview[:, :, 1].mean(axis=1) - expected_green).max() < 6


def test_a_mosaic_too_big_for_a_jpeg_has_a_preview_and_its_zip_as_the_result(
    app: Flask, client: Any, web_storage: StorageClients, web_settings: Settings, tmp_path: Path
) -> None:
    # Over JPEG's 65,500 px a side: the controller stores only the pyramid, as the result too.
    request_id = _done_with_pyramid(
        app, client, web_storage, web_settings, tmp_path, width=65_600, height=64, output_name="{}.dzi.zip"
    )
    job = client.get(f"/api/jobs/{request_id}").json
    assert job["preview_url"] and job["result_url"] and job["pyramid_url"]
    preview = client.get(job["preview_url"])
    assert preview.status_code == 200 and preview.mimetype == "image/jpeg"
    assert Image.open(io.BytesIO(preview.data)).size == (480, 1)
    result = client.get(job["result_url"])
    assert result.status_code == 200 and result.mimetype == "application/zip"
    assert zipfile.ZipFile(io.BytesIO(result.data)).read("mosaic.dzi").count(b'Width="65600"') == 1
