"""A job's cells of several sizes, as the form asks for them (``mosaic.cells``).

``cell_sizes`` is one of the spec's texts ("1", "1,2", "1,4", "1,2,4"; "1" and absent are one
size), ``split`` how eagerly the grid splits into small cells (0..100, only with several
sizes). A request the spec allows that cannot be rendered is 422, as other unplannable jobs
are: a large cell is its photo at ``size × tile_size`` pixels, drawn from the library's stored
tiles (``MAX_TILE_SIZE``), and a job of several sizes is chosen part by part, so it takes
neither fair use (``max_uses``) nor "use every photo".
"""

from __future__ import annotations

from collections.abc import Mapping

from mosaic.cells import SIZES, check_tile_size
from mosaic.limits import MAX_TILE_SIZE
from webapp.errors import ApiError
from webapp.validation import optional_int_field, shown

__all__ = ["CELL_SIZES_CHOICES", "cells_fields"]

# Every rising run of the engine's sizes that starts at one size: the spec's enum, in its order.
CELL_SIZES_CHOICES = tuple(
    ",".join(map(str, (1, *rest))) for rest in ((), *((s,) for s in SIZES[1:]), tuple(SIZES[1:]))
)


def cells_fields(
    form: Mapping[str, str], *, tile_size: int, max_uses: int | None, use_every_photo: bool
) -> tuple[tuple[int, ...] | None, int | None]:
    """``(cell_sizes, split)`` for the job's message: None, None for one size. 400 for a value
    the spec does not allow, 422 for a combination that cannot be rendered."""
    raw = form.get("cell_sizes")
    split = optional_int_field(form, "split", low=0, high=100)
    if raw is not None and raw not in CELL_SIZES_CHOICES:
        choices = ", ".join(repr(c) for c in CELL_SIZES_CHOICES)
        raise ApiError(400, "invalid_field", f"cell_sizes must be one of {choices}, got {shown(raw)}")
    if raw is None or raw == "1":
        if split is not None:
            raise ApiError(422, "invalid_plan", "split says how cells of several sizes split: send cell_sizes too")
        return None, None
    sizes = tuple(int(part) for part in raw.split(","))
    if max_uses is not None or use_every_photo:
        what = "max_uses" if max_uses is not None else "use_every_photo"
        raise ApiError(
            422, "invalid_plan", f"cells of several sizes are chosen part by part: {what} needs one cell size"
        )
    try:
        check_tile_size(sizes, tile_size, MAX_TILE_SIZE)
    except ValueError as exc:
        raise ApiError(422, "invalid_plan", f"cell_sizes {raw}: {exc}") from None
    return sizes, split
