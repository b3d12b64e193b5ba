"""The pyramid routes: the DZI descriptor, single tiles by range read, and the zip download."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dal.blob_names import pyramid_blob_name
from dal.blobs import BlobStore
from dal.config import IMAGE_OUTPUT_CONTAINER, Settings, StorageClients
from dal.jobs import JobStore
from tests.web.conftest import png_bytes, submit
from workers.stitching import open_slice, save_pyramid


@pytest.fixture
def blobs(web_storage: StorageClients, web_settings: Settings) -> BlobStore:
    return BlobStore(web_storage, prefix=web_settings.name_prefix)


def test_a_done_job_serves_its_descriptor_tiles_and_zip(client: Any, other_client: Any, blobs: BlobStore,
                                                         web_storage: StorageClients, web_settings: Settings,
                                                         tmp_path: Path) -> None:  # fmt: skip
    request_id = submit(client, image=png_bytes(64, 48), slices="1").json["request_id"]
    base = f"/api/jobs/{request_id}"
    assert client.get(f"{base}/dzi").status_code == 409  # not done yet
    assert client.get(f"{base}/dzi_files/0/0_0.jpg").status_code == 409
    assert client.get(f"{base}/pyramid").status_code == 409

    jobs = JobStore(web_storage, prefix=web_settings.name_prefix)
    owner = next(m.message.client_id for m in _image_requests(web_storage, web_settings) if m.message.request_id == request_id)
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
    for level, column, row in [(0, 0, 0), (10, 2, 1), (9, 1, 0)]:
        tile = client.get(f"{base}/dzi_files/{level}/{column}_{row}.jpg")
        assert tile.status_code == 200 and tile.mimetype == "image/jpeg"
        assert tile.data == archive.read(f"mosaic_files/{level}/{column}_{row}.jpg")
    assert client.get(f"{base}/dzi_files/10/3_0.jpg").json["error"] == "not_found"  # past the edge
    whole = client.get(f"{base}/pyramid")
    assert whole.status_code == 200 and whole.mimetype == "application/zip" and whole.data == data
    assert whole.headers["Content-Disposition"].startswith("attachment;")
    assert other_client.get(f"{base}/dzi").status_code == 404  # another browser's job does not exist for it


def _image_requests(storage: StorageClients, settings: Settings) -> Any:
    from dal.queues import QueueAccessor

    return QueueAccessor(storage, settings=settings, prefix=settings.name_prefix).image_request.peek(32)
