"""A stored (uncompressed) zip written in pieces by several writers: local entries, then a directory.

A Deep Zoom pyramid is one zip blob (``dal.blobs.pyramid`` reads it by range). For a giant mosaic
its tiles are made by many processors, so the zip is not written front to back by one
writer: each processor writes the local entries of its own tiles (``local_entries``: header,
name, bytes; nothing in them depends on where they will land), and the controller, once it
knows every entry's name, size and CRC in order, writes the central directory that points at
them (``central_directory``), zip64 records included when offsets pass 4 GiB or entries 65,535.
Dates are 1980-01-01, as libvips writes them, so a pyramid's bytes do not depend on the day.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Member", "central_directory", "entry_bytes", "local_entries"]

_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_END = struct.Struct("<4sHHHHIIH")
_END64 = struct.Struct("<4sQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<4sIQI")
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01
_MAX32, _MAX16 = 0xFFFFFFFF, 0xFFFF


@dataclass(frozen=True)
class Member:
    """One stored file of the zip: its name, size and CRC-32."""

    name: str
    size: int
    crc: int

    @property
    def entry_bytes(self) -> int:
        return _LOCAL.size + len(self.name.encode()) + self.size


def entry_bytes(name: str, data: bytes) -> tuple[Member, bytes]:
    """A file's local entry (header, name, data) and its ``Member``."""
    member = Member(name, len(data), zlib.crc32(data))
    encoded = name.encode()
    header = _LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, _DOS_DATE, member.crc, member.size, member.size, len(encoded), 0)
    return member, header + encoded + data


def local_entries(files: Iterable[tuple[str, bytes]]) -> tuple[list[Member], bytes]:
    """The local entries of ``files`` back to back, and their members in order."""
    members, parts = [], []
    for name, data in files:
        member, entry = entry_bytes(name, data)
        members.append(member)
        parts.append(entry)
    return members, b"".join(parts)


def central_directory(members: Sequence[Member], *, start: int = 0) -> bytes:
    """The directory (and end records) of ``members`` laid out back to back from ``start``."""
    parts, offset = [], start
    for member in members:
        encoded = member.name.encode()
        extra = b""
        if offset >= _MAX32:
            extra = struct.pack("<HHQ", 1, 8, offset)
        parts.append(
            _CENTRAL.pack(
                b"PK\x01\x02",
                45 if extra else 20,
                45 if extra else 20,
                0,
                0,
                0,
                _DOS_DATE,
                member.crc,
                member.size,
                member.size,
                len(encoded),
                len(extra),
                0,
                0,
                0,
                0,
                min(offset, _MAX32),
            )
            + encoded
            + extra
        )
        offset += member.entry_bytes
    directory = b"".join(parts)
    at, size, count = offset, len(directory), len(members)
    tail = b""
    if count >= _MAX16 or at >= _MAX32 or size >= _MAX32:
        tail = _END64.pack(b"PK\x06\x06", _END64.size - 12, 45, 45, 0, 0, count, count, size, at)
        tail += _LOCATOR64.pack(b"PK\x06\x07", 0, at + size, 1)
    end = _END.pack(b"PK\x05\x06", 0, 0, min(count, _MAX16), min(count, _MAX16), min(size, _MAX32), min(at, _MAX32), 0)
    return directory + tail + end
