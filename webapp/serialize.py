"""Jobs and events as the JSON the API returns (one place, so list, detail and SSE agree)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import url_for

from dal.jobs.model import Job, JobEvent, JobStatus

from webapp import planning


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
        "bands": planning.bands(job.tiles_down, job.slices) if job.tiles_down >= job.slices else [],
        "error": job.error,
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "finished_at": _iso(finished),
        "elapsed_seconds": round(max(0.0, elapsed), 3),
        "status_url": url_for("api_jobs.get_job", request_id=rid),
        "events_url": url_for("api_jobs.job_events", request_id=rid),
        "preview_url": url_for("api_jobs.job_preview", request_id=rid),
        "result_url": url_for("api_jobs.job_result", request_id=rid) if done else None,
        # Every job finished since issue 13 has a Deep Zoom pyramid (older ones answer 404 there).
        "dzi_url": url_for("api_pyramid.job_dzi", request_id=rid) if done else None,
        "pyramid_url": url_for("api_pyramid.job_pyramid", request_id=rid) if done else None,
        "page_url": url_for("pages.job_page", request_id=rid),
    }


def event_json(event: JobEvent) -> dict[str, Any]:
    return {
        "at": _iso(event.at),
        "kind": event.kind,
        "actor": event.actor,
        "message": event.message,
        "slice": event.slice,
        "seconds": event.seconds,
    }
