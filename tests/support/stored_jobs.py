"""A finished job with every blob and row a real one leaves, and what is left of it after cleanup."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from dal.blobs.names import slice_tile_map_name, tile_map_name
from dal.blobs.store import BlobStore
from dal.config import (
    IMAGE_INPUT_CONTAINER,
    IMAGE_OUTPUT_CONTAINER,
    SLICE_REQUEST_CONTAINER,
    SLICE_RESPONSE_CONTAINER,
    Settings,
    StorageClients,
)
from dal.jobs.model import Job
from dal.jobs.store import JobStore
from dal.queues.accessor import QueueAccessor

CLIENT = "cleanup-test"


@pytest.fixture
def world(storage: StorageClients, unique: str) -> dict[str, Any]:
    prefix = f"k{unique}"
    blobs, jobs = BlobStore(storage, prefix=prefix), JobStore(storage, prefix=prefix)
    blobs.ensure_containers()
    jobs.ensure_tables()
    queues = QueueAccessor(storage, settings=Settings(), prefix=prefix)
    queues.job_cleanup.ensure_exists()
    return {"blobs": blobs, "jobs": jobs, "queues": queues}


def make_job(blobs: BlobStore, jobs: JobStore, *, slices: int = 3, events: int = 3) -> str:
    """A finished job with everything a real one leaves: photo, bands, slices and their tile maps, output and its tile map, rows."""
    rid = str(uuid.uuid4())
    jobs.create(
        Job(
            client_id=CLIENT,
            request_id=rid,
            status="done",
            library="lib",
            tile_size=8,
            slices=slices,
            tiles_across=4,
            tiles_down=4,
            output_width=32,
            output_height=32,
            input_name=f"{rid}.png",
            output_name=f"{rid}.jpg",
            finished_at=datetime.now(UTC),
        )
    )
    blobs.upload(IMAGE_INPUT_CONTAINER, f"{rid}.png", b"photo", content_type="image/png")
    for seq in range(slices):
        blobs.upload(SLICE_REQUEST_CONTAINER, f"{rid}/{seq}.png", b"band", content_type="image/png")
        blobs.upload(SLICE_RESPONSE_CONTAINER, f"{rid}/{seq}.png", b"slice", content_type="image/png")
        blobs.upload(SLICE_RESPONSE_CONTAINER, slice_tile_map_name(rid, seq), b"map", content_type="application/gzip")
    blobs.upload(IMAGE_OUTPUT_CONTAINER, f"{rid}.jpg", b"mosaic", content_type="image/jpeg")
    blobs.upload(IMAGE_OUTPUT_CONTAINER, tile_map_name(rid), b"map", content_type="application/gzip")
    for i in range(events):
        jobs.add_event(rid, "progress", actor="test", message=f"event {i}")
    return rid


def leftovers(blobs: BlobStore, jobs: JobStore, rid: str) -> list[str]:
    found = [
        f"{c}/{n}"
        for c in (IMAGE_INPUT_CONTAINER, SLICE_REQUEST_CONTAINER, SLICE_RESPONSE_CONTAINER, IMAGE_OUTPUT_CONTAINER)
        for n in blobs.list_names(c, rid)
    ]
    if jobs.get(CLIENT, rid) is not None:
        found.append("job row")
    found += [f"event {e.kind}" for e in jobs.events(rid)]
    return found
