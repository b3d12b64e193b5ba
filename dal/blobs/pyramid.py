"""Reading a job's Deep Zoom pyramid out of its zip blob, one range read per file.

The controller stores a job's pyramid as one uncompressed zip (``imageoutput/<request_id>.dzi.zip``,
``mosaic.dzi`` and ``mosaic_files/<level>/<col>_<row>.jpg`` inside): one blob written once,
where a folder of tiles would be thousands of writes (and thousands of deletes later), and
the same blob is the "pyramid as a zip" download. A viewer asks for tiles one by one, so
the web app must not download the zip to serve one:

- ``PyramidIndex.load`` reads the zip's central directory with a few range reads (the end
  record, then the directory itself: ``zipfile`` does the parsing over a seekable view of
  the blob) and keeps, per member, where its local header starts and how long it is;
- ``read`` fetches one member with one range read (header, name and data together; a
  second read only when the local header carries an unusually long extra field).

Members must be *stored* (the tiles are JPEGs already): a deflated member is refused.
``PyramidReader`` keeps the indexes of the last few pyramids read in this process (an LRU;
a 400 MP pyramid's index is about 8,400 entries) and reads tiles conditionally on the ETag
it indexed: a blob replaced since (a re-stitched job) raises ``BlobChangedError`` inside,
and the index is read again once.
"""

from __future__ import annotations

import io
import struct
import threading
import zipfile
from collections import OrderedDict
from dataclasses import dataclass

from dal.blobs.names import PYRAMID_ROOT
from dal.blobs.store import BlobStore
from dal.errors import BlobChangedError

__all__ = ["DZI_NAME", "PyramidIndex", "PyramidReader", "tile_name"]

DZI_NAME = f"{PYRAMID_ROOT}.dzi"
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # 30 bytes; the last two: name and extra lengths
_LOCAL_MAGIC = b"PK\x03\x04"
_EXTRA_SLACK = 64  # local extra fields are usually short (zip64: 20 bytes): read them in the same request
_CACHED_INDEXES = 16


def tile_name(level: int, column: int, row: int) -> str:
    """The zip member of one tile (DZI layout, as ``mosaic.deepzoom`` writes it)."""
    return f"{PYRAMID_ROOT}_files/{level}/{column}_{row}.jpg"


class _BlobFile(io.RawIOBase):
    """A read-only seekable view of a blob of known size: every read is a range read."""

    def __init__(self, blobs: BlobStore, container: str, name: str, size: int, etag: str) -> None:
        self.blobs, self.container, self.name, self.size, self.etag, self.pos = blobs, container, name, size, etag, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # io passes a memoryview; typeshed's Buffer has no len or slicing
        want = min(len(buffer), self.size - self.pos)
        if want <= 0:
            return 0
        data = self.blobs.read_range(self.container, self.name, self.pos, want, etag=self.etag).data
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


@dataclass(frozen=True)
class PyramidIndex:
    """Where each member of one pyramid zip lies: ``name -> (local header offset, size)``."""

    etag: str
    members: dict[str, tuple[int, int]]

    @classmethod
    def load(cls, blobs: BlobStore, container: str, name: str) -> PyramidIndex:
        tail = blobs.read_range(container, name, 0, 1)  # the size and the ETag, one byte of data
        raw = _BlobFile(blobs, container, name, tail.size, tail.etag)
        members: dict[str, tuple[int, int]] = {}
        try:
            with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=64 * 1024)) as archive:
                for info in archive.infolist():
                    if info.compress_type != zipfile.ZIP_STORED:
                        raise ValueError(f"{info.filename} is compressed; a pyramid zip must be stored")
                    members[info.filename] = (info.header_offset, info.compress_size)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{name} is not a readable zip: {exc}") from None
        return cls(etag=tail.etag, members=members)

    def read(self, blobs: BlobStore, container: str, name: str, member: str) -> bytes:
        """One member's bytes; KeyError when the zip has no such member."""
        offset, size = self.members[member]
        guess = _LOCAL_HEADER.size + len(member.encode()) + _EXTRA_SLACK
        chunk = blobs.read_range(container, name, offset, guess + size, etag=self.etag).data
        magic, *_, name_len, extra_len = _LOCAL_HEADER.unpack_from(chunk)
        if magic != _LOCAL_MAGIC:
            raise ValueError(f"no local header for {member} at offset {offset}")
        start = _LOCAL_HEADER.size + name_len + extra_len
        if start + size <= len(chunk):
            return chunk[start : start + size]
        return blobs.read_range(container, name, offset + start, size, etag=self.etag).data


class PyramidReader:
    """Pyramid members by range reads, with the last few indexes cached (thread-safe)."""

    def __init__(self, *, max_indexes: int = _CACHED_INDEXES) -> None:
        self.max_indexes = max_indexes
        self._indexes: OrderedDict[tuple[str, str], PyramidIndex] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, blobs: BlobStore, container: str, name: str, member: str) -> bytes:
        """A member of the pyramid zip ``container/name``.

        BlobMissingError when there is no such zip, KeyError when it has no such member."""
        for attempt in (1, 2):
            index = self._index(blobs, container, name)
            try:
                return index.read(blobs, container, name, member)
            except BlobChangedError:
                self.forget(blobs.container_name(container), name)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def forget(self, container: str, name: str) -> None:
        with self._lock:
            self._indexes.pop((container, name), None)

    def _index(self, blobs: BlobStore, container: str, name: str) -> PyramidIndex:
        key = (blobs.container_name(container), name)
        with self._lock:
            if key in self._indexes:
                self._indexes.move_to_end(key)
                return self._indexes[key]
        try:
            index = PyramidIndex.load(blobs, container, name)
        except BlobChangedError:  # replaced while we read its directory: read it again
            index = PyramidIndex.load(blobs, container, name)
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > self.max_indexes:
                self._indexes.popitem(last=False)
        return index
