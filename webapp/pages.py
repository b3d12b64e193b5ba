"""The HTML pages: server-rendered shells that the small scripts in ``static/`` bring to life.

Every page works from the JSON API, so the browser and ``photomosaics submit`` exercise the
same code. Pages only read, so they need no CSRF check of their own.
"""

from __future__ import annotations

import re

from flask import Blueprint, abort, render_template

from dal.queues.message_fields import REQUEST_ID_PATTERN
from mosaic.options import DEFAULT_OPTIONS
from webapp.admin import admin_enabled
from webapp.services import settings

bp = Blueprint("pages", __name__)
_UUID = re.compile(f"^{REQUEST_ID_PATTERN}$")


@bp.get("/")
def index() -> str:
    limits = settings()
    return render_template(
        "index.html",
        active="create",
        max_slices=limits.max_slices,
        max_upload_mb=limits.max_upload_bytes // (1024 * 1024),
        max_output_mp=round(limits.max_output_pixels / 1e6),
        default_correction=DEFAULT_OPTIONS.correction,
    )


@bp.get("/jobs")
def gallery() -> str:
    return render_template("gallery.html", active="gallery")


@bp.get("/jobs/<request_id>")
def job_page(request_id: str) -> str:
    if not _UUID.match(request_id):
        abort(404)
    return render_template("job.html", active="gallery", request_id=request_id)


@bp.get("/libraries")
def libraries() -> str:
    return render_template("libraries.html", active="libraries")


@bp.get("/queues")
def queues() -> str:

    max_wait = settings().backpressure_max_wait_seconds
    return render_template("queues.html", active="queues", admin=admin_enabled(), max_wait=max_wait)
