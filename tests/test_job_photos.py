"""The photo table of a mosaic (``webapp.job_photos``): use counts, order and each reason, in memory."""

from __future__ import annotations

import threading

import numpy as np

from dal.blobs.tile_maps import TileMap
from webapp.job_photos import LibraryPhotos, PhotoTable, TableCache

NAMES = ("a.jpg", "b.jpg", "c.jpg", "d.jpg", "e.jpg")
BLOBS = tuple(f"tiles/{n}" for n in NAMES)


def table(choice: list[list[int]], library: LibraryPhotos | None, *, version: str = "v1") -> PhotoTable:
    tile_map = TileMap.from_choice(np.array(choice), names=NAMES, blobs=BLOBS, library="pets", library_version=version)
    return PhotoTable.build(tile_map, library)


def library(names: tuple[str, ...] = NAMES, **extra: object) -> LibraryPhotos:
    return LibraryPhotos(version="v1", names=names, blobs=tuple(f"tiles/{n}" for n in names), **extra)  # type: ignore[arg-type]


def test_a_grid_smaller_than_the_library_says_so_and_uses_sort_with_ties_by_name() -> None:
    photos = table([[1, 1, 6]], library())  # b twice (once mirrored: 6 = 5 + 1), in 3 cells for 5 photos
    assert [(r.name, r.uses) for r in photos.select(sort="most_used")][:2] == [("b.jpg", 3), ("a.jpg", 0)]
    assert [r.name for r in photos.select(sort="least_used")][-1] == "b.jpg"
    reasons = {r.name: r.reason for r in photos.select(show="left_out")}
    assert set(reasons) == {"a.jpg", "c.jpg", "d.jpg", "e.jpg"}
    assert (
        reasons["a.jpg"]
        == "not in any cell: the mosaic has 3 cells for 5 photos, and other photos matched the colours better"
    )
    assert photos.changed is False and photos.used == 1


def test_groups_skipped_photos_removed_photos_and_a_changed_library() -> None:
    grouped = library(("a.jpg", "c.jpg", "d.jpg", "e.jpg", "f.jpg"), groups=(("c.jpg", "d.jpg", "e.jpg"),))
    grouped = LibraryPhotos(
        version="v2",
        names=grouped.names,
        blobs=grouped.blobs,
        groups=grouped.groups,
        skipped=(("x.heic", "cut short"),),
    )
    photos = table([[2, 3, 3, 1, 0, 0, 0, 0]], grouped)  # c once, d twice, b (removed since), a four times
    rows = {r.name: r for r in photos.rows}
    assert rows["e.jpg"].reason == "its near-duplicate group's photo d.jpg was used" and rows["e.jpg"].group_size == 3
    assert rows["x.heic"].reason == "not indexed: cut short" and rows["x.heic"].blob is None
    assert rows["b.jpg"].uses == 1 and not rows["b.jpg"].in_library and rows["b.jpg"].blob == "tiles/b.jpg"
    assert photos.changed is True  # the map says v1, the library is v2
    assert str(rows["f.jpg"].reason).startswith("not in any cell: the library has changed since this mosaic was made")
    assert [r.name for r in photos.select(search="C.J")] == ["c.jpg"]
    # the library gone: only the photos the map names, none of them in it
    gone = table([[0, 1]], None)
    assert [(r.name, r.in_library) for r in gone.rows] == [("a.jpg", False), ("b.jpg", False)] and gone.changed is None


def test_the_cache_makes_each_table_once_however_many_ask_and_keeps_a_few() -> None:
    cache = TableCache(kept=2)
    made = table([[0]], library())
    started = threading.Barrier(8)

    def ask() -> None:
        started.wait()
        cache.get(("job", "v1"), lambda: made)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.made == 1
    cache.get(("job2", "v1"), lambda: made)
    cache.get(("job3", "v1"), lambda: made)
    cache.get(("job", "v1"), lambda: made)  # pushed out by the two after it: made again
    assert cache.made == 4
