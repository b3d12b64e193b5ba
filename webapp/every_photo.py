""" "Use every photo" at the web app: how many photos a library holds, and whether a grid has room.

A job with ``use_every_photo`` needs a cell for every photo of its library, near-duplicates
counted once (``mosaic.cover``). The web app refuses a grid that is too small before anything is
stored (400, naming the smallest tiles across for the photo's aspect ratio), and the print
planner shows that smallest tiles across. Neither loads the library: a library the indexer
fills tells its photos and groups in its manifest, any other its tile count in its metadata.
The controller checks again with the loaded library.
"""

from __future__ import annotations

import logging

from mosaic.cover import CoverError, check_cover
from mosaic.grid import Grid
from webapp.errors import ApiError
from webapp.services import services
from webapp.validation import ValidImage

log = logging.getLogger(__name__)

__all__ = ["check_every_photo", "library_photo_count"]


def library_photo_count(library: str) -> int:
    """The photos the engine sees in a library: its tiles, each group of near-duplicates once (a
    library the indexer fills: its manifest's groups; 0 before its first photo is indexed); -1
    when storage does not say."""
    libraries = services().libraries
    try:
        info = libraries.info(library)
        if info is None:
            return -1
        if not info.uploads:
            return info.tile_count
        manifest, _ = libraries.indexed.read(info.key)  # its container, whatever it is called now
    except Exception:  # storage unreachable: the controller checks the loaded library
        log.warning("library %r could not be read; use_every_photo is checked by the controller", library)
        return -1
    return len(manifest.indexed()) - sum(len(group) - 1 for group in manifest.groups)


def check_every_photo(library: str, grid: Grid, photo: ValidImage) -> None:
    """400 ``too_few_cells`` naming the smallest tiles across when ``grid`` has fewer cells than
    the library has photos (or more than a use-every-photo grid may have)."""
    try:
        check_cover(
            grid.cells,
            max(library_photo_count(library), 0),
            width=photo.width,
            height=photo.height,
            tile_size=grid.tile_size,
            tiles_across=grid.tiles_across,
        )
    except CoverError as exc:
        raise ApiError(400, "too_few_cells", f"use_every_photo: {exc}") from None
