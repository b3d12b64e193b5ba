"""A giant job's processor side: its band's final pieces, staged straight onto the job's outputs.

A band planned on pyramid units (``mosaic.pieces``) is not sent back as pixels. Its
processor makes, from the rows it rendered:

- its rows of the full-size JPEG (``workers.imaging.jpeg_segments.encode_segment``), staged as
  blocks of ``imageoutput/<request_id>.jpg``;
- its pyramid tiles (every level down to where its band stops owning whole tile rows),
  encoded as ``dzsave`` encodes them and written as stored-zip local entries
  (``mosaic.stored_zip``), staged as blocks of ``imageoutput/<request_id>.dzi.zip``;
- its *reduced band* (the first level it cannot finish: ``1 / 4 ** levels`` of its pixels),
  a PNG at ``sliceresponse/<request_id>/<seq>.pieces.png`` whose text chunk is the manifest:
  the JPEG header, the ids of the staged blocks and the zip members (name, size, CRC) in order.

Staged blocks are invisible until the controller commits them (``workers.controller.assembly``); block
ids are a hash of the blob name, the band, the block's place and its bytes, so a redelivered
band (same pixels: the render is deterministic) stages the same ids with the same bytes and
writes the same manifest. Nothing here holds more than the band: the tiles are encoded one
tile row at a time and the blocks go up as they fill (a thread pool).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dal.blobs.names import output_blob_name, pieces_blob_name, pyramid_blob_name
from dal.config import IMAGE_OUTPUT_CONTAINER
from mosaic.deepzoom import encode_tile
from mosaic.pieces import Piece, band_tiles
from mosaic.stored_zip import Member, entry_bytes
from workers.imaging.jpeg_segments import encode_segment
from workers.imaging.slicing import encode_png

if TYPE_CHECKING:
    from dal.blobs.store import BlobStore
    from workers.stages import Stopwatch

__all__ = ["BLOCK_BYTES", "MANIFEST_KEY", "Manifest", "block_id", "make_pieces", "stage_all"]

BLOCK_BYTES = 4 * 1024 * 1024
MANIFEST_KEY = "photomosaics:manifest"
_UPLOADS = 4


def block_id(name: str, part: str, index: int, data: bytes) -> str:
    """A block's id: the same for the same bytes at the same place (48 hex digits, like every id of the blob)."""
    return hashlib.sha256(f"{name}|{part}|{index}|".encode() + data).hexdigest()[:48]


def stage_all(
    blobs: BlobStore, pool: ThreadPoolExecutor, container: str, name: str, part: str, chunks: Iterable[bytes]
) -> Iterator[Any]:
    """Stage ``chunks`` (re-cut into ``BLOCK_BYTES`` blocks) on ``name``; futures of the ids, in order."""
    buffer, index = bytearray(), 0

    def stage(data: bytes, at: int) -> str:
        ident = block_id(name, part, at, data)
        blobs.stage_block(container, name, ident, data)
        return ident

    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= BLOCK_BYTES:
            yield pool.submit(stage, bytes(buffer[:BLOCK_BYTES]), index)
            del buffer[:BLOCK_BYTES]
            index += 1
    if buffer or index == 0:
        yield pool.submit(stage, bytes(buffer), index)


@dataclass(frozen=True)
class Manifest:
    """What a band staged: the JPEG header and blocks, the zip blocks and members, the reduced rows."""

    index: int
    splits: tuple[int, ...]
    jpeg_header: bytes
    jpeg_blocks: list[str]
    zip_blocks: list[str]
    members: list[Member]
    reduced: np.ndarray

    def text(self) -> str:
        return json.dumps(
            {
                "index": self.index,
                "splits": list(self.splits),
                "jpeg_header": base64.b64encode(self.jpeg_header).decode(),
                "jpeg_blocks": self.jpeg_blocks,
                "zip_blocks": self.zip_blocks,
                "members": [[m.name, m.size, m.crc] for m in self.members],
            }
        )

    @classmethod
    def parse(cls, text: str, reduced: np.ndarray) -> Manifest:
        raw = json.loads(text)
        return cls(
            int(raw["index"]),
            tuple(int(s) for s in raw["splits"]),
            base64.b64decode(raw["jpeg_header"]),
            [str(b) for b in raw["jpeg_blocks"]],
            [str(b) for b in raw["zip_blocks"]],
            [Member(str(n), int(s), int(c)) for n, s, c in raw["members"]],
            reduced,
        )


def _tile_entries(
    pixels: np.ndarray, piece: Piece, first_row: int, members: list[Member], reduced: list[np.ndarray]
) -> Iterator[bytes]:
    """The band's tiles as zip local entries, encoded as they are consumed."""
    tiles, rows = band_tiles(pixels, piece, first_row=first_row)
    reduced.append(rows)
    for level, column, row, tile in tiles:
        member, entry = entry_bytes(f"mosaic_files/{level}/{column}_{row}.jpg", encode_tile(tile))
        members.append(member)
        yield entry


def make_pieces(
    blobs: BlobStore, rid: str, pixels: np.ndarray, piece: Piece, splits: tuple[int, ...], clock: Stopwatch
) -> tuple[bytes, str]:
    """Stage the band's JPEG rows and pyramid tiles; (the manifest PNG, its blob name). Laps:
    ``jpeg_segment`` (encode), ``pyramid_tiles`` (tiles encoded and staged), ``blocks_staged``."""
    first = piece.rendered.start
    jpeg_name, zip_name = output_blob_name(rid), pyramid_blob_name(rid)
    last = piece.index == len(splits) - 2
    members: list[Member] = []
    reduced: list[np.ndarray] = []
    with (
        ThreadPoolExecutor(max_workers=_UPLOADS, thread_name_prefix="stage") as pool,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment") as side,
    ):
        rows = pixels[piece.jpeg.start - first : piece.jpeg.stop - first]
        segment = side.submit(encode_segment, rows, last=last)
        zip_staged = list(
            stage_all(
                blobs,
                pool,
                IMAGE_OUTPUT_CONTAINER,
                zip_name,
                f"zip{piece.index}",
                _tile_entries(pixels, piece, first, members, reduced),
            )
        )
        clock.lap("pyramid_tiles")
        header, scan = segment.result()
        clock.lap("jpeg_segment")
        jpeg_staged = list(stage_all(blobs, pool, IMAGE_OUTPUT_CONTAINER, jpeg_name, f"jpeg{piece.index}", [scan]))
        manifest = Manifest(
            piece.index,
            splits,
            header,
            [f.result() for f in jpeg_staged],
            [f.result() for f in zip_staged],
            members,
            reduced[0],
        )
    clock.lap("blocks_staged")
    png = encode_png(manifest.reduced, text={MANIFEST_KEY: manifest.text()})
    return png, pieces_blob_name(rid, piece.index)
