"""Jobs and events as the JSON the API returns (one place, so list, detail and SSE agree).

A job's error and its events' messages are reasons written for a person; ``public_text``
keeps them so (one line, bounded, never a traceback) whatever a worker stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import url_for

from dal.jobs.model import Job, JobEvent, JobStatus
from mosaic.grid import Grid
from webapp import planning

_MAX_REASON = 300


def public_text(text: str | None) -> str | None:
    """A stored reason as a client may see it: its first line, at most 300 characters."""
    if not text:
        return text
    if "Traceback (most recent call last)" in text:
        return "an internal error (the operators' log has the details)"
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def job_json(job: Job, *, waiting_for_storage: bool = False) -> dict[str, Any]:
    """Status, progress, final size, timings and the URLs a client follows next.

    ``waiting_for_storage``: the job was submitted while the primary storage account was down
    and waits on the paired secondary until it is back (``dal.availability.failover``)."""
    rid = job.request_id
    finished = job.finished_at
    elapsed = ((finished or job.updated_at) - job.created_at).total_seconds()
    done = job.status == JobStatus.DONE and bool(job.output_name)
    return {
        "request_id": rid,
        "status": job.status,
        "waiting_for_storage": waiting_for_storage,
        "library": job.library,
        "tile_size": job.tile_size,
        "slices": job.slices,
        "slices_done": sorted(job.slices_done),
        "progress": round(job.progress, 4),
        "tiles_across": job.tiles_across,
        "tiles_down": job.tiles_down,
        "output_width": job.output_width,
        "output_height": job.output_height,
        "cell_sizes": list(job.cell_sizes or (1,)),
        "bands": planning.job_bands(
            Grid(job.tiles_across, job.tiles_down, job.output_width, job.output_height, job.tile_size),
            job.slices,
            align=job.cell_sizes[-1] if job.cell_sizes else 1,
        )
        if job.tiles_down >= job.slices
        else [],
        "error": public_text(job.error),
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "finished_at": _iso(finished),
        "elapsed_seconds": round(max(0.0, elapsed), 3),
        "status_url": url_for("api_jobs.get_job", request_id=rid),
        "events_url": url_for("api_job_events.job_events", request_id=rid),
        "preview_url": url_for("api_job_images.job_preview", request_id=rid),
        "result_url": url_for("api_job_images.job_result", request_id=rid) if done else None,
        # Every finished job has a Deep Zoom pyramid.
        "dzi_url": url_for("api_pyramid.job_dzi", request_id=rid) if done else None,
        "pyramid_url": url_for("api_pyramid.job_pyramid", request_id=rid) if done else None,
        "page_url": url_for("pages.job_page", request_id=rid),
    }


def event_json(event: JobEvent) -> dict[str, Any]:
    return {
        "at": _iso(event.at),
        "kind": event.kind,
        "actor": event.actor,
        "message": public_text(event.message),
        "slice": event.slice,
        "seconds": event.seconds,
    }
