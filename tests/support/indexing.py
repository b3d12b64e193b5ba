"""Helpers for the tests of libraries filled by uploads: photos, uploads through the API, the indexer."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from azure.storage.blob import BlobClient
from PIL import Image

from workers.indexer.indexer import Indexer
from workers.services import RoleServices


def photo(seed: int, size: tuple[int, int] = (160, 120)) -> bytes:
    """A small, smooth JPEG: one colour layout per seed."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(3, 4, 3)).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(small).resize(size, Image.Resampling.BICUBIC).save(out, "JPEG", quality=90)
    return out.getvalue()


def upload(client: Any, library: str, files: dict[str, bytes]) -> None:
    """Ask for upload URLs and write each photo with its SAS URL, as the browser does."""
    grant = client.post(
        f"/api/libraries/{library}/uploads", json={"files": [{"name": n, "size": len(d)} for n, d in files.items()]}
    )
    assert grant.status_code in (200, 201), grant.get_json()
    for item in grant.get_json()["uploads"]:
        BlobClient.from_blob_url(item["url"]).upload_blob(files[item["name"]], overwrite=True)


def index(client: Any, services: RoleServices, library: str) -> None:
    """Ask for indexing and handle this library's IndexRequests in this process."""
    assert client.post(f"/api/libraries/{library}/index").status_code == 202
    uri = services.libraries.uri(library)
    indexer, queue = Indexer(services), services.queues.index_request
    while True:
        batch = queue.accept_messages(32, visibility_timeout=60)
        mine = [r for r in batch if r.message.library_uri == uri]
        for received in batch:
            if received not in mine:
                queue.release(received)
        if not mine:
            return
        for received in mine:
            indexer.handle_index_request(received)
            queue.delete(received)
