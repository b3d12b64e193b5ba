"""Read the images of a would-be tile library from a folder, zips or uploads, and build it.

People hand over what they have: a folder with sub-folders, or a zip made on a Mac with its
``__MACOSX`` shadow copies and ``._`` resource forks, text files and thumbnails mixed in.
This module only gathers ``(name, bytes)`` pairs and says what it left out and why; whether
a file is really an image is decided by the engine's ``build_library``, which decodes it.

Memory stays bounded whatever is handed over. ``open_tile_sources`` first catalogues every
file (a zip's directory only: nothing is inflated) and checks the ``SourceLimits`` of the
whole source at once: files, and bytes once unpacked, across every upload and zip together.
Only then are files read, one at a time, each while it is decoded and then dropped; the
pixels of every file together (from its header, before decoding) are checked as they come.
A source over a limit is a ``SourceLimitError`` before the work it would cost.

``build_library_from(source)`` is the one way every caller (``photomosaics render``,
``dal.blobs.libraries.LibraryStore.create_from``, the web upload) turns what a person handed over
into a ``TileLibrary``: a folder, a zip (path or bytes) or uploads (``(name, bytes or a
binary file)`` pairs, where an upload that is a zip is read as a zip, its entries named
``<upload>/<entry>``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from PIL import Image

from . import images, library, signatures, subject_crop
from .errors import NoUsableImageError, SourceLimitError, TileSourceError
from .library import FORMAT_VERSION, TileLibrary, build_library

# A tile photo larger than this is almost certainly not a photo (a video, a disk image).
MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_FILES = 20_000

Skipped = list[tuple[str, str]]
Upload = tuple[str, "bytes | IO[bytes]"]
# A zip starts with its first entry's header, or, empty, with its end record: an empty zip
# is an empty zip ("no usable image among 0 files"), not "not an image".
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_UNREADABLE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError, ValueError)


@dataclass(frozen=True)
class SourceLimits:
    """What one library source may hold, all of its files and zips together (None: no limit)."""

    max_files: int = MAX_FILES
    max_unpacked_bytes: int | None = None
    max_pixels: int | None = None


def is_zip(data: bytes) -> bool:
    return data[:4] in ZIP_MAGICS


def _junk_reason(relative: PurePosixPath) -> str | None:
    parts = relative.parts
    if any(part == "__MACOSX" for part in parts):
        return "macOS metadata (__MACOSX)"
    if relative.name.startswith("._"):
        return "macOS resource fork"
    if any(part.startswith(".") for part in parts):
        return "hidden file"
    if relative.name.lower() in {"thumbs.db", "desktop.ini"}:
        return "system file"
    return None


_TOO_LARGE = f"larger than {MAX_FILE_BYTES // 2**20} MiB"


class TileSources:
    """The files of a source, catalogued; iterating reads them one at a time.

    ``add`` counts each file against the limits before any is read; ``skipped`` collects
    what was left out (junk, too large, unreadable) as the catalogue and the reading go.
    """

    def __init__(self, limits: SourceLimits) -> None:
        self.limits = limits
        self.skipped: Skipped = []
        self._files: list[tuple[str, Callable[[], bytes]]] = []
        self._bytes = 0
        self._pixels = 0
        self.closing = contextlib.ExitStack()

    def add(self, name: str, size: int, read: Callable[[], bytes]) -> None:
        if size > MAX_FILE_BYTES:  # checked before reading or inflating it
            self.skipped.append((name, _TOO_LARGE))
            return
        if len(self._files) >= self.limits.max_files:
            raise SourceLimitError(f"more than {self.limits.max_files:,} files; a library takes at most that many")
        self._bytes += size
        limit = self.limits.max_unpacked_bytes
        if limit is not None and self._bytes > limit:
            raise SourceLimitError(
                f"the files unpack to more than {limit:,} bytes together (at {name}); "
                f"a library takes at most {limit:,} bytes of photos"
            )
        self._files.append((name, read))

    def admit_pixels(self, pixels: int) -> None:
        """Count one file's pixels (from its header) against ``max_pixels``, before decoding it."""
        self._pixels += pixels
        limit = self.limits.max_pixels
        if limit is not None and self._pixels > limit:
            raise SourceLimitError(
                f"the images hold more than {limit:,} pixels together; a library takes at most that many"
            )

    def __len__(self) -> int:
        return len(self._files)

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        for name, read in self._files:
            try:
                data = read()
            except _UNREADABLE as exc:  # RuntimeError: an encrypted entry
                self.skipped.append((name, f"unreadable: {exc}"))
                continue
            if len(data) > MAX_FILE_BYTES:  # a zip entry larger than its header said
                self.skipped.append((name, _TOO_LARGE))
                continue
            yield name, data
            del data  # not held while the next file is read

    def close(self) -> None:
        self.closing.close()

    def __enter__(self) -> TileSources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _add_folder(folder: Path, sources: TileSources) -> None:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = PurePosixPath(path.relative_to(folder).as_posix())
        if reason := _junk_reason(relative):
            sources.skipped.append((str(relative), reason))
        else:
            sources.add(str(relative), path.stat().st_size, functools.partial(_read_file, path))


def _read_file(path: Path) -> bytes:
    return _read_at_most(path.open("rb"))


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    return _read_at_most(archive.open(info))


def _read_at_most(handle: IO[bytes]) -> bytes:
    with handle:
        return handle.read(MAX_FILE_BYTES + 1)


def _read_from_start(stream: IO[bytes]) -> bytes:
    stream.seek(0)
    return stream.read(MAX_FILE_BYTES + 1)


_END = b"PK\x05\x06"
_END64_LOCATOR = b"PK\x06\x07"
_END_SEARCH = 22 + 0xFFFF  # the end record and the longest comment it may carry
DIRECTORY_BYTES_PER_FILE = 512  # a photo's directory entry is about 100 bytes (name, zip64 and time extras)


def _directory_extent(handle: Path | IO[bytes]) -> tuple[int, int] | None:
    """``(entries, directory bytes)`` from the zip's end records, reading only its last 64 KB;
    None when there is no end record (``zipfile`` then says what is wrong)."""
    stream: IO[bytes] = handle.open("rb") if isinstance(handle, Path) else handle
    try:
        size = stream.seek(0, io.SEEK_END)
        start = max(0, size - _END_SEARCH)
        stream.seek(start)
        tail = stream.read(size - start)
        at = tail.rfind(_END)
        if at < 0 or len(tail) - at < 22:
            return None
        entries, directory = (
            int.from_bytes(tail[at + 10 : at + 12], "little"),
            int.from_bytes(tail[at + 12 : at + 16], "little"),
        )
        locator = at - 20
        if locator >= 0 and tail[locator : locator + 4] == _END64_LOCATOR:
            stream.seek(int.from_bytes(tail[locator + 8 : locator + 16], "little"))
            record = stream.read(56)
            if record[:4] == b"PK\x06\x06" and len(record) == 56:
                entries = int.from_bytes(record[32:40], "little")
                directory = int.from_bytes(record[40:48], "little")
        return entries, directory
    except (OSError, ValueError):
        return None
    finally:
        if isinstance(handle, Path):
            stream.close()
        else:
            stream.seek(0)


def _add_zip(handle: Path | IO[bytes], label: str, folder: str, sources: TileSources) -> None:
    """A zip's entries from its directory alone; each is inflated only when it is read.

    The directory's entry count and size are read from its end records first: ``zipfile`` parses
    the whole directory (an object per entry) before anyone can count its entries."""
    extent = _directory_extent(handle)
    most = sources.limits.max_files
    if extent is not None:
        entries, directory = extent
        if entries > most:
            raise SourceLimitError(f"{label} holds {entries:,} entries; a library takes at most {most:,} files")
        if directory > max(64 * 1024, most * DIRECTORY_BYTES_PER_FILE):
            raise SourceLimitError(
                f"{label}'s directory is {directory:,} bytes: more than {most:,} files' entries could need"
            )
    try:
        archive = sources.closing.enter_context(zipfile.ZipFile(handle))
    except _UNREADABLE as exc:  # NotImplementedError: a zip of a later version than zipfile reads
        raise TileSourceError(f"{label} is not a valid zip file: {exc}") from None
    members = archive.infolist()
    if len(members) > sources.limits.max_files:
        raise SourceLimitError(f"{label} holds more than {sources.limits.max_files:,} entries")
    for info in sorted(members, key=lambda i: i.filename):
        if info.is_dir():
            continue
        name = folder + info.filename
        if reason := _junk_reason(PurePosixPath(info.filename)):
            sources.skipped.append((name, reason))
        else:
            sources.add(name, info.file_size, functools.partial(_read_member, archive, info))


def _add_upload(name: str, data: bytes | IO[bytes], sources: TileSources) -> None:
    if isinstance(data, (bytes, bytearray)):
        stream: IO[bytes] = io.BytesIO(data)
    else:
        stream = data
    stream.seek(0)
    head = stream.read(4)
    size = stream.seek(0, io.SEEK_END)
    stream.seek(0)
    if not is_zip(head):
        sources.add(name, size, lambda: _read_from_start(stream))
        return
    try:
        _add_zip(stream, "the uploaded zip", f"{name}/", sources)
    except SourceLimitError as exc:
        raise SourceLimitError(f"{name}: {exc}") from None
    except TileSourceError as exc:
        raise TileSourceError(f"{name}: {exc}") from None


def open_tile_sources(source: str | Path | bytes | Iterable[Upload], limits: SourceLimits | None = None) -> TileSources:
    """Catalogue a folder, a zip (path or bytes) or uploads; close the result when done.

    Names are paths relative to the folder or zip root with ``/`` separators, sorted, so the
    same source gives the same library; an upload's zip entries are ``<upload>/<entry>``.
    """
    sources = TileSources(limits or SourceLimits())
    try:
        if isinstance(source, bytes):
            _add_zip(io.BytesIO(source), "the uploaded zip", "", sources)
        elif isinstance(source, (str, Path)):
            path = Path(source).expanduser()
            if path.is_dir():
                _add_folder(path, sources)
            elif path.is_file():
                if not zipfile.is_zipfile(path):
                    raise TileSourceError(f"{path} is neither a folder nor a zip file")
                _add_zip(path, str(path), "", sources)
            else:
                raise TileSourceError(f"{path} does not exist")
        else:
            for name, data in source:
                _add_upload(name, data, sources)
    except BaseException:
        sources.close()
        raise
    return sources


Guard = Callable[[int], AbstractContextManager[object]]


def build_library_from(
    source: str | Path | bytes | Iterable[Upload],
    *,
    limits: SourceLimits | None = None,
    guard: Guard | None = None,
) -> tuple[TileLibrary, Skipped]:
    """A library from a folder, a zip (path or bytes) or uploads: ``(library, skipped)``.

    ``skipped`` lists every file left out and why (junk, too large, not an image); a source
    that cannot be read at all is a ``TileSourceError``, one over ``limits`` a
    ``SourceLimitError``, one without a usable image a ``NoUsableImageError`` (all
    ``ValueError``). ``guard(pixels)``, when given, is held around each file's decoding (a
    process-wide decoding budget, say).
    """
    with open_tile_sources(source, limits) as sources:

        def admit(pixels: int) -> AbstractContextManager[object]:
            sources.admit_pixels(pixels)
            return guard(pixels) if guard is not None else contextlib.nullcontext()

        try:
            library, not_images = build_library(sources, admit=admit)
        except NoUsableImageError as exc:
            if not sources.skipped:
                raise
            # Say what was left out before decoding too (a zip's only photo over the size limit):
            # "no usable image among 0 files" alone does not tell the person why.
            name, reason = sources.skipped[0]
            raise NoUsableImageError(f"{exc}; {len(sources.skipped)} more left out (first: {name}: {reason})") from None
        return library, sources.skipped + not_images


# The code a library's tiles depend on besides the photos: decoding, cropping, signatures.
BUILDER_MODULES = (images.__file__, library.__file__, signatures.__file__, subject_crop.__file__)


def fingerprint(files: Iterable[tuple[str, Path]], *, salt: str, code: Iterable[str] = ()) -> str:
    """A key that changes whenever a library built from ``files`` (``(name, path)`` pairs) could:
    their names, sizes and modification times (not their contents: a folder is re-scanned, not
    re-read), the code that turns photos into tiles (``BUILDER_MODULES`` and ``code``), the
    index format, Pillow's version and ``salt``. For disk caches of built libraries."""
    digest = hashlib.sha256(f"{FORMAT_VERSION}\0{Image.__version__}\0{salt}".encode())
    for module in (*BUILDER_MODULES, *code):
        digest.update(Path(module).read_bytes())
    for name, path in files:
        stat = path.stat()
        # surrogateescape: a file name that is not UTF-8 counts by its bytes on disk (it raised)
        digest.update(f"\0{name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:32]
