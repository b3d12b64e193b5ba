"""Library sources in bounded memory: catalogued against their limits before anything is
read, then read one file at a time; formats outside the allowlist never decoded; wide grey
images converted exactly."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import pytest
from PIL import Image

from mosaic.errors import SourceLimitError
from mosaic.images import open_image, to_rgb
from mosaic.sources import SourceLimits, build_library_from, open_tile_sources


def _png(colour: tuple[int, int, int], size: int = 32) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(out, "PNG")
    return out.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def test_limits_are_checked_on_the_catalogue_before_any_file_is_read() -> None:
    reads: list[str] = []

    class Watched(io.BytesIO):
        def read(self, *args: object) -> bytes:  # type: ignore[override]
            reads.append("read")
            return super().read(*args)  # type: ignore[arg-type]

    big = _zip({f"p{i}.png": bytes(1_000_000) for i in range(3)})  # 3 MB unpacked, a few KB sent
    uploads = [("a.zip", Watched(big)), ("b.zip", Watched(big))]
    with pytest.raises(SourceLimitError, match="unpack"):
        open_tile_sources(uploads, SourceLimits(max_unpacked_bytes=4_000_000))
    # Only the zips' directories were read (a handful of small reads), no member inflated.
    assert len(reads) < 40
    with open_tile_sources([("a.zip", io.BytesIO(big))], SourceLimits(max_unpacked_bytes=4_000_000)) as sources:
        assert len(sources) == 3


def test_files_are_read_one_at_a_time_and_dropped() -> None:
    members = {f"p{i}.png": _png((i * 50, 80, 200)) for i in range(4)}
    sources = open_tile_sources([("photos.zip", _zip(members)), ("loose.png", _png((1, 2, 3)))])
    seen = iter(sources)
    first = next(seen)
    assert first[0] == "photos.zip/p0.png" and first[1] == members["p0.png"]
    assert [name for name, _ in seen] == ["photos.zip/p1.png", "photos.zip/p2.png", "photos.zip/p3.png", "loose.png"]
    sources.close()


def test_a_zip_member_larger_than_its_header_says_is_not_read_past_it() -> None:
    honest = _zip({"p.png": _png((9, 9, 9))})
    real = len(_png((9, 9, 9)))
    # Rewrite the declared size in both the local header and the central directory.
    lied = bytearray(honest)
    local = lied.index(b"PK\x03\x04")
    central = lied.index(b"PK\x01\x02")
    struct.pack_into("<I", lied, local + 22, 10)
    struct.pack_into("<I", lied, central + 24, 10)
    library_skipped = build_library_from([("ok.png", _png((200, 0, 0))), ("lied.zip", bytes(lied))])[1]
    assert [name for name, _ in library_skipped] == ["lied.zip/p.png"] and real > 10


def test_pixels_are_counted_from_headers_across_every_file() -> None:
    files = [(f"p{i}.png", _png((i, i, i), 64)) for i in range(3)]  # 4,096 pixels each
    assert build_library_from(files, limits=SourceLimits(max_pixels=3 * 4096))[0].names
    with pytest.raises(SourceLimitError, match="pixels"):
        build_library_from(files, limits=SourceLimits(max_pixels=3 * 4096 - 1))


def test_eps_and_sgi_are_never_decoded() -> None:
    sgi = io.BytesIO()
    Image.new("RGB", (8, 8)).save(sgi, "SGI")
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    library, skipped = build_library_from([("a.sgi", sgi.getvalue()), ("b.eps", eps), ("c.png", _png((5, 5, 5)))])
    assert list(library.names) == ["c.png"]
    assert {name: "accepted format" in reason for name, reason in skipped} == {"a.sgi": True, "b.eps": True}
    with pytest.raises(Exception, match="accepted format"):
        open_image(eps)


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_wide_grey_images_convert_exactly_band_by_band(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import mosaic.images

    monkeypatch.setattr(mosaic.images, "_BAND_PIXELS", 7)  # many bands, one of them short
    top = {"I;16": 65535, "I": 65535, "F": 1.0}[mode]
    values = np.linspace(0, top, 12 * 5).reshape(5, 12)
    dtype = {"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]
    image = Image.fromarray(values.astype(dtype), mode if mode != "I;16" else None)
    grey = np.asarray(to_rgb(image))[:, :, 0]
    expected = np.clip(np.rint(values.astype(dtype).astype(np.float64) * (255.0 / top)), 0, 255).astype(np.uint8)
    assert image.mode.startswith(mode[0]) and np.array_equal(grey, expected)


def _many_entries_zip(count: int) -> bytes:
    """A stored zip of ``count`` empty files, written by hand (zip64 end records past 65,535)."""
    from mosaic.stored_zip import central_directory, local_entries

    members, body = local_entries((f"e{i:06d}.jpg", b"") for i in range(count))
    return body + central_directory(members)


@pytest.mark.parametrize("count", [3000, 100_000])
def test_a_zip_of_too_many_entries_is_refused_from_its_end_record(count: int, monkeypatch) -> None:
    """The count is read from the end record (zip64's past 65,535) before ``zipfile`` parses the
    directory: 100,000 entries cost 32 MB and 0.9 s to parse just to be refused."""
    import mosaic.sources

    data = _many_entries_zip(count)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the whole directory was parsed")

    monkeypatch.setattr(mosaic.sources.zipfile, "ZipFile", never)
    with pytest.raises(SourceLimitError, match=f"{count:,} entries"):
        open_tile_sources([("many.zip", io.BytesIO(data))], SourceLimits(max_files=2000))


def test_a_zip_whose_directory_is_larger_than_its_count_needs_is_refused(monkeypatch) -> None:
    """``zipfile`` parses the directory by its size, not its count: a small count is not enough."""
    import mosaic.sources

    data = bytearray(_many_entries_zip(3000))
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = (5).to_bytes(2, "little") * 2  # claims 5 entries
    monkeypatch.setattr(mosaic.sources.zipfile, "ZipFile", None)
    with pytest.raises(SourceLimitError, match="directory"):
        open_tile_sources([("lying.zip", io.BytesIO(bytes(data)))], SourceLimits(max_files=100))


def test_a_zip_within_the_limits_is_read_as_before() -> None:
    with open_tile_sources([("few.zip", io.BytesIO(_many_entries_zip(50)))], SourceLimits(max_files=2000)) as sources:
        assert len(sources) == 50
