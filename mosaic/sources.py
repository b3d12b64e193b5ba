"""Read the images of a would-be tile library from a folder or a zip file, and build it.

People hand over what they have: a folder with sub-folders, or a zip made on a Mac with its
``__MACOSX`` shadow copies and ``._`` resource forks, text files and thumbnails mixed in.
This module only gathers ``(name, bytes)`` pairs and says what it left out and why; whether
a file is really an image is decided by the engine's ``build_library``, which decodes it.

``build_library_from(source)`` is the one way every caller (``photomosaics render``,
``dal.blobs.libraries.LibraryStore.create_from``, the web upload) turns what a person handed over
into a ``TileLibrary``: a folder, a zip (path or bytes) or uploads (``(name, bytes)`` pairs,
where an upload that is a zip is read as a zip, its entries named ``<upload>/<entry>``).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from PIL import Image

from . import images, library, signatures
from .errors import NoUsableImageError, TileSourceError
from .library import FORMAT_VERSION, TileLibrary, build_library

# A tile photo larger than this is almost certainly not a photo (a video, a disk image).
MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_FILES = 20_000

Skipped = list[tuple[str, str]]
# A zip starts with its first entry's header, or, empty, with its end record: an empty zip
# is an empty zip ("no usable image among 0 files"), not "not an image".
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


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


def _from_folder(folder: Path, skipped: Skipped) -> Iterator[tuple[str, bytes]]:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = PurePosixPath(path.relative_to(folder).as_posix())
        if reason := _junk_reason(relative):
            skipped.append((str(relative), reason))
        elif path.stat().st_size > MAX_FILE_BYTES:
            skipped.append((str(relative), f"larger than {MAX_FILE_BYTES // 2**20} MiB"))
        else:
            yield str(relative), path.read_bytes()


def _from_zip(archive: zipfile.ZipFile, skipped: Skipped) -> Iterator[tuple[str, bytes]]:
    for info in sorted(archive.infolist(), key=lambda i: i.filename):
        if info.is_dir():
            continue
        relative = PurePosixPath(info.filename)
        if reason := _junk_reason(relative):
            skipped.append((info.filename, reason))
        elif info.file_size > MAX_FILE_BYTES:  # checked before inflating: no zip bombs
            skipped.append((info.filename, f"larger than {MAX_FILE_BYTES // 2**20} MiB"))
        else:
            try:
                yield info.filename, archive.read(info)
            except (zipfile.BadZipFile, OSError, RuntimeError) as exc:  # RuntimeError: encrypted entry
                skipped.append((info.filename, f"unreadable in the zip: {exc}"))


def read_tile_sources(source: str | Path | bytes) -> tuple[list[tuple[str, bytes]], Skipped]:
    """All candidate files of a folder, a zip path or zip bytes: ``(files, skipped)``.

    Names are paths relative to the folder or zip root with ``/`` separators, sorted, so the
    same source gives the same library.
    """
    skipped: Skipped = []
    if isinstance(source, bytes):
        return _read_zip(io.BytesIO(source), "the uploaded zip", skipped), skipped
    path = Path(source).expanduser()
    if path.is_dir():
        files = list(_from_folder(path, skipped))
    elif path.is_file():
        if not zipfile.is_zipfile(path):
            raise TileSourceError(f"{path} is neither a folder nor a zip file")
        files = _read_zip(path, str(path), skipped)
    else:
        raise TileSourceError(f"{path} does not exist")
    if len(files) > MAX_FILES:
        raise TileSourceError(f"{path} holds {len(files)} files; a library takes at most {MAX_FILES}")
    return files, skipped


def _read_zip(handle: object, label: str, skipped: Skipped) -> list[tuple[str, bytes]]:
    try:
        with zipfile.ZipFile(handle) as archive:  # type: ignore[arg-type]
            if len(archive.infolist()) > MAX_FILES:
                raise TileSourceError(f"{label} holds more than {MAX_FILES} entries")
            return list(_from_zip(archive, skipped))
    except zipfile.BadZipFile as exc:
        raise TileSourceError(f"{label} is not a valid zip file: {exc}") from exc


def read_uploads(uploads: Iterable[tuple[str, bytes]]) -> tuple[list[tuple[str, bytes]], Skipped]:
    """Uploaded files as candidate images: a zip upload is opened, its entries ``<upload>/<entry>``."""
    files: list[tuple[str, bytes]] = []
    skipped: Skipped = []
    for name, data in uploads:
        if not is_zip(data):
            files.append((name, data))
            continue
        try:
            found, junk = read_tile_sources(data)
        except TileSourceError as exc:
            raise TileSourceError(f"{name}: {exc}") from None
        files += [(f"{name}/{entry}", content) for entry, content in found]
        skipped += [(f"{name}/{entry}", reason) for entry, reason in junk]
    return files, skipped


def build_library_from(source: str | Path | bytes | Iterable[tuple[str, bytes]]) -> tuple[TileLibrary, Skipped]:
    """A library from a folder, a zip (path or bytes) or uploads: ``(library, skipped)``.

    ``skipped`` lists every file left out and why (junk, too large, not an image); a source
    that cannot be read at all is a ``TileSourceError``, one without a usable image a
    ``NoUsableImageError`` (both ``ValueError``).
    """
    if isinstance(source, (str, Path, bytes)):
        files, skipped = read_tile_sources(source)
    else:
        files, skipped = read_uploads(source)
    try:
        library, not_images = build_library(files)
    except NoUsableImageError as exc:
        if not skipped:
            raise
        # Say what was left out before decoding too (a zip's only photo over the size limit):
        # "no usable image among 0 files" alone does not tell the person why.
        name, reason = skipped[0]
        raise NoUsableImageError(f"{exc}; {len(skipped)} more left out (first: {name}: {reason})") from None
    return library, skipped + not_images


# The code a library's tiles depend on besides the photos: decoding, cropping, signatures.
BUILDER_MODULES = (images.__file__, library.__file__, signatures.__file__)


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
        digest.update(f"\0{name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]
