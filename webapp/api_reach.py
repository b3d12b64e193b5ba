"""``POST /api/plan``: the plan of a job for this photo and library, and how well the library
reaches the photo's colours, before anything is submitted.

A narrow library (a year of beach photos, a night sky) makes an honest mosaic that is greyer
than the photo where no tile has its colours, and from afar a program that repeats its nearest
photo is closer there. A person should learn that before waiting for the job
(``mosaic.reach``): the answer carries the grid (as ``GET /api/plan``), the figures, a sentence
to show, and two small previews: the defaults and the colour moved all the way toward the photo.
The photo's own size and a small picture of it, upright, come back too: a browser that cannot
show the photo (Chrome and an iPhone's HEIC) shows the server's reading of it instead.

Checked in the same order as a job (``docs/operations.md``): the form's fields, the library
(404 if this client may not use it), then the photo within the upload limits and the decoding
budget. The photo is decoded at reduced size for the preview; nothing is stored or enqueued.
"""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import numpy as np
from flask import Blueprint, jsonify, request
from PIL import Image

from dal.errors import LibraryNotFoundError
from mosaic import SUB, open_image
from mosaic.options import DEFAULT_OPTIONS
from mosaic.reach import PREVIEW_ACROSS, library_reach, preview_across
from webapp import planning
from webapp.decode_budget import DECODES, decode_cost
from webapp.errors import ApiError
from webapp.job_cells import cells_fields
from webapp.job_submission import find_library
from webapp.services import services, settings
from webapp.validation import int_field, optional_int_field, validate_image

bp = Blueprint("api_reach", __name__, url_prefix="/api")


@bp.post("/plan")
def plan_with_photo() -> Any:
    limits = settings()
    upload = request.files.get("image")
    if upload is None:
        raise ApiError(400, "missing_field", "image is required (a multipart file field)")
    library = (request.form.get("library") or "").strip()
    if not library:
        raise ApiError(400, "missing_field", "library is required")
    tile_size = int_field(request.form, "tile_size", low=1, high=64)
    tiles_across = optional_int_field(request.form, "tiles_across", low=1, high=planning.MAX_TILES_ACROSS)
    correction = optional_int_field(request.form, "correction", low=0, high=100)
    cell_sizes, split = cells_fields(request.form, tile_size=tile_size, max_uses=None, use_every_photo=False)
    library_uri = find_library(library)
    photo = validate_image(
        upload.read(limits.max_upload_bytes + 1), max_bytes=limits.max_upload_bytes, max_pixels=limits.max_input_pixels
    )
    grid = planning.plan(
        width=photo.width,
        height=photo.height,
        tile_size=tile_size,
        tiles_across=tiles_across,
        max_output_pixels=limits.max_output_pixels,
    )
    across = preview_across(grid.tiles_across)  # the preview follows the job's grid, up to a bound
    side = max(across, PREVIEW_ACROSS) * SUB  # the photo's picture is twice this, whatever the grid
    # A JPEG is decoded reduced (a few preview pixels per cell); any other format whole.
    pixels = side * side * 4 if photo.format in ("JPEG", "MPO") else photo.width * photo.height
    with DECODES.reserve(decode_cost(photo.data, pixels)):
        image = open_image(photo.data, max_pixels=limits.max_input_pixels, min_size=(side, side))
        image.thumbnail((side * 2, side * 2), Image.Resampling.BOX)
    options = DEFAULT_OPTIONS if correction is None else replace(DEFAULT_OPTIONS, correction=correction)
    if cell_sizes is not None:  # the preview as the job will be: large photos where they fit
        options = replace(options, cell_sizes=cell_sizes, split=options.split if split is None else split)
    try:
        library_tiles = services().libraries.load(library_uri, fresh_for=10.0)
    except LibraryNotFoundError:  # named, but no photo of it indexed yet (its uploads are still coming in)
        raise ApiError(409, "library_not_ready", f"library {library!r} has no indexed photos yet") from None
    reach = library_reach(image, library_tiles, options=options, tiles_across=across)
    body = planning.describe(grid, limit=limits.max_slices, align=cell_sizes[-1] if cell_sizes else 1)
    # For a page that cannot read the photo (a HEIC in Chrome): its size plans the grid, its picture is shown.
    body["photo"] = {"width": photo.width, "height": photo.height, "preview": _data_url(np.asarray(image))}
    body["reach"] = {
        "warn": reach.warn,
        "message": reach.message(),
        "delta_e": round(reach.ours, 2),
        "nearest_delta_e": round(reach.nearest, 2),
        "toward_photo": {str(c): round(v, 2) for c, v in reach.toward_photo.items()},
        "short_regions": [[r, c] for r, c in reach.short_regions()],
        "correction": reach.correction,
        "preview": _data_url(reach.preview),
        "preview_toward_photo": _data_url(reach.preview_toward_photo),
    }
    return jsonify(body)


def _data_url(pixels: np.ndarray) -> str:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()
