"""Where a job's time and transactions go: the hand-offs between roles, before and after.

Two jobs, on a warm set of real role processes (controller, responder, two
processors, as ``make run`` starts them) and a fresh in-memory Azurite:

- **small**: a 960 × 752 mosaic (60 tiles across at tile 16) in 4 slices, submit → done,
  median of ``SMALL_RUNS`` (goal ≤ 0.6 s), and its storage transactions without the client's
  status polls (goal ≤ 8 × slices + 20 = 52);
- **large**: a 1 MP photo at tile 16 (a 40 MP mosaic) in 1 slice, pipeline ÷ the offline
  render of the same job (goal ≤ 1.3×). The pipeline's job makes a JPEG *and* a Deep Zoom
  pyramid (every job has one), so the same job offline is ``open_image`` +
  ``render`` + both outputs from the in-memory pixels at once (``offline_outputs``, what
  ``photomosaics render -o x.jpg -o x.dzi`` does: the fastest way offline). Beside it, for
  reference, the ratio to the issue's first baseline, the JPEG alone (``encode_output``), which
  the pyramid's own encoding keeps above 1.3×; and the time until the job's JPEG is stored.
  Both offline figures come from the same renders (best of two), timed right before each of
  ``LARGE_RUNS`` pipeline jobs, so the ratios compare like with like; the median ratio is
  reported, with its range.

"Submit → done" runs from the start of the photo's upload to the time of the job's "done"
event (written by the role that finished it; one machine, one clock), not to when the
benchmark's own poll of the job row noticed it (every 0.25 s: it would otherwise add its load to
the roles' while they work): the poll is the observer's lag.

For each, the per-stage breakdown comes from the job's own event log (``stages`` written
by the controller and the processors, ``workers/stages.py``): upload, image download and
decode, slicing, band encode/upload, band download/decode, render, slice encode/upload,
slice download/decode, stitch, output encode/upload; what is left of the wall time is
queue pickup and table writes ("waits").

**Before and after, side by side in one run**: the same jobs also run on the roles of an
older commit (``PHOTOMOSAICS_BENCH_BEFORE``, default ``BEFORE_REF``: the pipeline before
the queue runtime's wake-up hints), checked out with ``git archive`` into a temporary folder and started with the
same interpreter; set it to ``none`` to skip. Roles run as ``make run`` starts them: default
polling (0.1 s doubling to 2 s) and a shared hint folder (``PHOTOMOSAICS_HINT_DIR``; roles of
a tree without hints ignore it and poll), so the transactions counted are a user's, empty
receives included. ``PHOTOMOSAICS_BENCH_FAST_POLL=1`` polls every 0.05..0.2 s without hints
instead (the figures of the first run, 2026-11-23), to isolate the hand-offs from pickup.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

from benchmarks import pipeline as pl

BEFORE_REF = "4320be1"  # the pipeline before wake-up hints and hand-back ("merge main" after the poison operations)
BEFORE_ENV = "PHOTOMOSAICS_BENCH_BEFORE"
SMALL = {"size": (960, 752), "tile": 16, "tiles_across": 60, "slices": 4}
LARGE = {"size": (1152, 864), "tile": 16, "tiles_across": None, "slices": 1}
SMALL_RUNS = 5
LARGE_RUNS = 3  # each against an offline render timed right before it; the median ratio is reported
ROLE_ENV = {"PHOTOMOSAICS_LOG_LEVEL": "WARNING"}
FAST_POLL_ENV = {"PHOTOMOSAICS_POLL_MIN_SECONDS": "0.05", "PHOTOMOSAICS_POLL_MAX_SECONDS": "0.2"}
GOALS = {"small_seconds": 0.6, "small_transactions": 8 * SMALL["slices"] + 20, "large_ratio": 1.3}


def _tree(ref: str, into: Path) -> Path | None:
    """A checkout of ``ref`` (its files only) for the "before" roles; None when git cannot."""
    root = Path(__file__).resolve().parent.parent
    try:
        data = subprocess.run(["git", "-C", str(root), "archive", ref], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"  (no 'before' run: git archive {ref} failed: {getattr(exc, 'stderr', b'')!r})", flush=True)
        return None
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return into


class _Roles(pl.Roles):
    """``benchmarks.pipeline.Roles`` whose processes may run another tree's code."""

    def __init__(self, cs: str, folder: Path, env: dict[str, str], tree: Path | None) -> None:
        super().__init__(cs, folder, env)
        self.tree = tree

    def start(self, role: str) -> None:
        argv = [sys.executable, "-c", "from photomosaics.cli import main; main()", role]
        env = dict(self.env)
        if self.tree is not None:  # its modules first on the path, ahead of this checkout
            env["PYTHONPATH"] = str(self.tree)
        self.processes.append(
            subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tree or None)
        )


def _submit(services: Any, data: bytes, library_uri: str, job: dict[str, Any]) -> tuple[str, float, float]:
    """Upload + send like the web app; (request id, time of the upload start, upload seconds)."""
    import uuid
    from datetime import datetime

    from dal.queues.messages import ImageRequestMessage

    request_id = str(uuid.uuid4())
    queue = services.queues.image_request
    started = time.perf_counter()
    pl.SUBMITTED[request_id] = datetime.now(UTC)
    url = services.blobs.upload("imageinput", f"{request_id}.jpg", data, content_type="image/jpeg")
    uploaded = time.perf_counter() - started
    queue.submit(
        ImageRequestMessage(
            queue_uri=queue.url,
            client_id=pl.CLIENT_ID,
            request_id=request_id,
            image_uri=url,
            image_library_uri=library_uri,
            tile_size=job["tile"],
            slices=job["slices"],
            tiles_across=job["tiles_across"],
        )
    )
    return request_id, started, uploaded


def breakdown(services: Any, request_id: str, wall: float, upload: float) -> dict[str, float]:
    """Seconds per stage on the job's critical path; slices in parallel count their slowest."""
    events = services.jobs.events(request_id, job=services.jobs.get(pl.CLIENT_ID, request_id))
    stages: Counter[str] = Counter({"upload": upload})
    slowest: dict[str, float] = {}
    slice_stages: dict[int, dict[str, float]] = {}
    for event in events:
        if not event.stages:
            continue
        if event.kind == "slice_done" and event.slice is not None:
            slice_stages[event.slice] = event.stages
        else:
            stages.update(event.stages)
    if slice_stages:
        worst = max(slice_stages.values(), key=lambda s: sum(s.values()))
        slowest = dict(worst)
    stages.update(slowest)
    stages["waits (queues, tables)"] = max(0.0, wall - sum(stages.values()))
    return dict(stages)


def run_jobs(
    cs: str,
    folder: Path,
    tree: Path | None,
    services: Any,
    library_uri: str,
    small: bytes,
    large: bytes,
    offline_now: Any = None,
) -> dict[str, Any]:
    from dal.hints.channel import HINT_DIR_ENV, LocalHintChannel, short_hint_dir

    folder.mkdir()
    env = dict(ROLE_ENV)
    queue = services.queues.image_request
    if os.environ.get("PHOTOMOSAICS_BENCH_FAST_POLL"):
        env.update(FAST_POLL_ENV)
        queue.hints = None
    else:  # as under `make run`: this machine's hint folder, and the "web side" publishes too
        hints = short_hint_dir(folder / "hints")
        env[HINT_DIR_ENV] = str(hints)
        queue.hints = LocalHintChannel(hints)
    roles = _Roles(cs, folder, env, tree)
    for role in ("controller", "responder", "processor", "processor"):
        roles.start(role)
    result: dict[str, Any] = {"small": [], "large": []}
    try:
        roles.wait_ready()
        for job, data, runs in ((SMALL, small, SMALL_RUNS + 1), (LARGE, large, LARGE_RUNS + 1)):
            for i in range(runs):  # the first of each kind warms the roles up, not counted
                # On a shared machine the load changes by the minute: the large job's offline
                # render is timed again right before it, so the ratio compares like with like.
                adjacent = offline_now() if job is LARGE and i and offline_now is not None else None
                before = roles.snapshot()
                rid, started, upload = _submit(services, data, library_uri, job)
                # The time comes from the job's done event, so the poll can be slow: a fast one
                # would load the machine (and Azurite) while the roles work.
                done = pl.wait_done(services, rid, interval=0.25)
                wall = _done_after(services, rid, fallback=time.perf_counter() - started)
                _settled(services, rid)  # the responder's event and delete come after the row says done
                after = roles.snapshot()
                operations, stats = pl.diff(before, after)
                operations["blob PutBlob"] += 1  # the client's upload ...
                operations["queue PutMessage"] += 1  # ... and its ImageRequest
                if i == 0:
                    continue
                row = {
                    "rid": rid,
                    "seconds": wall,
                    "output": [done.output_width, done.output_height],
                    "transactions": sum(operations.values()),
                    "operations": dict(operations),
                    "empty_receives": stats["empty_receives"],
                    "stages": breakdown(services, rid, wall, upload),
                    "timeline": pl.timeline(services, rid),
                }
                if job is SMALL:
                    result["small"].append(row)
                else:
                    row["offline_adjacent"] = adjacent
                    row["jpeg_ready"] = _jpeg_ready(services, rid)
                    result["large"].append(row)
    finally:
        roles.stop()
    return result


def _done_after(services: Any, request_id: str, *, fallback: float) -> float:
    """Seconds from the upload's start to the job's "done" event, by the event's own time (the
    same clock: one machine), not by when this process's 50 ms poll of the row saw it."""
    start = pl.SUBMITTED[request_id]
    done = [
        e.at
        for e in services.jobs.events(request_id, job=services.jobs.get(pl.CLIENT_ID, request_id))
        if e.kind == "done"
    ]
    return (max(done) - start).total_seconds() if done else fallback


def _settled(services: Any, request_id: str, *, timeout: float = 10.0) -> None:
    """Wait until the job's "done" event is written, then a moment for the responder's delete:
    the row says done before them, and a snapshot taken at once would miss both."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(e.kind == "done" for e in services.jobs.events(request_id)):
        time.sleep(0.05)
    time.sleep(0.5)


def _jpeg_ready(services: Any, request_id: str) -> float | None:
    """Seconds from the upload to the one-slice job's JPEG stored: its processor's slice_done
    event, less the pyramid steps it logged after the JPEG's upload (a processor that builds
    the pyramid beside the JPEG); what is left after it is the pyramid and the responder."""
    start = pl.SUBMITTED[request_id]
    job = services.jobs.get(pl.CLIENT_ID, request_id)
    done = [
        e.at - timedelta(seconds=sum((e.stages or {}).get(k, 0.0) for k in ("pyramid_build", "pyramid_upload")))
        for e in services.jobs.events(request_id, job=job)
        if e.kind == "slice_done"
    ]
    return (max(done) - start).total_seconds() if done else None


def offline(data: bytes, library: Any, max_output_pixels: int) -> dict[str, float]:
    """Seconds of the offline render of the large job, best of two: ``jpeg`` (decode + render +
    JPEG, the issue's original baseline) and ``outputs`` (decode + render + JPEG and Deep Zoom
    pyramid at once: the same outputs as the pipeline's job), from the same renders."""
    from mosaic.images import open_image
    from mosaic.render import render
    from workers.imaging.slicing import encode_output

    best = {"jpeg": float("inf"), "outputs": float("inf")}
    with tempfile.TemporaryDirectory(prefix="bench-offline-") as tmp:
        for _ in range(2):
            start = time.perf_counter()
            out = render(
                open_image(data),
                library,
                tile_size=LARGE["tile"],
                tiles_across=LARGE["tiles_across"],
                seed="bench",
                max_output_pixels=max_output_pixels,
            )
            rendered = time.perf_counter() - start
            start = time.perf_counter()
            encode_output(out)
            best["jpeg"] = min(best["jpeg"], rendered + time.perf_counter() - start)
            start = time.perf_counter()
            offline_outputs(out, Path(tmp) / "mosaic.zip")
            best["outputs"] = min(best["outputs"], rendered + time.perf_counter() - start)
    return best


def offline_outputs(pixels: Any, pyramid: Path) -> bytes:
    """The JPEG and the pyramid zip of in-memory pixels, at once (libvips outside the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    from workers.imaging.slicing import encode_output
    from workers.imaging.stitching import save_pyramid_pixels

    with ThreadPoolExecutor(max_workers=1) as pool:
        building = pool.submit(save_pyramid_pixels, pixels, pyramid)
        jpeg = encode_output(pixels)
        building.result()
    return jpeg


def main() -> int:
    from benchmarks.photos import target_jpeg
    from dal.config import Settings, StorageClients
    from photomosaics.local.azurite import Azurite
    from workers.demo_library import ensure_demo_library
    from workers.services import RoleServices

    ref = os.environ.get(BEFORE_ENV, BEFORE_REF)
    with Azurite() as azurite, tempfile.TemporaryDirectory(prefix="bench-handoffs-") as tmp:
        cs = azurite.connection_string
        settings = Settings.from_env({})
        services = RoleServices(StorageClients(cs, profile="worker"), settings, "bench")
        services.ensure()
        library_uri = ensure_demo_library(services.storage)
        library = services.libraries.load(library_uri)
        small = target_jpeg("chelsea", SMALL["size"])
        large = target_jpeg("chelsea", LARGE["size"])
        local = offline(large, library, settings.max_output_pixels)["jpeg"]
        print(f"offline render of the large job: {local:.2f} s", flush=True)
        results: dict[str, Any] = {}
        trees = {"after": None}
        if ref.lower() != "none" and (tree := _tree(ref, Path(tmp) / "before")) is not None:
            trees = {"before": tree, "after": None}
        for label, tree in trees.items():
            print(f"  running the jobs on the {label} roles ...", flush=True)
            results[label] = run_jobs(
                cs,
                Path(tmp) / f"{label}-counts",
                tree,
                services,
                library_uri,
                small,
                large,
                offline_now=lambda: offline(large, library, settings.max_output_pixels),
            )
    report(results, ref)
    pl.RESULTS.mkdir(exist_ok=True)
    import json

    (pl.RESULTS / "handoffs.json").write_text(
        json.dumps({"offline_seconds": local, "before_ref": ref, **results}, indent=1)
    )
    return 0


def report(results: dict[str, Any], ref: str) -> None:
    labels = list(results)

    def small_median(label: str, key: str) -> float:
        return statistics.median(r[key] for r in results[label]["small"])

    polling = (
        "fast polling, no hints"
        if os.environ.get("PHOTOMOSAICS_BENCH_FAST_POLL")
        else "default polling and hints, as make run"
    )
    print(f"\nhand-offs (before = {ref}, after = this checkout; 2 processors, {polling}):")
    print("| measure | goal | " + " | ".join(labels) + " |")
    print("|---|---:|" + "---:|" * len(labels))
    print(
        f"| small job (960x752, 4 slices) submit -> done, median of {SMALL_RUNS} | <= {GOALS['small_seconds']} s | "
        + " | ".join(f"{small_median(x, 'seconds'):.2f} s" for x in labels)
        + " |"
    )
    print(
        f"| storage transactions per small job (no status polls) | <= {GOALS['small_transactions']} | "
        + " | ".join(
            f"{small_median(x, 'transactions'):.0f} ({small_median(x, 'empty_receives'):.0f} empty receives)"
            for x in labels
        )
        + " |"
    )

    def adjacent(x: str, key: str, baseline: str = "jpeg") -> str:
        """The median over the large runs of (pipeline / offline render timed right before it), and its range."""
        pairs = [(r[key], (r.get("offline_adjacent") or {}).get(baseline)) for r in results[x]["large"]]
        pairs = [(got, offline_s) for got, offline_s in pairs if got and offline_s]
        if not pairs:
            return "-"
        ratios = sorted(got / offline_s for got, offline_s in pairs)
        got, offline_s = min(pairs, key=lambda p: abs(p[0] / p[1] - statistics.median(ratios)))
        spread = f", {ratios[0]:.2f}-{ratios[-1]:.2f}" if len(ratios) > 1 else ""
        return f"{statistics.median(ratios):.2f}x ({got:.2f} s / {offline_s:.2f} s{spread})"

    print(
        f"| large job (1 MP photo, tile 16, 40 MP out, 1 slice) / offline render of the same job (its JPEG and Deep Zoom "
        f"pyramid, as `render -o x.jpg -o x.dzi`) timed right before it, median of {LARGE_RUNS} (range) | <= {GOALS['large_ratio']}x | "
        + " | ".join(adjacent(x, "seconds", "outputs") for x in labels)
        + " |"
    )
    print(
        "| large job / offline render of the JPEG alone (no pyramid: the issue's first baseline) | | "
        + " | ".join(adjacent(x, "seconds") for x in labels)
        + " |"
    )
    print(
        "| ... its JPEG stored (before the pyramid's commit) / offline render of the JPEG alone | | "
        + " | ".join(adjacent(x, "jpeg_ready") for x in labels)
        + " |"
    )
    for name, pick in (("small job (its median run)", _median_row), ("large job (its median run)", _median_row)):
        print(f"\nWhere the time goes, {name}, seconds per stage (critical path; parallel slices: the slowest):")
        rows = {x: pick(results[x]["small"] if "small" in name else results[x]["large"]) for x in labels}
        stages = sorted({s for r in rows.values() for s in r["stages"]}, key=_stage_order)
        print("| stage | " + " | ".join(labels) + " |")
        print("|---|" + "---:|" * len(labels))
        for stage in stages:
            print(f"| {stage} | " + " | ".join(f"{rows[x]['stages'].get(stage, 0):.3f}" for x in labels) + " |")
        print("| **wall** | " + " | ".join(f"{rows[x]['seconds']:.3f}" for x in labels) + " |")
    for x in labels:
        print(f"\nTimeline of the median small job, {x} (event log, from the ImageRequest upload):")
        for line in _median_row(results[x]["small"])["timeline"]:
            print(f"  {line}")
    print("\nTransactions per small job by operation (median run):")
    rows = {x: _median_row(results[x]["small"]) for x in labels}
    names = sorted({op for r in rows.values() for op in r["operations"]})
    print("| operation | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for op in names:
        print(f"| {op} | " + " | ".join(str(rows[x]["operations"].get(op, 0)) for x in labels) + " |")
    print(
        "(a role that logs no stages, as before, shows its steps inside 'waits'; work done in two threads at once\n"
        " counts on the critical path only: pyramid_build is what the pyramid took beyond the JPEG beside it)"
    )


_ORDER = [
    "upload",
    "image_download",
    "image_decode",
    "job_record",
    "slicing",
    "band_encode_upload",
    "dispatch",
    "band_download",
    "band_decode",
    "render",
    "slice_encode",
    "slice_upload",
    "output_encode",
    "output_upload",
    "slice_download",
    "slice_decode",
    "stitch",
    "pyramid_check",
    "output_download",
    "pyramid_build",
    "pyramid_upload",
]


def _stage_order(name: str) -> tuple[int, str]:
    return (_ORDER.index(name) if name in _ORDER else len(_ORDER), name)


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: r["seconds"])
    return ordered[len(ordered) // 2]


if __name__ == "__main__":
    sys.exit(main())
