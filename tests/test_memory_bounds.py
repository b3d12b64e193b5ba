"""Peak memory per request, measured on real processes (``VmHWM``), never assumed.

- The web app in its own process receives zip bombs as library uploads (8 zips of 10
  members of 50 MB of zeros each: 4 GB unpacked from 4 MB sent; and 40 such zips) and
  answers 413 while its peak resident memory stays under ``WEB_PEAK_BOUND``; a zip of
  large real photos is decoded one file at a time under the same bound.
- The controller's decoder (``mosaic.images.open_image``) turns a 60 MP 16-bit PNG into RGB
  in a process whose peak stays under ``DECODE_PEAK_BOUND`` (a float64 copy of the whole
  photo alone would be 480 MB).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.peak_rss import MIB, peak_rss

ROOT = Path(__file__).resolve().parent.parent
# The web pod's limit is 1 GiB for two worker processes: one request must stay well inside half.
WEB_PEAK_BOUND = 400 * MIB
DECODE_PEAK_BOUND = 600 * MIB
ZEROS_MEMBER = 50_000_000

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")


@pytest.fixture
def web_process(azurite_connection_string: str, unique: str) -> Iterator[dict[str, Any]]:
    env = {
        **os.environ,
        "AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string,
        "PHOTOMOSAICS_NAME_PREFIX": f"m{unique}",
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "support" / "web_process.py")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield {"url": f"http://127.0.0.1:{port}", "pid": process.pid}
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def zeros_zip(members: int, size: int = ZEROS_MEMBER) -> bytes:
    """A zip of ``members`` files of ``size`` zero bytes (about 1,000:1 deflated)."""
    out = io.BytesIO()
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(members):
            with archive.open(f"photo-{i:02d}.jpg", "w") as member:
                for start in range(0, size, len(chunk)):
                    member.write(chunk[: min(len(chunk), size - start)])
    return out.getvalue()


def _post_library(url: str, name: str, files: list[tuple[str, bytes]]) -> requests.Response:
    return requests.post(
        f"{url}/api/libraries",
        data={"name": name},
        files=[("files", (filename, data, "application/octet-stream")) for filename, data in files],
        headers={"X-Requested-With": "photomosaics"},
        timeout=300,
    )


@pytest.mark.parametrize("zips", [8, 40])
def test_a_zip_bomb_library_is_413_and_the_web_process_stays_small(web_process: dict[str, Any], zips: int) -> None:
    bomb = zeros_zip(10)
    files = [(f"bomb-{i}.zip", bomb) for i in range(zips)]
    sent = sum(len(data) for _, data in files)
    assert sent < 30 * MIB  # under the body limit: the app's own checks must refuse it

    response = _post_library(web_process["url"], "bombed", files)

    peak = peak_rss(web_process["pid"])
    print(
        f"{zips} zips x 10 x 50 MB of zeros ({sent / MIB:.1f} MiB sent, {zips * 10 * ZEROS_MEMBER / 1e9:.0f} GB "
        f"unpacked): {response.status_code}, web peak RSS {peak / MIB:.0f} MiB (bound {WEB_PEAK_BOUND // MIB})"
    )
    assert response.status_code == 413 and response.json()["error"] == "too_large", response.text
    assert "unpack" in response.json()["detail"]
    assert peak < WEB_PEAK_BOUND
    assert requests.get(f"{web_process['url']}/api/libraries/bombed", timeout=30).status_code == 404  # nothing stored


def test_large_photos_in_a_zip_are_decoded_one_at_a_time(web_process: dict[str, Any]) -> None:
    from PIL import Image

    big = io.BytesIO()
    Image.new("RGB", (6000, 5000), (90, 140, 200)).save(big, "PNG")  # 30 MP, a few hundred KB
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for i in range(8):
            archive.writestr(f"big-{i}.png", big.getvalue())

    response = _post_library(web_process["url"], "bigphotos", [("big.zip", out.getvalue())])

    peak = peak_rss(web_process["pid"])
    print(
        f"8 x 30 MP PNG in one zip: {response.status_code}, web peak RSS {peak / MIB:.0f} MiB (bound {WEB_PEAK_BOUND // MIB})"
    )
    assert response.status_code == 201, response.text
    assert response.json()["tile_count"] == 8
    assert peak < WEB_PEAK_BOUND


_DECODE_16_BIT = """
import sys
from pathlib import Path
from mosaic.images import open_image
from tests.support.peak_rss import peak_rss
data = Path(sys.argv[1]).read_bytes()
before = peak_rss()
image = open_image(data)
assert image.mode == "RGB" and image.size == (8000, 7500), (image.mode, image.size)
print(before, peak_rss(), image.getpixel((0, 0)), image.getpixel((7999, 7499)))
"""

_WRITE_16_BIT = """
import sys
import numpy as np
from PIL import Image
ramp = (np.arange(8000, dtype=np.uint32) * 65535 // 7999).astype(np.uint16)
Image.fromarray(np.broadcast_to(ramp, (7500, 8000)).copy()).save(sys.argv[1], compress_level=1)
"""


def test_a_16_bit_60_mp_photo_converts_without_a_float64_copy(tmp_path: Path) -> None:
    photo = tmp_path / "sixteen.png"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", _WRITE_16_BIT, str(photo)], check=True, env=env, cwd=ROOT)

    done = subprocess.run(
        [sys.executable, "-c", _DECODE_16_BIT, str(photo)],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )

    before, peak, pixels = done.stdout.split(maxsplit=2)
    print(
        f"60 MP 16-bit PNG to RGB: peak RSS {int(peak) / MIB:.0f} MiB (bound {DECODE_PEAK_BOUND // MIB}; "
        f"before decoding {int(before) / MIB:.0f} MiB)"
    )
    assert pixels.split() == ["(0,", "0,", "0)", "(255,", "255,", "255)"]  # black to white: scaled, not clipped
    assert int(peak) < DECODE_PEAK_BOUND
