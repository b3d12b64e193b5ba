"""The print planner: paper width and DPI to tiles across, and tiles across to paper width.

``GET /api/print-plan?tile_size=&dpi=&width_cm=`` answers how many tiles across fill a print
that wide at that DPI (the pixels it needs, rounded to whole tiles); with ``tiles_across=``
instead of ``width_cm`` it answers how wide that grid prints. Exactly one of the two. The
arithmetic is ``mosaic.print_planner`` (its round trip is property-tested); this module only
validates and answers. The create page's planner form uses it to set the detail slider.
"""

from __future__ import annotations

import math

from flask import Blueprint, Response, jsonify, request

from mosaic.print_planner import paper_for_grid, plan_for_paper
from webapp import planning
from webapp.errors import ApiError
from webapp.validation import int_field

bp = Blueprint("api_print", __name__, url_prefix="/api")

MAX_DPI = 2400
MAX_WIDTH_CM = 1000.0  # a 10 m banner: beyond any printer this app will meet


def _width_cm(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ApiError(400, "invalid_field", "width_cm must be a number of centimetres") from None
    if not math.isfinite(value) or not 0 < value <= MAX_WIDTH_CM:
        raise ApiError(400, "invalid_field", f"width_cm must be more than 0 and at most {MAX_WIDTH_CM:g}")
    return value


@bp.get("/print-plan")
def print_plan() -> Response:
    tile_size = int_field(request.args, "tile_size", low=1, high=64)
    dpi = int_field(request.args, "dpi", low=1, high=MAX_DPI)
    width, across = request.args.get("width_cm"), request.args.get("tiles_across")
    if (width is None) == (across is None):
        raise ApiError(400, "invalid_field", "give exactly one of width_cm (paper to grid) and tiles_across (grid to paper)")
    if width is not None:
        plan = plan_for_paper(_width_cm(width), dpi, tile_size)
        if plan.tiles_across > planning.MAX_TILES_ACROSS:
            raise ApiError(422, "invalid_plan", f"that print needs {plan.tiles_across:,} tiles across; at most "
                                                f"{planning.MAX_TILES_ACROSS:,} are possible: choose bigger tiles or a lower DPI")  # fmt: skip
    else:
        plan = paper_for_grid(int_field(request.args, "tiles_across", low=1, high=planning.MAX_TILES_ACROSS), tile_size, dpi)
    return jsonify({"tiles_across": plan.tiles_across, "tile_size": plan.tile_size, "dpi": dpi,
                    "width_px": plan.width_px, "width_cm": round(plan.width_cm, 2)})  # fmt: skip
