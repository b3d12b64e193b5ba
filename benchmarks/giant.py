"""Giant mosaics: the pipeline beside the offline render, and every role's peak memory, at 400 MP and 1 GP.

Each job runs through real ``photomosaics controller``, ``responder``, two ``processor`` and
one ``web`` (gunicorn, one worker) processes on a fresh Azurite kept on disk in a temporary
folder (``tests/support/giant_job.py``: a small synthetic library, 64 px tiles, so the work is the
pixels). Printed beside their goals:

- **400 MP** (24,448 x 16,320): submit to done, and the offline render of the same outputs in
  the same run (``photomosaics render -o x.jpg -o x.dzi`` in one process, the same library and
  seed): goal <= 1.5x. The controller's serial work (submit to the first slice dispatched, plus
  the last slice done to done): goal <= 15 % of the offline render. The time modelled for 4, 8
  and 16 processors from the measured serial and parallel parts (the bands are rendered in
  waves of N: ``serial + ceil(bands / N) x parallel / ceil(bands / 2)``). Azurite's CPU seconds
  (goal: at most half of the 36 s the stitch of slices cost). Whether the pipeline's JPEG is
  the offline render's, byte for byte.
- **1 GP** (about 38,720 x 25,792; ``PHOTOMOSAICS_MAX_OUTPUT_PIXELS`` raised to 1.05 GP for
  it, the default being 400 MP): submit to done and every role's peak RSS (goal < 1.5 GB),
  with its full-resolution JPEG and pyramid served. No offline render: it would hold ~8 GB.

Peak RSS is each role's ``VmHWM``. ``PHOTOMOSAICS_BENCH_GIANT_MP=400,1000`` picks the sizes.
``tests/test_giant_job.py`` asserts the 400 MP job's memory in the suite (never its time).
"""

from __future__ import annotations

import hashlib
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_BYTES = 1.5e9
GOAL_RATIO = 1.5
GOAL_SERIAL = 0.15
GOAL_AZURITE_CPU = 36.0 / 2  # half of the 400 MP job's Azurite CPU with slices stitched by the controller
ONE_GP_LIMIT = "1050000000"


def _offline(result: dict[str, Any], tmp: Path, megapixels: float, slices: int = 1) -> tuple[float, str]:
    """``photomosaics render`` of the job's photo, library and seed: (seconds, SHA-256 of its JPEG)."""
    from tests.support.giant_job import TILE
    from tests.support.pipelines import sample_photo

    photo = tmp / "photo.png"
    photo.write_bytes(sample_photo(300, 200, seed=13))
    across = int(math.sqrt(megapixels * 1e6 * 1.5)) // TILE
    pipe = result["pipe"]
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from photomosaics.cli import main; main()",
            "render",
            str(photo),
            "--library",
            "tiles",
            "--tile-size",
            str(TILE),
            "--tiles-across",
            str(across),
            "--slices",
            str(slices),
            "--seed",
            result["request_id"],
            "-o",
            str(tmp / "x.jpg"),
            "-o",
            str(tmp / "x.dzi"),
        ],
        env=pipe.env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the offline render failed: {done.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child so far: this render
    stated = next((line for line in done.stderr.splitlines() if "GB of memory" in line), "")
    print(f"  offline render: peak RSS {peak / 2**30:.2f} GB; it said: {stated.strip()}")
    return seconds, hashlib.sha256((tmp / "x.jpg").read_bytes()).hexdigest()


def _modelled(result: dict[str, Any], processors: int) -> float:
    """Serial part, plus the bands in waves of ``processors`` (a wave measured with 2 processors)."""
    serial = result["serial_before"] + result["serial_after"]
    parallel, bands = result["seconds"] - serial, result["slices"]
    return serial + math.ceil(bands / processors) * parallel / math.ceil(bands / 2)


def _report(result: dict[str, Any], azurite_cpu: float, offline: tuple[float, str] | None) -> bool:
    peaks = result["peak_rss"]
    ok = all(p < GOAL_BYTES for p in peaks.values())
    w, h = result["output"]
    print(
        f"\n{w}x{h} ({result['megapixels']:.0f} MP), {result['slices']} slices, 2 processors: "
        f"submit -> done {result['seconds']:.1f} s (serving afterwards {result['serve_seconds']:.1f} s)"
    )
    print(
        "  peak RSS: "
        + ", ".join(f"{r} {p / 2**20:.0f} MB" for r, p in peaks.items())
        + f"  | goal: every role < 1.5 GB: {'ok' if ok else 'MISSED'}"
    )
    serial = result["serial_before"] + result["serial_after"]
    print(
        f"  controller serial: {result['serial_before']:.1f} s before the first slice + "
        f"{result['serial_after']:.1f} s after the last = {serial:.1f} s"
    )
    if offline is not None:
        seconds, digest = offline
        ratio, share = result["seconds"] / seconds, serial / seconds
        ok &= ratio <= GOAL_RATIO and share <= GOAL_SERIAL
        print(
            f"  offline render of the same outputs: {seconds:.1f} s | pipeline / offline = {ratio:.2f}x "
            f"(goal <= {GOAL_RATIO}x: {'ok' if ratio <= GOAL_RATIO else 'MISSED'})"
        )
        print(
            f"  controller serial = {share:.0%} of the offline render (goal <= {GOAL_SERIAL:.0%}: "
            f"{'ok' if share <= GOAL_SERIAL else 'MISSED'})"
        )
        same = digest == result["served"]["result_sha256"]
        print(f"  pipeline JPEG == offline JPEG, byte for byte: {'yes' if same else 'NO'}")
        ok &= same
        print(
            "  modelled submit -> done: "
            + ", ".join(f"{n} processors {_modelled(result, n):.1f} s" for n in (2, 4, 8, 16))
        )
        ok &= azurite_cpu <= GOAL_AZURITE_CPU
        print(
            f"  Azurite CPU {azurite_cpu:.0f} s (goal <= {GOAL_AZURITE_CPU:.0f} s: "
            f"{'ok' if azurite_cpu <= GOAL_AZURITE_CPU else 'MISSED'})"
        )
    print(f"  stitch stages (s): {result['stitch_stages']}")
    if result["slice_stages"]:
        print(f"  slice stages, summed over slices (s): {result['slice_stages']}")
    print(
        "  CPU seconds: "
        + ", ".join(f"{r} {c:.0f}" for r, c in result["cpu_seconds"].items())
        + f", Azurite {azurite_cpu:.0f} (the seconds above depend on the machine's load; these do not)",
        flush=True,
    )
    return ok


def main() -> int:
    from photomosaics.local.azurite import Azurite
    from tests.support.giant_job import cpu_seconds, run_giant_job

    sizes = [float(mp) for mp in os.environ.get("PHOTOMOSAICS_BENCH_GIANT_MP", "400,1000").split(",")]
    failed = False
    for mp in sizes:
        saved = os.environ.get("PHOTOMOSAICS_MAX_OUTPUT_PIXELS")
        if mp > 400:
            os.environ["PHOTOMOSAICS_MAX_OUTPUT_PIXELS"] = ONE_GP_LIMIT
        try:
            with tempfile.TemporaryDirectory(prefix="bench-giant-") as folder:
                tmp = Path(folder)
                with Azurite(location=tmp / "azurite") as azurite:
                    result = run_giant_job(azurite.connection_string, tmp, megapixels=mp)
                    azurite_cpu = cpu_seconds(azurite.pid)  # type: ignore[arg-type]
                    offline = _offline(result, tmp, mp) if mp <= 400 else None
                failed |= not _report(result, azurite_cpu, offline)
        finally:
            if saved is None:
                os.environ.pop("PHOTOMOSAICS_MAX_OUTPUT_PIXELS", None)
            else:
                os.environ["PHOTOMOSAICS_MAX_OUTPUT_PIXELS"] = saved
    return 1 if failed else 0
