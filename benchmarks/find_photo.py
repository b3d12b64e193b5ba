"""Find your photo among thousands: what ``GET /api/jobs/<id>/photos`` costs the web process.

A person's library of 5,000 photos (a tenth of them in near-duplicate groups of three, 200 the
indexer skipped) and a 12 MP mosaic of 8 px tiles (500 × 380 = 190,000 cells) placing 3,500 of
them. Figures, each beside its goal:

- building the job's table (``webapp.job_photos.PhotoTable.build``: the tile map's use counts
  joined with the library's photos and every left-out photo's reason), once per job and library
  version: goal ≤ 1 s;
- one page of 48 from the built table, median over the API's questions (by name, by use, the
  left-out photos, a search): goal ≤ 20 ms;
- the table's memory, kept per job in an LRU of 32: goal ≤ 8 MB.

Pure Python in one process: the storage reads (one tile-map blob, one manifest) are the same
few requests as before and are not timed here.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc

import numpy as np

from dal.blobs.tile_maps import TileMap
from webapp.job_photos import LibraryPhotos, PhotoTable

PHOTOS = 5_000
USED = 3_500
GRID = (380, 500)
PAGE = 48
QUESTIONS = [
    {"show": "all", "sort": "name", "search": ""},
    {"show": "all", "sort": "most_used", "search": ""},
    {"show": "left_out", "sort": "name", "search": ""},
    {"show": "used", "sort": "least_used", "search": "img_1"},
]


def _library() -> tuple[LibraryPhotos, TileMap]:
    names = tuple(f"IMG_{i:05d}.jpg" for i in range(PHOTOS))
    groups = tuple(tuple(names[i : i + 3]) for i in range(0, PHOTOS // 10, 3))
    library = LibraryPhotos(
        version="v1",
        names=names,
        blobs=tuple(f"tiles/{n}.jpg" for n in names),
        skipped=tuple((f"broken-{i}.heic", "not an image Pillow can read") for i in range(200)),
        groups=groups,
    )
    rng = np.random.default_rng(41)
    used = rng.choice(PHOTOS, USED, replace=False)
    choice = used[rng.integers(0, USED, GRID)] + PHOTOS * rng.integers(0, 2, GRID)
    tile_map = TileMap.from_choice(choice, names=names, blobs=library.blobs, library="family", library_version="v1")
    return library, tile_map


def main() -> int:
    library, tile_map = _library()
    builds = []
    for _ in range(3):
        start = time.perf_counter()
        table = PhotoTable.build(tile_map, library)
        builds.append(time.perf_counter() - start)
    pages = []
    for _ in range(5):
        for question in QUESTIONS:
            start = time.perf_counter()
            table.select(**question)[:PAGE]
            pages.append(time.perf_counter() - start)
    tracemalloc.start()
    kept = PhotoTable.build(tile_map, library)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    build, page = min(builds), statistics.median(pages)
    print(
        f"library {PHOTOS:,} photos ({len(library.groups)} groups of 3, 200 skipped), mosaic {GRID[1]} x {GRID[0]} cells"
    )
    print(f"  used {kept.used:,}, left out {len(kept.rows) - kept.used:,}")
    print(f"  table built once per job and version: {build * 1000:.0f} ms (goal <= 1000 ms)")
    print(f"  one page of {PAGE} from the table, median of {len(pages)}: {page * 1000:.1f} ms (goal <= 20 ms)")
    print(f"  the table's memory: {size / 2**20:.1f} MB (goal <= 8 MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
