"""Giant mosaics: time and peak memory per role for a 40 MP and a 400 MP job (issue 13).

Each job runs through real ``photomosaics controller``, ``responder`` and two ``processor``
processes on a fresh in-memory Azurite (``tests/giant_job.py``: a small synthetic library,
64 px tiles, so the work is the pixels: rendering bands of at most 50 MP, the streaming
stitch into the JPEG and the Deep Zoom zip). Peak RSS is each role's ``VmHWM``; the goal is
every role under 1.5 GB at 400 MP. This is also the 400 MP pipeline test: it runs here, not
in ``make test``, because it renders for minutes (the suite's ``tests/test_stitch_memory.py``
checks that the stitch does not grow with the mosaic). ``PHOTOMOSAICS_BENCH_GIANT_MP=40,400``
picks the sizes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

GOAL_BYTES = 1.5e9
ROLES = ("controller", "processor", "responder")


def main() -> int:
    from dal.azurite import Azurite
    from tests.giant_job import run_giant_job

    sizes = [float(mp) for mp in os.environ.get("PHOTOMOSAICS_BENCH_GIANT_MP", "40,400").split(",")]
    azurite = Azurite()
    azurite.start()
    failed = False
    try:
        print("| job | slices | seconds (submit to done) | " + " | ".join(f"{r} peak RSS" for r in ROLES) + " | goal |")
        print("|---|---|---|" + "---|" * len(ROLES) + "---|")
        for mp in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                result = run_giant_job(azurite.connection_string, Path(tmp), megapixels=mp)
            peaks = result["peak_rss"]
            ok = all(peaks[r] < GOAL_BYTES for r in ROLES)
            failed |= not ok
            w, h = result["output"]
            print(f"| {w}x{h} ({result['megapixels']:.0f} MP) | {result['slices']} | {result['seconds']:.1f} | "
                  + " | ".join(f"{peaks[r] / 2**20:.0f} MB" for r in ROLES)
                  + f" | every role < 1.5 GB: {'ok' if ok else 'MISSED'} |", flush=True)  # fmt: skip
            print(f"  stitch stages (s): {result['stitch_stages']}", flush=True)
    finally:
        azurite.stop()
    return 1 if failed else 0
