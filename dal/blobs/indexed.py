"""A library the indexer fills: immutable segments of tiles and one manifest, its published version.

A library made for uploads (``LibraryStore.open_for_uploads``) has no ``index.zip``. Each
IndexRequest the indexer handles writes one **segment**, ``segments/<request_id>.zip``: the
``TileLibrary.to_bytes()`` of that batch's tiles (the same bytes again when the batch is
redelivered), then merges the batch's per-photo **outcomes** (indexed with its hash and segment,
or skipped with the reason) into ``manifest.json`` with one read and one conditional write
(``If-Match``; a writer that lost the race re-reads and merges again). The manifest is the
published version: its ``version`` is a hash of the indexed photos and their segments, and the
near-duplicate groups are computed there from the photos' perceptual hashes. Publishing a batch
costs three transactions besides the photos' own (segment, manifest read, manifest write): no
per-photo row anywhere, and the API reads progress and every photo's outcome from one blob.

``LibraryStore.publish`` writes the version, tile count and samples into the container's
metadata after each merge. ``LibraryStore.load`` falls back to ``compose`` when a library has no ``index.zip``: the tiles
of every segment the manifest names, sorted by photo name, so the library (and its version) is
the same whatever order batches finished in. Segments are immutable, so a process caches them
by name and a new version costs only the segments it has not seen.

Photos also leave (``remove``: a tombstone per photo, which a late index of the same photo cannot
undo; ``revive`` forgets it when the photo is uploaded again). A job renders with the version it
started with: ``pin`` keeps the current manifest as ``versions/<version>.json``, never changed
after, and ``read_version`` + ``compose`` give that library back however the manifest moved on.
A segment no indexed photo names any more is *retired* (with the time) rather than deleted;
``collect`` deletes version files and retired segments older than ``VERSION_RETENTION_SECONDS``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.storage.blob import ContentSettings

from dal.errors import LibraryNotFoundError
from mosaic.library import TileLibrary

__all__ = [
    "MANIFEST_BLOB",
    "SEGMENT_PREFIX",
    "VERSION_PREFIX",
    "IndexedLibraries",
    "Manifest",
    "PhotoOutcome",
    "group_photos",
]

MANIFEST_BLOB = "manifest.json"
SEGMENT_PREFIX = "segments/"
VERSION_PREFIX = "versions/"  # versions/<version>.json: a published manifest a job pinned, immutable
FORMAT = "photomosaics-library-manifest"
GROUP_DISTANCE = 10  # Hamming distance of two 64-bit hashes within which photos are one group
# ... and how close their mean colours must be (ΔE76): a burst's shots differ by a few units,
# while flat or plain photos, whose layout hashes are all alike, differ by their colour.
GROUP_COLOUR_DISTANCE = 12.0
_ATTEMPTS = 30
# How long a job can render with the version it started with after the library changed: pinned
# versions and retired segments are collected (``collect``) once this much older. Longer than a
# queued job can wait (a queue message lives 7 days).
VERSION_RETENTION_SECONDS = 8 * 24 * 3600


@dataclass(frozen=True)
class PhotoOutcome:
    name: str  # the staged name
    state: str  # "indexed", "skipped", or "removed" (by its owner: a tombstone a late index cannot undo)
    size: int  # the staged blob's size when it was indexed (a re-upload of another size is indexed again)
    reason: str = ""  # why it was skipped
    hash: str = ""  # 22 hex digits: the layout hash and mean colour (mosaic.photo_index.perceptual_hash)
    segment: str = ""  # the segment blob holding its tile


@dataclass
class Manifest:
    version: str
    photos: dict[str, PhotoOutcome]
    groups: list[list[str]]
    # Segments no indexed photo names any more -> when that began (ISO 8601): older versions may
    # still need them, so they are deleted only after the retention (``dal.blobs.library_versions``).
    retired: dict[str, str] = field(default_factory=dict)

    def indexed(self) -> list[str]:
        return sorted(n for n, p in self.photos.items() if p.state == "indexed")

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "version": self.version,
            "photos": [asdict(self.photos[n]) for n in sorted(self.photos)],
            "groups": self.groups,
            **({"retired": dict(sorted(self.retired.items()))} if self.retired else {}),
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        if body.get("format") != FORMAT:
            raise ValueError("not a library manifest")
        photos = {p["name"]: PhotoOutcome(**p) for p in body["photos"]}
        retired = {str(k): str(v) for k, v in body.get("retired", {}).items()}
        return cls(
            version=str(body["version"]), photos=photos, groups=[list(g) for g in body["groups"]], retired=retired
        )


def _mean_colours(hashes: list[str]) -> np.ndarray:
    """``(n, 3)`` CIELAB mean colours from the hashes' last 6 hex digits; NaN for an older hash
    without them (``mosaic.photo_index.perceptual_hash``)."""
    out = np.full((len(hashes), 3), np.nan)
    for i, h in enumerate(hashes):
        if len(h) >= 22:
            out[i] = [int(h[16:18], 16) / 2.55, int(h[18:20], 16) - 128, int(h[20:22], 16) - 128]
    return out


_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)  # set bits of each byte
_PAIR_ROWS = 128  # photos compared with all later ones at once: 128 x 5,000 pairs is ~15 MB of temporaries


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits of each 64-bit word (NumPy 2's ``bitwise_count``, else a byte table)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words)
    return _POPCOUNT[words.view(np.uint8)].reshape(*words.shape, 8).sum(axis=-1, dtype=np.uint8)


def _alike_pairs(values: np.ndarray, colours: np.ndarray, distance: int, colour: float) -> Iterable[tuple[int, int]]:
    """Every ``(i, j)``, ``i < j``, within ``distance`` bits and ``colour`` ΔE76, in row order: a
    block of rows against every later photo at once, the colour checked only for the few pairs
    whose layouts are alike (per-row NumPy calls cost 2.5 s at 5,000 photos, and the indexer
    regroups after every batch)."""
    count = len(values)
    for start in range(0, count, _PAIR_ROWS):
        stop = min(count, start + _PAIR_ROWS)
        bits = _popcount(values[start:stop, None] ^ values[None, start:])  # (rows, count - start)
        rows, cols = np.nonzero(np.triu(bits <= distance, k=1))  # column c is photo start + c: later ones only
        rows, cols = rows + start, cols + start
        apart = np.linalg.norm(colours[rows] - colours[cols], axis=1)
        keep = ~(apart > colour)  # an unknown colour (NaN) does not keep photos apart
        yield from zip(rows[keep].tolist(), cols[keep].tolist(), strict=True)


def group_photos(
    hashes: dict[str, str], distance: int = GROUP_DISTANCE, colour: float = GROUP_COLOUR_DISTANCE
) -> list[list[str]]:
    """Near-duplicates (bursts, the same scene twice): photos whose layout hashes are within
    ``distance`` bits and whose mean colours are within ``colour`` ΔE76 (when both hashes carry
    one), joined transitively; only groups of two or more, each sorted, by first name."""
    names = sorted(hashes)
    values = np.array([int(hashes[n][:16], 16) for n in names], dtype=np.uint64)
    colours = _mean_colours([hashes[n] for n in names])
    parent = list(range(len(names)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in _alike_pairs(values, colours, distance, colour):
        a, b = root(i), root(j)
        if a != b:
            parent[b] = a
    groups: dict[int, list[str]] = {}
    for i, name in enumerate(names):
        groups.setdefault(root(i), []).append(name)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def _named_segments(manifest: Manifest) -> set[str]:
    return {p.segment for p in manifest.photos.values() if p.state == "indexed" and p.segment}


def _settle(manifest: Manifest, before: set[str]) -> None:
    """After a change: the groups, the version, and segments no indexed photo names any more retired."""
    manifest.groups = group_photos({n: p.hash for n, p in manifest.photos.items() if p.state == "indexed"})
    manifest.version = _version(manifest.photos)
    named = _named_segments(manifest)
    now = datetime.now(UTC).isoformat()
    for segment in before - named:
        manifest.retired.setdefault(segment, now)
    for segment in named:
        manifest.retired.pop(segment, None)


def _version(photos: dict[str, PhotoOutcome]) -> str:
    digest = hashlib.sha256()
    for name in sorted(photos):
        p = photos[name]
        if p.state == "indexed":
            digest.update(f"{name}\0{p.segment}\0{p.size}\n".encode())
    return digest.hexdigest()[:20]


class IndexedLibraries:
    """Segments, the manifest and the composed library of libraries the indexer fills."""

    def __init__(self, container_of: Callable[[str], Any]) -> None:
        """``container_of(library)``: the library's container client (``LibraryStore.container_client``)."""
        self._container = container_of
        self._segments: dict[tuple[str, str], TileLibrary] = {}
        self._lock = threading.Lock()

    def read(self, library: str) -> tuple[Manifest, str | None]:
        """The manifest and its ETag; an empty one (ETag None) before the first batch."""
        try:
            downloader = self._container(library).get_blob_client(MANIFEST_BLOB).download_blob()
            data = downloader.readall()
        except ResourceNotFoundError:
            return Manifest(version="", photos={}, groups=[]), None
        return Manifest.from_json(data), str(downloader.properties.etag)

    def write_segment(self, library: str, segment: str, tiles: TileLibrary) -> str:
        """Store one batch's tiles (overwriting the same bytes on a redelivery); the blob name."""
        blob = f"{SEGMENT_PREFIX}{segment}.zip"
        self._container(library).upload_blob(
            blob,
            tiles.to_bytes(),
            overwrite=True,
            content_settings=ContentSettings(content_type="application/zip"),
        )
        return blob

    def update(self, library: str, change: Callable[[Manifest], None]) -> Manifest:
        """Apply ``change`` to the manifest and write it back (one conditional write; a writer that
        lost the race re-reads and applies it again), regrouped, with its segments retired and its
        new version; the caller publishes it (``LibraryStore.publish``)."""
        blob = self._container(library).get_blob_client(MANIFEST_BLOB)
        for _ in range(_ATTEMPTS):
            manifest, etag = self.read(library)
            before = _named_segments(manifest)
            change(manifest)
            _settle(manifest, before)
            try:
                if etag is None:
                    blob.upload_blob(manifest.to_json(), overwrite=False)
                else:
                    blob.upload_blob(
                        manifest.to_json(), overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
            except (ResourceModifiedError, ResourceExistsError):
                continue
            except ResourceNotFoundError:
                raise LibraryNotFoundError(f"tile library {library!r} is gone") from None
            return manifest
        raise RuntimeError(f"library {library!r}: the manifest changed {_ATTEMPTS} times while it was updated")

    def record(self, library: str, outcomes: Iterable[PhotoOutcome]) -> Manifest:
        """Merge a batch's outcomes into the manifest (``update``). A photo its owner removed while
        the batch ran stays removed: the tombstone wins over a late index."""
        outcomes = list(outcomes)

        def merge(manifest: Manifest) -> None:
            for outcome in outcomes:
                current = manifest.photos.get(outcome.name)
                if current is None or current.state != "removed":
                    manifest.photos[outcome.name] = outcome

        return self.update(library, merge)

    def remove(self, library: str, names: Iterable[str]) -> Manifest:
        """Photos taken out of the library by its owner: a tombstone each (``update``)."""
        names = list(names)

        def bury(manifest: Manifest) -> None:
            for name in names:
                old = manifest.photos.get(name)
                manifest.photos[name] = PhotoOutcome(name=name, state="removed", size=old.size if old else 0)

        return self.update(library, bury)

    def revive(self, library: str, names: Iterable[str]) -> None:
        """Forget the tombstones of photos uploaded again, so that their new index is recorded."""
        names = list(names)

        def forget(manifest: Manifest) -> None:
            for name in names:
                if (p := manifest.photos.get(name)) is not None and p.state == "removed":
                    del manifest.photos[name]

        self.update(library, forget)

    # -- versions a job renders with ---------------------------------------------------------

    def pin(self, library: str) -> str | None:
        """Keep the current version as ``versions/<version>.json`` for a job that starts now; its
        version, or None when nothing is indexed. The blob is rewritten with the same bytes when
        another job pinned it before, which also renews its age (``collect``)."""
        manifest, etag = self.read(library)
        if etag is None or not manifest.indexed():
            return None
        self._container(library).upload_blob(
            f"{VERSION_PREFIX}{manifest.version}.json",
            manifest.to_json(),
            overwrite=True,
            content_settings=ContentSettings(content_type="application/json"),
        )
        return manifest.version

    def read_version(self, library: str, version: str) -> Manifest:
        """The manifest of a pinned version; ``LibraryNotFoundError`` when it is gone (collected)."""
        try:
            data = self._container(library).get_blob_client(f"{VERSION_PREFIX}{version}.json").download_blob().readall()
        except ResourceNotFoundError:
            raise LibraryNotFoundError(
                f"version {version} of tile library {library!r} is gone: the library changed and that "
                f"version was collected (kept {VERSION_RETENTION_SECONDS // 86400} days after a job started with it)"
            ) from None
        return Manifest.from_json(data)

    def collect(
        self, library: str, *, retention: float = VERSION_RETENTION_SECONDS, now: datetime | None = None
    ) -> list[str]:
        """Delete what no job can need any more: pinned versions not pinned for ``retention``
        seconds and segments retired longer ago (``Manifest.retired``); the blobs deleted."""
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=retention)
        container = self._container(library)
        old = [p.name for p in container.list_blobs(name_starts_with=VERSION_PREFIX) if p.last_modified <= cutoff]
        manifest, _ = self.read(library)
        expired = [s for s, since in manifest.retired.items() if datetime.fromisoformat(since) <= cutoff]
        for name in old + expired:  # the blobs first: a crash before the manifest write repeats only deletes
            try:
                container.delete_blob(name)
            except ResourceNotFoundError:
                pass
        if expired:

            def forget(manifest: Manifest) -> None:
                for segment in expired:
                    manifest.retired.pop(segment, None)

            self.update(library, forget)
        return old + expired

    def compose(self, library: str, manifest: Manifest | None = None) -> TileLibrary:
        """The published library: every indexed photo's tile, by name, from the cached segments, with
        the manifest's near-duplicate groups (the engine counts a group as one photo)."""
        manifest = manifest or self.read(library)[0]
        indexed = manifest.indexed()
        if not indexed:
            raise LibraryNotFoundError(f"tile library {library!r} has no indexed photo yet")
        container = self._container(library)
        tiles = []
        for name in indexed:
            segment = manifest.photos[name].segment
            key = (container.container_name, segment)
            with self._lock:
                cached = self._segments.get(key)
            if cached is None:
                cached = TileLibrary.from_bytes(container.get_blob_client(segment).download_blob().readall())
                with self._lock:
                    self._segments[key] = cached
            tiles.append(cached.atlas[cached.names.index(name)])
        position = {name: i for i, name in enumerate(indexed)}
        groups = [[position[n] for n in group if n in position] for group in manifest.groups]
        return TileLibrary(
            atlas=np.stack(tiles), names=tuple(indexed), version=manifest.version, groups=tuple(map(tuple, groups))
        )
