"""A JPEG concatenated from band segments (``workers.imaging.jpeg_segments``) decodes everywhere a person
opens it: libjpeg's ``djpeg``, Pillow, libvips and a real headless Chromium, to the single encode's pixels.

The assembly is byte-identical to one encode of the whole image (asserted here and in
``tests/test_giant_pieces.py``), so any decoder that reads one reads the other; what is new
to decoders is the restart marker after every MCU row, checked here in each.
"""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.prereqs import require
from workers.imaging.jpeg_segments import encode_segment, full_header, split_jpeg
from workers.imaging.slicing import encode_output

pytestmark = [pytest.mark.browser]


def _photo_like(height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    coarse = rng.integers(0, 256, size=(height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    image = np.kron(coarse, np.ones((16, 16, 1), dtype=np.uint8))[:height, :width]
    return (image.astype(np.int16) + rng.integers(-6, 6, size=image.shape)).clip(0, 255).astype(np.uint8)


def _assembled(pixels: np.ndarray, cuts: list[int]) -> bytes:
    parts = [encode_segment(pixels[a:b], last=b == pixels.shape[0]) for a, b in zip(cuts, cuts[1:])]
    return full_header(parts[0][0], pixels.shape[0]) + b"".join(scan for _, scan in parts)


def test_segments_concatenate_into_the_single_encode_and_decode_in_djpeg_pillow_libvips_and_chromium(
    tmp_path: Path, chromium: Any
) -> None:
    pixels = _photo_like(1100, 1333)  # odd sizes: partial MCUs at the right and the bottom
    jpeg = _assembled(pixels, [0, 128, 512, 1024, 1100])
    assert jpeg == encode_output(pixels)
    _, scan = split_jpeg(jpeg)
    assert scan.count(b"\xff\xd0") + scan.count(b"\xff\xd7") > 0, "restart markers in the scan"

    with Image.open(io.BytesIO(jpeg)) as decoded:
        pillow = np.asarray(decoded.convert("RGB"))
    import pyvips

    vips = pyvips.Image.new_from_buffer(jpeg, "").numpy()
    assert pillow.shape == vips.shape == pixels.shape
    assert np.array_equal(pillow, vips)
    assert np.abs(pillow.astype(int) - pixels).mean() < 10  # quality 90, 4:2:0 chroma on saturated random blocks

    djpeg = shutil.which("djpeg")
    require(djpeg is not None, "libjpeg's djpeg is not installed (apt-get install libjpeg-turbo-progs)")
    assert djpeg is not None
    (tmp_path / "m.jpg").write_bytes(jpeg)
    ppm = subprocess.run([djpeg, "-ppm", str(tmp_path / "m.jpg")], capture_output=True, check=True).stdout
    with Image.open(io.BytesIO(ppm)) as decoded:
        assert np.array_equal(np.asarray(decoded.convert("RGB")), pillow), "libjpeg's own decoder: the same pixels"

    context = chromium.new_context()  # the worker's browser (tests/web/conftest.py)
    try:
        page = context.new_page()
        url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
        drawn = page.evaluate(
            """async url => { const img = new Image(); img.src = url; await img.decode();
               const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
               const g = c.getContext('2d'); g.drawImage(img, 0, 0);
               return [img.naturalWidth, img.naturalHeight, c.toDataURL('image/png')]; }""",
            url,
        )
    finally:
        context.close()
    width, height, png = drawn
    assert (width, height) == (1333, 1100)
    drawn_pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(png.split(",", 1)[1]))).convert("RGB"))
    # Chromium's libjpeg-turbo may upsample chroma its own way: close to Pillow's, every row decoded.
    assert np.abs(drawn_pixels.astype(int) - pillow).mean() < 2
    assert np.abs(drawn_pixels[-16:].astype(int) - pillow[-16:]).mean() < 2, "the last band decoded too"
