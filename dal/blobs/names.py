"""Every blob name a job uses, built in one place.

A job's blobs, by container (the containers are named in ``dal.config``)::

    imageinput/<request_id>.<ext>         the uploaded photo (ext from its format)
    slicerequest/<request_id>/<seq>.png   a band of the cell image, for one processor
    sliceresponse/<request_id>/<seq>.npy  a rendered slice (older processors: <seq>.png)
    sliceresponse/<request_id>/<seq>.pieces.png  a giant job's band: its reduced rows, and the
                                          manifest of the pieces it staged on the outputs
    imageoutput/<request_id>.jpg          the finished mosaic (when it fits JPEG's 65,500 px a side)
    imageoutput/<request_id>.dzi.zip      its Deep Zoom pyramid: one uncompressed zip
                                          (mosaic.dzi + mosaic_files/<level>/<col>_<row>.jpg)
    sliceresponse/<request_id>/<seq>.tiles.gz  which library tile is in which cell of a band
    imageoutput/<request_id>.tiles.gz     the same for the whole mosaic (``dal.blobs.tile_maps``)

Here in ``dal`` because every layer reads or writes these names (the web app, the controller,
the processors, cleanup, tests); a name built anywhere else is a second copy of a fact that
must agree with this one.
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "BAND_EXTENSION",
    "OUTPUT_EXTENSION",
    "PYRAMID_ROOT",
    "RENDERED_EXTENSION",
    "ascii_fold",
    "band_blob_name",
    "input_blob_name",
    "job_file_prefix",
    "job_folder_prefix",
    "output_blob_name",
    "pieces_blob_name",
    "pyramid_blob_name",
    "slice_blob_candidates",
    "slice_output_name",
    "slice_tile_map_name",
    "tile_map_name",
]

BAND_EXTENSION = "png"
RENDERED_EXTENSION = "npy"
OUTPUT_EXTENSION = "jpg"
PYRAMID_EXTENSION = "dzi.zip"
TILE_MAP_EXTENSION = "tiles.gz"
PYRAMID_ROOT = "mosaic"  # inside the zip: mosaic.dzi and mosaic_files/
_LEGACY_RENDERED_EXTENSION = "png"


def ascii_fold(text: str) -> str:
    """``text`` in ASCII: accents dropped (``café`` -> ``cafe``), characters with no ASCII form
    left out. An uploaded photo's staged name is written so (``dal.blobs.staging.safe_photo_name``)
    and searched so (``dal.blobs.tile_maps.search_key``)."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()


def input_blob_name(request_id: str, extension: str) -> str:
    """The ``imageinput`` blob of a job's uploaded photo (``extension`` without the dot)."""
    return f"{request_id}.{extension}"


def band_blob_name(request_id: str, sequence: int) -> str:
    """The ``slicerequest`` blob of band ``sequence`` of a job."""
    return f"{request_id}/{sequence}.{BAND_EXTENSION}"


def slice_output_name(request_id: str, sequence: int, extension: str = RENDERED_EXTENSION) -> str:
    """The ``sliceresponse`` blob of a rendered slice; ``extension="png"`` for older processors'."""
    return f"{request_id}/{sequence}.{extension}"


def slice_blob_candidates(request_id: str, sequence: int) -> tuple[str, str]:
    """Where a rendered slice may be, newest format first."""
    return slice_output_name(request_id, sequence), slice_output_name(request_id, sequence, _LEGACY_RENDERED_EXTENSION)


def pieces_blob_name(request_id: str, sequence: int) -> str:
    """The ``sliceresponse`` blob of a giant band's reduced rows and manifest (``workers.imaging.band_pieces``)."""
    return f"{request_id}/{sequence}.pieces.png"


def output_blob_name(request_id: str) -> str:
    """The ``imageoutput`` blob of a job's finished mosaic."""
    return f"{request_id}.{OUTPUT_EXTENSION}"


def pyramid_blob_name(request_id: str) -> str:
    """The ``imageoutput`` blob of a job's Deep Zoom pyramid (a zip; ``dal.blobs.pyramid`` reads it)."""
    return f"{request_id}.{PYRAMID_EXTENSION}"


def slice_tile_map_name(request_id: str, sequence: int) -> str:
    """The ``sliceresponse`` blob of the tile map of band ``sequence`` (``dal.blobs.tile_maps``)."""
    return f"{request_id}/{sequence}.{TILE_MAP_EXTENSION}"


def tile_map_name(request_id: str) -> str:
    """The ``imageoutput`` blob of a job's tile map: which library photo is in which cell."""
    return f"{request_id}.{TILE_MAP_EXTENSION}"


def job_file_prefix(request_id: str) -> str:
    """The prefix of a job's one-blob-per-job names (``imageinput``, ``imageoutput``)."""
    return f"{request_id}."


def job_folder_prefix(request_id: str) -> str:
    """The prefix of a job's many-blobs names (``slicerequest``, ``sliceresponse``)."""
    return f"{request_id}/"
