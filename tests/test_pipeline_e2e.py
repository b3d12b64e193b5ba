"""End to end through real role processes: every job's mosaic equals the in-process render.

3 pictures × slices {1, 3, 7} × tile sizes {8, 16} = 18 jobs, submitted at once to one
controller, two processors and a responder. Pixel identity is checked twice, honestly:

- the rendered slices (lossless PNGs) stacked are *exactly* ``mosaic.render`` of the
  same job — the distributed render is the in-process render;
- the delivered JPEG decodes to exactly the same pixels as the in-process render put through
  the same encoder (``workers.imaging.slicing.encode_output``): the stitch adds, drops or moves nothing.

And the job's tile map (which library photo is in which cell, stored by the processors) is
exactly the placement behind the in-process render.
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
from PIL import Image

from mosaic.grid import Grid
from mosaic.images import open_image
from mosaic.library import TileLibrary
from mosaic.options import RenderOptions
from mosaic.parts import plan_parts, unit_lattice
from mosaic.pieces import job_plan
from mosaic.render import placed_tiles, render_with_placement
from mosaic.sized import cell_sizes
from tests.support.pipelines import Pipeline, sample_photo
from tests.support.sliceable import PLAIN_TILE, plain_photo
from tests.support.waiting import wait_for
from workers.imaging.slicing import encode_output

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def rotated_jpeg(width: int, height: int, *, seed: int) -> bytes:
    """A JPEG stored sideways with EXIF orientation 6, as phones write portrait photos."""
    with Image.open(io.BytesIO(sample_photo(width, height, seed=seed))) as image:
        exif = Image.Exif()
        exif[0x0112] = 6
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=92, exif=exif)
        return out.getvalue()


def test_eighteen_jobs_through_real_processes_are_the_offline_renders_bytes(pipe: Pipeline) -> None:
    """Any slicing, through real processes, gives the bytes of the offline render in one band
    (``mosaic.parts``): plain bands stitched (tile 4), a giant job's pieces assembled (tile 8), and
    a grid of one part."""
    pipe.start("controller")
    pipe.start("processor")
    pipe.start("processor")
    pipe.start("responder")
    pictures = {
        "tall png": sample_photo(12, 148, seed=1),  # 3 plain parts at tile 4, 2 pyramid units at tile 8
        "portrait png": sample_photo(30, 44, seed=2),  # one part
        "sideways jpeg": rotated_jpeg(148, 12, seed=3),  # upright 12 x 148
    }
    jobs = {}
    for (label, image), slices, tile in itertools.product(pictures.items(), (1, 3, 7), (4, 8)):
        ext = "jpg" if label.endswith("jpeg") else "png"
        rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=tile, slices=slices, ext=ext)
        jobs[rid] = (label, image, slices, tile)

    finished = pipe.wait(jobs, timeout=180)

    library = pipe.services.libraries.load(pipe.library_uri)
    for rid, (label, image, slices, tile) in jobs.items():
        job = finished[rid]
        what = f"{label}, {slices} slices, tile {tile}"
        assert job.status == "done", f"{what}: {job.status} {job.error}"
        expected, choice = render_with_placement(
            open_image(image), library, tile_size=tile, seed=rid, max_output_pixels=pipe.settings.max_output_pixels
        )
        grid = Grid(job.tiles_across, job.tiles_down, job.output_width, job.output_height, tile)
        plan = job_plan(grid, slices)
        assert job.slices == (plan.bands if plan is not None else min(slices, plan_parts(grid).count)), what
        which, mirrored = placed_tiles(choice, library)
        tile_map = pipe.tile_map(job)
        reported = [tile_map.tiles[v >> 1][0] for v in tile_map.cells.ravel().tolist()]
        assert reported == [library.names[w] for w in which.ravel()], f"{what}: tile map"
        assert np.array_equal(tile_map.cells & 1, mirrored), f"{what}: mirrored"
        assert (job.output_height, job.output_width) == expected.shape[:2]
        if job.slices > 1 and plan is None:  # lossless plain slices, stitched
            assert np.array_equal(pipe.slice_outputs(job), expected), what
        assert pipe.output_bytes(job) == encode_output(expected), f"{what}: output differs"
        kinds = [e.kind for e in pipe.services.jobs.events(rid)]
        assert kinds.count("stitched") == 1 and kinds.count("done") == 1
        assert kinds.count("dispatched") == job.slices
    assert {j.slices for j in finished.values()} >= {1, 2, 3}, "one-slice, piece and plain jobs"
    # The portrait stayed portrait, and the EXIF-rotated JPEG was turned upright (32x44 after rotation).
    shapes = {jobs[rid][0]: (j.tiles_across, j.tiles_down) for rid, j in finished.items() if jobs[rid][3] == 8}
    assert shapes["portrait png"] == (30, 44) and shapes["sideways jpeg"] == (12, 148)

    # A job is done before its ImageResponse is consumed (the controller marks it done): every
    # queue is empty a moment later.
    wait_for(
        lambda: not any(pipe.queue_depths().values()),
        seconds=20,
        what="every queue empty",
        details=lambda: str(pipe.queue_depths()),
    )
    codes = [role.stop() for role in pipe.roles]
    assert codes == [0, 0, 0, 0], f"SIGTERM must end every role with exit 0\n{pipe.logs()}"


def calm_and_busy_bands(library: TileLibrary, width: int, height: int, *, band: int = 64) -> bytes:
    """Bands of the library's flat photos' colours (calm: large cells fit them) between bands of
    noise (detail: small cells), as a PNG."""
    rng = np.random.default_rng(11)
    flat = [i for i in range(len(library)) if np.ptp(library.tiles(8)[i], axis=(0, 1)).max() == 0]
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    for k, top in enumerate(range(0, height, 2 * band)):
        pixels[top : top + band] = library.tiles(8)[flat[k % len(flat)]][0, 0]
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def test_cells_of_several_sizes_through_real_processes_are_the_offline_renders_bytes(pipe: Pipeline) -> None:
    """A job of cells of 1, 2 and 4 tiles, in one slice or seven (plain bands of whole parts,
    each starting on a multiple of 4 rows, on a grid with Deep Zoom units too), gives the bytes
    of the offline render, and its tile map says each cell's size."""
    pipe.start("controller")
    pipe.start("processor")
    pipe.start("processor")
    pipe.start("responder")
    library = pipe.services.libraries.load(pipe.library_uri)
    image = calm_and_busy_bands(library, 128, 1184)
    jobs = {}
    for slices, tile, sizes in ((1, 8, (1, 2, 4)), (7, 8, (1, 2, 4)), (4, 16, (1, 2))):
        rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=tile, slices=slices, cell_sizes=sizes)
        jobs[rid] = (slices, tile, sizes)
    finished = pipe.wait(jobs, timeout=180)
    for rid, (slices, tile, sizes) in jobs.items():
        job, what = finished[rid], f"{slices} slices, tile {tile}, cells {sizes}"
        assert job.status == "done", f"{what}: {job.status} {job.error}"
        options = RenderOptions(cell_sizes=sizes)
        expected, choice = render_with_placement(
            open_image(image), library, tile_size=tile, seed=rid, options=options,
            max_output_pixels=pipe.settings.max_output_pixels,
        )  # fmt: skip
        grid = Grid(job.tiles_across, job.tiles_down, job.output_width, job.output_height, tile)
        bands = plan_parts(grid, align=sizes[-1]).bands(slices)
        assert job.slices == len(bands) and all(band.start % sizes[-1] == 0 for band in bands), what
        assert pipe.output_bytes(job) == encode_output(expected), f"{what}: output differs"
        tile_map = pipe.tile_map(job)
        planned = cell_sizes(open_image(image), grid, options, choice)
        assert tile_map.sizes is not None and np.array_equal(tile_map.sizes, planned), f"{what}: cell sizes"
        assert (planned == sizes[-1]).any() and (planned == 1).any(), f"{what}: large and small cells both"
        which, _ = placed_tiles(choice, library)
        reported = [tile_map.tiles[v >> 1][0] for v in tile_map.cells.ravel().tolist()]
        assert reported == [library.names[w] for w in which.ravel()], f"{what}: tile map"
    assert min(j.slices for j in finished.values()) == 1 and max(j.slices for j in finished.values()) >= 3
    assert unit_lattice(Grid(16, 148, 128, 1184, 8)) is not None  # parts cut at units, widened to 4 rows


def test_burst_runs_drain_their_queues_and_exit_zero(pipe: Pipeline) -> None:
    """Each role run with --burst in turn moves the job one stage on, then exits 0 by itself."""
    image = plain_photo(2, seed=11)  # two plain bands (mosaic.parts)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)
    # The controller's stitch marks the job done; the responder's burst drains its response.
    stages = [("controller", "rendering"), ("processor", "rendering"), ("controller", "done"), ("responder", "done")]
    for role, status in stages:
        process = pipe.start(role, "--burst")
        assert process.wait(timeout=60) == 0, pipe.logs()
        job = pipe.job(rid)
        assert job is not None and job.status == status, (role, job)
    job = pipe.job(rid)
    assert job is not None and job.slices_done == frozenset({0, 1}) and job.output_name == f"{rid}.jpg"
    assert all(depth == 0 for depth in pipe.queue_depths().values())
