"""Dispatching a job's slices: each band stored (or inlined in its message), then one
SliceRequest per band not yet done, sent to the job's lane and shard, and one event row each.

Idempotent: a redelivered ImageRequest stores the same blobs and sends only the slices the job
row does not list as done.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from dal.blobs.names import band_blob_name
from dal.config import SLICE_REQUEST_CONTAINER
from dal.jobs.model import Job
from dal.queues.messages import ImageRequestMessage, SliceRequestMessage
from workers.imaging.slicing import Band, encode_band, inline_band
from workers.services import RoleServices
from workers.stages import Stopwatch

__all__ = ["dispatch_slices", "store_bands"]

log = logging.getLogger("workers.controller.controller")
_IO_THREADS = 8


def store_bands(services: RoleServices, rid: str, bands: list[Band]) -> list[tuple[str, str | None]]:
    """Each band's (slice_uri, inline band): a small band rides in its message, a big one is a
    blob (uploaded to the secondary account when the primary fails: dal.availability.failover)."""

    def store(band: Band) -> tuple[str, str | None]:
        encoded, name = encode_band(band), band_blob_name(rid, band.sequence)
        if (inline := inline_band(encoded, services.settings.inline_band_bytes)) is not None:
            return services.blobs.blob_url(SLICE_REQUEST_CONTAINER, name), inline
        return services.upload(SLICE_REQUEST_CONTAINER, name, encoded, content_type="image/png"), None

    with ThreadPoolExecutor(max_workers=min(_IO_THREADS, len(bands))) as pool:
        return list(pool.map(store, bands))


def dispatch_slices(
    services: RoleServices,
    actor: str,
    message: ImageRequestMessage,
    job: Job,
    bands: list[Band],
    stored: list[tuple[str, str | None]],
    *,
    lane: int,
    ahead: int,
    clock: Stopwatch,
) -> list[SliceRequestMessage]:
    """Send the SliceRequests of the bands the job has not done yet, and record them; the requests sent."""
    rid, jobs = message.request_id, services.jobs
    queues = services.queues
    pending = [
        SliceRequestMessage(
            queue_uri=queues.slice_request_shard(rid, band.sequence, lane).url,
            client_id=message.client_id,
            request_id=rid,
            image_library_uri=message.image_library_uri,
            slice_uri=url,
            slice_sequence=band.sequence,
            tile_size=message.tile_size,
            band=inline,
            correction=message.correction,
            library_version=message.library_version,
            cell_sizes=message.cell_sizes,
            split=message.split,
        )
        for band, (url, inline) in zip(bands, stored, strict=True)
        if band.sequence not in job.slices_done
    ]
    for shard in queues.slice_lanes[lane]:  # one shard when unsharded (dal.queues.shards)
        mine = [m for m in pending if m.queue_uri == shard.url]
        if mine:
            services.send(mine)
    clock.lap("dispatch")
    events = [
        dict(
            kind="dispatched",
            actor=actor,
            slice=(band := bands[request.slice_sequence]).sequence,
            message=f"slice {band.sequence + 1} of {len(bands)} (tile rows {band.first_row}..{band.first_row + band.rows - 1}) dispatched"
            + (f" in lane {lane} ({ahead} of this client's jobs ahead)" if lane else ""),
        )
        for request in pending
    ]
    if events:  # one transaction for all of them (one partition), timings on the first
        events[0].update(seconds=sum(clock.stages.values()), stages=clock.stages)
    jobs.add_events(rid, events)
    log.info("job %s: %d slices dispatched to lane %d (%d of the client's jobs ahead)", rid, len(pending), lane, ahead)
    return pending
