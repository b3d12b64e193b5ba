"""A disk cache of tile libraries built from folders and zips (and the demo library) for
``photomosaics render``.

Decoding a few hundred full-size photos takes seconds; the index built from them is one
file. The cache key (``mosaic.sources.fingerprint``) is the source's resolved path with the
name, size and modification time of every file in it (a folder is re-scanned, not re-read),
plus the index format, the code that turns photos into tiles and Pillow's version: any change
to the photos or to how they are read (an ICC profile converted, an orientation applied)
gives a new key, so a stale library is never used. The demo library's key is
``workers.demo_library.demo_source_key`` (the same, over its sample photos, its own code and
NumPy's version). The cache lives in
``PHOTOMOSAICS_CACHE_DIR``, else ``$XDG_CACHE_HOME/photomosaics``, else
``~/.cache/photomosaics``; a cache that cannot be read or written is ignored. It keeps the
``KEPT`` libraries used last (the demo library alone is 13 MB, and every change to the code
that builds it makes a new key): storing one removes the least recently used beyond that.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from mosaic.library import LibraryFormatError, TileLibrary
from mosaic.sources import fingerprint
from photomosaics.whole_files import written_whole

log = logging.getLogger(__name__)
Skipped = list[tuple[str, str]]
KEPT = 8


def cache_dir() -> Path:
    explicit = os.environ.get("PHOTOMOSAICS_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser() / "libraries"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "photomosaics" / "libraries"


def source_key(source: Path) -> str:
    """The cache key of a folder or zip (``mosaic.sources.fingerprint``)."""
    source = source.resolve()
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    named = [(str(p.relative_to(source)) if source.is_dir() else "", p) for p in files]
    return fingerprint(named, salt=str(source))


def load(source: Path | str) -> tuple[TileLibrary, Skipped] | None:
    """The cached library of ``source`` (a folder or zip, or a key such as the demo library's,
    ``demo_source_key``) and what was skipped building it, or None."""

    key = source_key(source) if isinstance(source, Path) else source
    index, notes = cache_dir() / f"{key}.zip", cache_dir() / f"{key}.json"
    try:
        library = TileLibrary.from_bytes(index.read_bytes())
        skipped = [(str(name), str(reason)) for name, reason in json.loads(notes.read_text())["skipped"]]
    except (OSError, ValueError, KeyError, TypeError, LibraryFormatError):
        return None
    with contextlib.suppress(OSError):
        os.utime(index)  # used now: the last to go (``_prune``)
    return library, skipped


def store(source: Path | str, library: TileLibrary, skipped: Skipped) -> None:
    """Keep the library for the next render of ``source`` (as for ``load``); failures only log."""
    key = source_key(source) if isinstance(source, Path) else source
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        label = str(source.resolve()) if isinstance(source, Path) else "demo"
        _write_atomically(folder / f"{key}.json", json.dumps({"source": label, "skipped": skipped}).encode())
        _write_atomically(folder / f"{key}.zip", library.to_bytes())
        _prune(folder)
    except OSError as exc:
        log.info("cannot cache the tile library of %s in %s: %s", source, folder, exc)


def _prune(folder: Path) -> None:
    """Remove all but the ``KEPT`` libraries used last (by their index's modification time)."""
    stored = [p for p in folder.glob("*.zip") if not p.name.startswith(".")]  # not a write under way
    indexes = sorted(stored, key=lambda p: p.stat().st_mtime, reverse=True)
    for index in indexes[KEPT:]:
        for path in (index, index.with_suffix(".json")):
            path.unlink(missing_ok=True)


def _write_atomically(path: Path, data: bytes) -> None:
    with written_whole(path) as partial:
        partial.write_bytes(data)
