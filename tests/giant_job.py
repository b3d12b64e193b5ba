"""One big job through real role processes on Azurite, with each role's peak RSS.

Shared by ``tests/test_giant_job.py`` (memory asserted, never time) and ``benchmarks/giant.py``
(time and memory printed for 40 and 400 MP). The job is as cheap as a job of that size can
be: a small synthetic library, 64 px tiles (fewest cells to match), a small source photo;
the pixels still all exist, so every role does the real work of its size: processors render
bands of up to 50 MP (``mosaic.limits.MAX_SLICE_PIXELS``), the controller streams them into
the JPEG and the Deep Zoom zip. Peak RSS is the kernel's high-water mark (``VmHWM`` in
``/proc/<pid>/status``), read just before the roles are stopped.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from tests.pipeline_helpers import Pipeline, sample_photo, synthetic_library

TILE = 64
GIANT_ENV = {"PHOTOMOSAICS_VISIBILITY_TIMEOUT": "120", "PHOTOMOSAICS_POLL_MAX_SECONDS": "0.5"}


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def run_giant_job(connection_string: str, tmp: Path, *, megapixels: float, processors: int = 2,
                  timeout: float = 900) -> dict[str, Any]:  # fmt: skip
    """Run one ``megapixels`` job (3:2) to done; its size, slices, seconds and peak RSS per role."""
    pipe = Pipeline(connection_string, tmp)
    pipe.library_uri = pipe.create_library("tiles", synthetic_library(24))
    roles = [pipe.start("controller", env=GIANT_ENV), pipe.start("responder", env=GIANT_ENV)]
    roles += [pipe.start("processor", env=GIANT_ENV) for _ in range(processors)]
    try:
        across = int(math.sqrt(megapixels * 1e6 * 1.5)) // TILE
        rid = pipe.submit(sample_photo(300, 200, seed=13), library_uri=pipe.library_uri, tile_size=TILE,
                          slices=1, tiles_across=across)  # fmt: skip
        started = time.perf_counter()
        job = pipe.wait([rid], timeout=timeout)[rid]
        seconds = time.perf_counter() - started
        assert job.status == "done", f"{job.status}: {job.error}\n{pipe.logs()}"
        peaks: dict[str, int] = {}
        for role in roles:
            peaks[role.role] = max(peaks.get(role.role, 0), peak_rss_bytes(role.pid))
        stitched = [e for e in pipe.services.jobs.events(rid) if e.kind == "stitched"]
        return {
            "request_id": rid,
            "output": (job.output_width, job.output_height),
            "megapixels": job.output_width * job.output_height / 1e6,
            "slices": job.slices,
            "seconds": seconds,
            "stitch_stages": stitched[0].stages if stitched else {},
            "peak_rss": peaks,
            "pipe": pipe,
        }
    finally:
        pipe.stop_all()
