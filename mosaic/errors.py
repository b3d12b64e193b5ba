"""The project's exception tree: drawn once, here, where its root lives.

The engine depends on nothing else of the project, so the root of every error the project
raises on purpose lives in this bottom layer; each layer adds its branch in its own module
(shown on the right). ``tests/test_errors.py`` checks that every exception class of the
project is rooted here and named in this drawing.

    PhotoMosaicsError                         the root: every error we raise on purpose
     ├── MosaicError                          mosaic.errors — anything the engine refuses
     │    ├── ImageDecodeError                bytes that are not an image we can read
     │    │    ├── UnknownImageFormat         none of the formats the caller accepts
     │    │    ├── ImageStructureError        mosaic.image_structure — opening it would cost too much
     │    │    └── PhotoRefused               mosaic.photo_index — a library photo not indexed (the reason)
     │    ├── LibraryFormatError (ValueError) a library index that is not one
     │    ├── TileSourceError (ValueError)    a would-be library source that cannot be read at all
     │    │    └── SourceLimitError           one over a limit (bytes unpacked, files, pixels)
     │    ├── NoUsableImageError (ValueError) a would-be library source without one usable image
     │    └── TileBudgetError (ValueError)    max_uses x library size < cells: no fair assignment
     │         └── CoverError                 mosaic.cover — too few cells to use every photo once
     ├── SettingsError (ValueError)           dal.config — a setting out of its type or range
     ├── StorageConfigurationError            dal.errors — wrong key, unknown account, unreachable
     ├── QueueMessageFormatException          dal.errors — a payload that is not a valid message
     ├── ClaimCheckMissingError               dal.errors — a claim-check blob that is gone
     │    └── ClaimCheckRefusedError          a reference to a container other than queuepayloads
     ├── BlobMissingError (LookupError)       dal.errors — a blob or container that should exist
     │    └── BlobChangedError                the version asked for (by ETag) was replaced
     ├── LibraryError                         dal.errors — a tile library refused or not found
     │    ├── InvalidLibraryNameError (ValueError)
     │    ├── LibraryNotFoundError (LookupError)
     │    ├── EmptyLibraryError (ValueError)
     │    └── LibraryExistsError              the name is taken (or being created)
     ├── JobNotFoundError (LookupError)       dal.errors
     ├── JobExistsError                       dal.errors
     ├── JobUpdateConflictError               dal.errors — lost the ETag race too many times
     ├── QuotaExceeded                        dal.errors — a client over its quota (HTTP 429)
     ├── ServiceBusy                          dal.errors — more queued work than the wait allows (HTTP 503)
     ├── AzuriteError (RuntimeError)          photomosaics.local.azurite — the emulator missing or not answering
     ├── NodeRuntimeError (RuntimeError)      photomosaics.local.node_runtime — no usable Node.js for Azurite
     ├── WorkerError                          workers.errors — how a handler ends a message
     │    ├── PermanentJobError               poison now, the job fails
     │    └── RetryLater                      release after a delay, no error logged
     ├── BandFormatError (ValueError)         workers.slicing — a band blob we did not write
     ├── RenderedFormatError (ValueError)     dal.errors — a rendered slice neither .npy nor PNG
     ├── TileMapFormatError (ValueError)      dal.errors — a stored tile map that is not one
     ├── DemoPhotosMissing (RuntimeError)     workers.demo_library — scikit-image/-learn missing
     └── ApiError                             webapp.errors — answered to the client as JSON

Outside the tree on purpose: ``dal.errors.StorageUnavailable`` is an alias of Azure's own
``azure.core.exceptions.AzureError`` (the service down after the SDK's retries, not something
we refused), named there so that no module outside ``dal/`` imports Azure's types.
"""

from __future__ import annotations

__all__ = [
    "ImageDecodeError",
    "LibraryFormatError",
    "MosaicError",
    "NoUsableImageError",
    "PhotoMosaicsError",
    "SourceLimitError",
    "TileBudgetError",
    "TileSourceError",
    "UnknownImageFormat",
]


class PhotoMosaicsError(Exception):
    """Root of every error this project raises on purpose."""


class MosaicError(PhotoMosaicsError):
    """Root of the errors the mosaic engine raises."""


class ImageDecodeError(MosaicError):
    """The bytes are not an image we can read: corrupt, truncated, unknown or too large."""


class UnknownImageFormat(ImageDecodeError):
    """The bytes are in none of the formats the caller accepts (``str()`` names them)."""


class LibraryFormatError(MosaicError, ValueError):
    """The bytes are not a tile-library index this version can read."""


class TileSourceError(MosaicError, ValueError):
    """The source of a tile library cannot be read at all (missing, not a folder or zip)."""


class SourceLimitError(TileSourceError):
    """A library source over one of its limits: bytes unpacked, files, or pixels (``SourceLimits``)."""


class NoUsableImageError(MosaicError, ValueError):
    """A would-be library source holds no image the engine can use (every file was skipped)."""


class TileBudgetError(MosaicError, ValueError):
    """``max_uses`` × library size is smaller than the number of cells: no fair assignment exists."""
