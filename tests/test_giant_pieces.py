"""Giant bands make final pieces: the processors stage JPEG rows and pyramid tiles, the
controller only assembles, and the outputs are byte for byte what one process writes.

Real handlers on real queues and a real Azurite (``tests/test_controller.py``'s way), on a
mosaic just tall enough for pyramid units (``mosaic.pieces``): a few megapixels. The 400 MP
and 1 GP jobs are ``make bench`` (``benchmarks/giant.py``).
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from PIL import Image

from dal.blobs.names import pieces_blob_name, pyramid_blob_name, slice_output_name
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.queues.messages import SliceResponseMessage
from mosaic.deepzoom import write_dzi_zip
from mosaic.grid import Grid, plan_grid
from mosaic.images import open_image
from mosaic.pieces import job_plan
from mosaic.render import placed_tiles, render_with_placement
from tests.support.pipelines import Pipeline, sample_photo
from tests.test_controller import controller, receive_all
from workers.controller.assembly import Stitcher
from workers.imaging.slicing import BandFormatError, cut_bands, decode_band, encode_band, encode_output
from workers.imaging.stitching import from_pixels
from workers.processor.processor import ImageProcessor
from workers.services import RoleServices
from workers.stages import Stopwatch

pytestmark = pytest.mark.timeout(240)
TILE, ACROSS = 8, 100  # 800 x 3120 px: three pyramid units of 1,020 rows (mosaic.parts)


def _zip_files(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
        return {i.filename: archive.read(i) for i in archive.infolist() if i.filename.endswith((".jpg", ".dzi"))}


def _whole_render(pipe: Pipeline, rid: str, photo: bytes) -> tuple[np.ndarray, np.ndarray]:
    """What ``photomosaics render`` renders for the job, and its placement: the offline path, one band."""
    image = open_image(photo)
    grid = plan_grid(image.width, image.height, tile_size=TILE, tiles_across=ACROSS)
    plan = job_plan(grid, 3)
    assert plan is not None and plan.bands == 3
    library = pipe.services.libraries.load(pipe.library_uri)
    return render_with_placement(image, library, tile_size=TILE, tiles_across=ACROSS, seed=rid, slices=1)


def test_giant_bands_are_assembled_into_the_outputs_one_process_writes(pipe: Pipeline) -> None:
    photo = sample_photo(50, 195, seed=4)
    rid = pipe.submit(photo, library_uri=pipe.library_uri, tile_size=TILE, slices=3, tiles_across=ACROSS)
    ctl = controller(pipe)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    ctl.handle_image_request(request)
    job = pipe.job(rid)
    assert job is not None and job.slices == 3 and (job.output_width, job.output_height) == (800, 3120)

    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    requests = receive_all(pipe.services.queues.slice_request, 3)
    for received in requests:
        processor.handle_slice_request(received)
    blobs = pipe.services.blobs
    # Staged, not committed: nobody sees an output before the stitch.
    assert not blobs.exists(IMAGE_OUTPUT_CONTAINER, f"{rid}.jpg") and not blobs.exists(
        IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid)
    )
    assert not any(blobs.exists(SLICE_RESPONSE_CONTAINER, slice_output_name(rid, s)) for s in range(3)), (
        "no raw pixels move"
    )
    manifests = [blobs.download(SLICE_RESPONSE_CONTAINER, pieces_blob_name(rid, s)) for s in range(3)]

    # A redelivered band stages the same blocks and writes the same manifest.
    processor.handle_slice_request(requests[1])
    assert blobs.download(SLICE_RESPONSE_CONTAINER, pieces_blob_name(rid, 1)) == manifests[1]

    for received in receive_all(pipe.services.queues.slice_response, 4):
        ctl.handle_slice_response(received)
    job = pipe.job(rid)
    assert job is not None and job.status == "done" and job.output_name == f"{rid}.jpg"

    mosaic, choice = _whole_render(pipe, rid, photo)
    # The bands share a few cell rows; their tile maps join into the placement of the whole, once each.
    library = pipe.services.libraries.load(pipe.library_uri)
    which, mirrored = placed_tiles(choice, library)
    tile_map = pipe.tile_map(job)
    assert [tile_map.tiles[v >> 1][0] for v in tile_map.cells.ravel().tolist()] == [
        library.names[w] for w in which.ravel()
    ]
    assert np.array_equal(tile_map.cells & 1, mirrored)
    jpeg = pipe.output_bytes(job)
    assert jpeg == encode_output(mosaic), "the assembled JPEG is the single encode, byte for byte"
    with Image.open(io.BytesIO(jpeg)) as decoded:
        assert decoded.size == (800, 3120)
    expected = bytearray()
    write_dzi_zip(from_pixels(mosaic), expected.extend)
    pyramid = blobs.download(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid))
    assert _zip_files(pyramid) == _zip_files(bytes(expected)), "every tile and the descriptor as dzsave writes them"

    # The stitch run again (a stitcher that died after its commits) commits the same bytes.
    Stitcher(RoleServices(pipe.services.storage, pipe.settings, "ctl-b")).stitch(job, _last(pipe, rid), Stopwatch())
    assert pipe.output_bytes(job) == jpeg and blobs.download(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid)) == pyramid


def _last(pipe: Pipeline, rid: str) -> SliceResponseMessage:
    """The last band's response, as the stitcher's message carried it."""
    queue = pipe.services.queues.slice_response
    return SliceResponseMessage(
        queue_uri=queue.url,
        client_id="c",
        request_id=rid,
        slice_sequence=2,
        slice_uri=pipe.services.blobs.blob_url(SLICE_RESPONSE_CONTAINER, pieces_blob_name(rid, 2)),
    )


def test_a_band_whose_piece_plan_does_not_match_its_rows_is_refused() -> None:
    grid = Grid(100, 390, 800, 3120, 8)
    plan = job_plan(grid, 3)
    assert plan is not None
    cells = np.zeros((grid.tiles_down * 4, grid.tiles_across * 4, 3), np.uint8)
    rows = [p.cells for p in plan.pieces()]
    bands = cut_bands(cells, tiles_down=grid.tiles_down, tiles_across=grid.tiles_across, rows=rows, plan=plan)
    assert decode_band(encode_band(bands[1])).piece == plan.piece(1)
    shifted = cut_bands(
        cells,
        tiles_down=grid.tiles_down,
        tiles_across=grid.tiles_across,
        rows=[range(r.start + 1, r.stop) for r in rows],
        plan=plan,
    )
    with pytest.raises(BandFormatError, match="piece plan does not match"):
        decode_band(encode_band(shifted[1]))
