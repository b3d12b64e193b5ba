"""A progressive JPEG's decoding memory, read from its header, against what libjpeg really holds."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mosaic import photo_index
from mosaic.jpeg_memory import progressive_frame
from mosaic.photo_index import PhotoRefused, decode_photo


def _jpeg(size: tuple[int, int], *, progressive: bool, subsampling: int) -> bytes:
    rng = np.random.default_rng(7)
    image = Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).resize(size, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85, progressive=progressive, subsampling=subsampling)
    return out.getvalue()


def test_a_baseline_jpeg_and_other_files_have_no_progressive_frame() -> None:
    assert progressive_frame(_jpeg((640, 480), progressive=False, subsampling=2)) is None
    assert progressive_frame(b"\x89PNG\r\n\x1a\n" + b"\0" * 64) is None
    assert progressive_frame(b"\xff\xd8\xff\xe0\x00") is None  # cut short: left to the decoder


@pytest.mark.parametrize("subsampling", [0, 1, 2], ids=["4:4:4", "4:2:2", "4:2:0"])
def test_the_header_figure_is_what_the_decoder_holds(tmp_path: Path, subsampling: int) -> None:
    """Measured in a fresh process: its peak RSS grows by the header's figure while a 1/8 decode
    of a 6,000 x 4,000 progressive JPEG runs (the output itself is 750 x 500)."""
    data = _jpeg((6000, 4000), progressive=True, subsampling=subsampling)
    frame = progressive_frame(data)
    assert frame is not None and (frame.width, frame.height) == (6000, 4000)
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's RSS at the fork (kept over exec).
    script = (
        "import io, re, sys\n"
        "from PIL import Image\n"
        "peak = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "image = Image.open(io.BytesIO(data)); image.draft('RGB', (750, 500))\n"
        "before = peak()\n"
        "image.load()\n"
        "print(peak() - before, image.size)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    grown = int(done.stdout.split()[0])
    assert 0.85 * frame.coefficient_bytes <= grown <= 1.15 * frame.coefficient_bytes + 8 * 2**20, (grown, frame)


def test_the_indexer_refuses_a_progressive_jpeg_that_would_hold_too_much(monkeypatch: pytest.MonkeyPatch) -> None:
    full = _jpeg((2000, 1500), progressive=True, subsampling=0)  # 4:4:4: 17.2 MiB of coefficients
    half = _jpeg((2000, 1500), progressive=True, subsampling=2)  # 4:2:0: 8.6 MiB
    monkeypatch.setattr(photo_index, "MAX_PROGRESSIVE_BYTES", 12 * 2**20)
    with pytest.raises(PhotoRefused, match=r"progressive JPEG of 2000x1500 pixels: decoding it holds 17 MiB"):
        decode_photo(full)
    assert decode_photo(half).size == (500, 375)  # 1/4, within the slack of the work size
    assert decode_photo(_jpeg((2000, 1500), progressive=False, subsampling=0)).size == (500, 375)
