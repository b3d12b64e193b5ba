"""Giant mosaics: time and peak memory per role for a 40 MP and a 400 MP job (issue 13).

Each job runs through real ``photomosaics controller``, ``responder``, two ``processor`` and
one ``web`` (gunicorn, one worker) processes on a fresh Azurite kept on disk in a temporary
folder (``tests/support/giant_job.py``: a small synthetic library, 64 px tiles, so the work is the
pixels: rendering bands of at most 50 MP, the streaming stitch into the JPEG and the Deep
Zoom zip). The web role takes the job in, then serves what a person looks at: the job page,
previews, descriptor and tiles, the full-resolution JPEG and the pyramid zip downloaded
whole. Peak RSS is each role's ``VmHWM``; the goal is every role under 1.5 GB at 400 MP.
``tests/test_giant_job.py`` asserts the memory of the same 400 MP job in the suite; this
prints the seconds too. ``PHOTOMOSAICS_BENCH_GIANT_MP=40,400`` picks the sizes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

GOAL_BYTES = 1.5e9


def main() -> int:
    from photomosaics.local.azurite import Azurite
    from tests.support.giant_job import ROLES, cpu_seconds, run_giant_job

    sizes = [float(mp) for mp in os.environ.get("PHOTOMOSAICS_BENCH_GIANT_MP", "40,400").split(",")]
    failed = False
    print("| job | slices | seconds (submit to done) | seconds (serving) | "
          + " | ".join(f"{r} peak RSS" for r in ROLES) + " | goal |")  # fmt: skip
    print("|---|---|---|---|" + "---|" * len(ROLES) + "---|")
    for mp in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-giant-") as folder:
            tmp = Path(folder)
            with Azurite(location=tmp / "azurite") as azurite:
                result = run_giant_job(azurite.connection_string, tmp, megapixels=mp)
                azurite_cpu = cpu_seconds(azurite.pid)  # type: ignore[arg-type]
        peaks = result["peak_rss"]
        ok = all(peaks[r] < GOAL_BYTES for r in ROLES)
        failed |= not ok
        w, h = result["output"]
        print(f"| {w}x{h} ({result['megapixels']:.0f} MP) | {result['slices']} | {result['seconds']:.1f} | "
              f"{result['serve_seconds']:.1f} | " + " | ".join(f"{peaks[r] / 2**20:.0f} MB" for r in ROLES)
              + f" | every role < 1.5 GB: {'ok' if ok else 'MISSED'} |", flush=True)  # fmt: skip
        print(f"  stitch stages (s): {result['stitch_stages']}", flush=True)
        print(f"  slice stages, summed over slices (s): {result['slice_stages']}", flush=True)
        print("  CPU seconds: " + ", ".join(f"{r} {c:.0f}" for r, c in result["cpu_seconds"].items())
              + f", Azurite {azurite_cpu:.0f} (the seconds above depend on the machine's load; these do not)", flush=True)
    return 1 if failed else 0
