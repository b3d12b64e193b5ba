"""The engine's errors, rooted in the project's one base error.

The engine depends on nothing else of the project, so the root of the project's exception
tree lives here, at the bottom layer; ``dal.errors`` re-exports it and draws the whole tree.

    PhotoMosaicsError
     └── MosaicError            anything the engine refuses
          ├── ImageDecodeError   bytes that are not an image we can read
          ├── LibraryFormatError a library index that is not one
          ├── NoUsableImageError a would-be library source without a single usable image
          ├── TileSourceError    a would-be library source that cannot be read at all
          └── TileBudgetError    max_uses × library size < cells: no fair assignment
"""

from __future__ import annotations

__all__ = [
    "PhotoMosaicsError", "MosaicError", "ImageDecodeError", "LibraryFormatError", "NoUsableImageError",
    "TileSourceError", "TileBudgetError",
]


class PhotoMosaicsError(Exception):
    """Root of every error this project raises on purpose."""


class MosaicError(PhotoMosaicsError):
    """Root of the errors the mosaic engine raises."""


class ImageDecodeError(MosaicError):
    """The bytes are not an image we can read: corrupt, truncated, unknown or too large."""


class LibraryFormatError(MosaicError, ValueError):
    """The bytes are not a tile-library index this version can read."""


class TileSourceError(MosaicError, ValueError):
    """The source of a tile library cannot be read at all (missing, not a folder or zip)."""


class NoUsableImageError(MosaicError, ValueError):
    """A would-be library source holds no image the engine can use (every file was skipped)."""


class TileBudgetError(MosaicError, ValueError):
    """``max_uses`` × library size is smaller than the number of cells: no fair assignment exists."""
