"""The print planner: paper width and DPI to tiles across, and tiles across to paper width.

``GET /api/print-plan/for-paper?tile_size=&dpi=&width_cm=`` answers how many tiles across
fill a print that wide at that DPI (the pixels it needs, rounded to whole tiles);
``GET /api/print-plan/for-grid?tile_size=&dpi=&tiles_across=`` answers how wide that grid
prints; ``GET /api/print-plan/every-photo?library=&tile_size=&width=&height=`` answers the
fewest tiles across that use every photo of the library once (``use_every_photo``) for a
photo of that size. Routes each with all their parameters required, rather than one route taking
"exactly one of" two: OpenAPI 3.0 query parameters cannot state that rule, so a client
generator or fuzzer reading the spec would send requests the server must refuse. The
arithmetic is ``mosaic.print_planner`` (its round trip is property-tested); this module only
validates and answers. The create page's planner form uses it to set the detail slider.
"""

from __future__ import annotations

import math
import re

from flask import Blueprint, Response, jsonify, request

from mosaic.print_planner import PrintPlan, every_photo_tiles_across, paper_for_grid, plan_for_paper
from webapp import planning
from webapp.errors import ApiError
from webapp.every_photo import library_photo_count
from webapp.job_submission import find_library
from webapp.validation import int_field

bp = Blueprint("api_print", __name__, url_prefix="/api")

MAX_DPI = 2400
MAX_WIDTH_CM = 1000.0  # a 10 m banner: beyond any printer this app will meet


# A decimal number as a client writes it; float() alone also takes "1_0", "nan" and other scripts' digits.
DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


MAX_DECIMAL_CHARS = 32  # checked before the pattern, whose backtracking grows with the square of the length


def _width_cm(raw: str) -> float:
    if len(raw.strip()) > MAX_DECIMAL_CHARS or not DECIMAL.fullmatch(raw.strip()):
        raise ApiError(400, "invalid_field", "width_cm must be a number of centimetres")
    value = float(raw)
    if not math.isfinite(value) or not 0 < value <= MAX_WIDTH_CM:
        raise ApiError(400, "invalid_field", f"width_cm must be more than 0 and at most {MAX_WIDTH_CM:g}")
    return value


def _common() -> tuple[int, int]:
    return int_field(request.args, "tile_size", low=1, high=64), int_field(request.args, "dpi", low=1, high=MAX_DPI)


@bp.get("/print-plan/for-paper")
def plan_for_paper_width() -> Response:
    """Paper to grid: the tiles across that fill ``width_cm`` at ``dpi``."""
    tile_size, dpi = _common()
    width = request.args.get("width_cm")
    if width is None:
        raise ApiError(400, "missing_field", "width_cm is required: the print's width in centimetres")
    plan = plan_for_paper(_width_cm(width), dpi, tile_size)
    if plan.tiles_across > planning.MAX_TILES_ACROSS:
        raise ApiError(
            422,
            "invalid_plan",
            f"that print needs {plan.tiles_across:,} tiles across; at most "
            f"{planning.MAX_TILES_ACROSS:,} are possible: choose bigger tiles or a lower DPI",
        )
    return _answer(plan, dpi)


@bp.get("/print-plan/for-grid")
def plan_for_grid() -> Response:
    """Grid to paper: how wide ``tiles_across`` tiles of ``tile_size`` print at ``dpi``."""
    tile_size, dpi = _common()
    across = int_field(request.args, "tiles_across", low=1, high=planning.MAX_TILES_ACROSS)
    return _answer(paper_for_grid(across, tile_size, dpi), dpi)


MAX_PHOTO_SIDE = 1_000_000  # as GET /api/plan


@bp.get("/print-plan/every-photo")
def plan_every_photo() -> Response:
    """The fewest tiles across that use every photo of ``library`` once, for a photo of ``width``
    × ``height`` at ``tile_size``: what the create page's planner shows when "use every photo" is on."""
    tile_size = int_field(request.args, "tile_size", low=1, high=64)
    width = int_field(request.args, "width", low=1, high=MAX_PHOTO_SIDE)
    height = int_field(request.args, "height", low=1, high=MAX_PHOTO_SIDE)
    name = (request.args.get("library") or "").strip()
    if not name:
        raise ApiError(400, "missing_field", "library is required")
    find_library(name)  # 400 for an impossible name, 404 for one this client cannot use
    photos = library_photo_count(name)
    if photos == 0:
        raise ApiError(409, "library_not_ready", f"library {name!r} has no indexed photos yet")
    if photos < 0:
        raise ApiError(503, "storage_unavailable", f"how many photos {name!r} holds cannot be read now; try again")
    across = every_photo_tiles_across(width, height, tile_size, photos)
    if across == 0 or across > planning.MAX_TILES_ACROSS:
        raise ApiError(
            422,
            "invalid_plan",
            f"{photos:,} photos need more cells than a mosaic of this photo at {tile_size} px tiles may have: "
            "choose smaller tiles",
        )
    return jsonify({"library": name, "photos": photos, "tile_size": tile_size, "tiles_across": across})


def _answer(plan: PrintPlan, dpi: int) -> Response:
    return jsonify(
        {
            "tiles_across": plan.tiles_across,
            "tile_size": plan.tile_size,
            "dpi": dpi,
            "width_px": plan.width_px,
            "width_cm": round(plan.width_cm, 2),
            "tile_mm": round(plan.width_cm * 10 / plan.tiles_across, 1),
        }
    )
