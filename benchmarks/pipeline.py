"""The pipeline end to end: time and storage transactions of a large job, and of idleness.

One run, one machine, a fresh in-memory Azurite. A 12 MP photo (JPEG, 3968 × 2976) becomes a
256-tile-wide mosaic at tile 16 (4096 × 3072 = 12.6 MP out) with the demo library:

- **in-process**: ``open_image`` + ``mosaic.render`` + ``encode_output`` in this
  process, library caches warm (best of two);
- **pipeline**: the same job through real ``photomosaics controller``, ``responder`` and
  four ``processor`` processes, 1, 2 and 4 slices, from the ImageRequest being sent to the
  job row saying ``done``. Each slice count runs twice: *cold* (first job a fresh worker
  sees at that count) and *warm*; the ratio is warm pipeline over in-process.

Storage transactions are counted in every role process (``PHOTOMOSAICS_COUNT_TRANSACTIONS``)
and diffed around each job via SIGUSR1 snapshots, so a job's count includes the idle polls
of every listener while it ran. Roles poll with ``poll_max`` 1 s here (latency, not the
default cap of ``Settings.poll_max_interval``); one more 4-slice job runs on roles left idle for 25 s with the
defaults (what a person sees on a quiet ``make run``), and the idle cost is measured on a
responder with the defaults.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dal.config import Settings

_DEFAULTS = Settings()  # the polling defaults the roles run with
RESULTS = Path("bench-results")
TILE = 16
TILES_ACROSS = 256
SOURCE_SIZE = (3968, 2976)
SLICES = (1, 2, 4)
PROCESSORS = 4
CLIENT_ID = "bench"
IDLE_SECONDS = 60
SUBMITTED: dict[str, datetime] = {}
ROLE_ENV = {
    "PHOTOMOSAICS_POLL_MIN_SECONDS": "0.1",
    "PHOTOMOSAICS_POLL_MAX_SECONDS": "1",
    "PHOTOMOSAICS_LOG_LEVEL": "WARNING",
}


class Roles:
    """Role processes that count their storage transactions into one folder."""

    def __init__(self, connection_string: str, folder: Path, extra_env: dict[str, str]) -> None:
        from dal.config import CONNECTION_STRING_ENV
        from dal.observability.transactions import COUNT_ENV

        self.folder = folder
        self.env = {**os.environ, **extra_env, CONNECTION_STRING_ENV: connection_string, COUNT_ENV: str(folder)}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.log = (folder / "roles.log").open("ab")

    def start(self, role: str) -> None:
        argv = [sys.executable, "-c", "from photomosaics.cli import main; main()", role]
        self.processes.append(subprocess.Popen(argv, env=self.env, stdout=self.log, stderr=subprocess.STDOUT))

    def wait_ready(self, timeout: float = 120) -> None:
        """A role writes its first counts file once its signal handlers are in place."""
        deadline = time.monotonic() + timeout
        while not all(next(self.folder.glob(f"*-{p.pid}.json"), None) for p in self.processes):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"roles did not start; see {self.folder / 'roles.log'}")
            time.sleep(0.1)

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """SIGUSR1 every role and read back the counts each wrote."""
        asked = time.time()
        for process in self.processes:
            process.send_signal(signal.SIGUSR1)
        snaps: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + 20
        while len(snaps) < len(self.processes) and time.monotonic() < deadline:
            for process in self.processes:
                path = next(self.folder.glob(f"*-{process.pid}.json"), None)
                if path is None or process.pid in snaps:
                    continue
                try:
                    data = json.loads(path.read_text())
                except (OSError, json.JSONDecodeError):
                    continue
                if data.get("written_at", 0) >= asked:
                    snaps[process.pid] = data
            time.sleep(0.05)
        if len(snaps) < len(self.processes):
            raise RuntimeError(f"only {len(snaps)} of {len(self.processes)} roles wrote their counts")
        return snaps

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()


def diff(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """(operations, listener stats) that happened between two snapshots, summed over roles."""
    operations: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    for pid, snap in after.items():
        operations.update(snap["operations"])
        operations.subtract(before.get(pid, {}).get("operations", {}))
        for name, values in snap.get("listeners", {}).items():
            stats.update(values)
            stats.subtract(before.get(pid, {}).get("listeners", {}).get(name, {}))
    return +operations, +stats


def wait_done(services: Any, request_id: str, *, timeout: float = 600, interval: float = 0.05) -> Any:
    from dal.jobs.model import TERMINAL_STATUSES

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = services.jobs.get(CLIENT_ID, request_id)
        if job is not None and job.status in TERMINAL_STATUSES:
            if job.status != "done":
                raise RuntimeError(f"job {request_id} ended {job.status}: {job.error}")
            return job
        time.sleep(interval)
    raise RuntimeError(f"job {request_id} did not finish within {timeout:.0f} s")


def submit(services: Any, data: bytes, library_uri: str, slices: int) -> tuple[str, float]:
    """Upload the photo as ``imageinput/<request_id>.jpg`` (the web app's part), then time from the send."""
    from dal.queues.messages import ImageRequestMessage

    request_id = str(uuid.uuid4())
    queue = services.queues.image_request
    image_url = services.blobs.upload("imageinput", f"{request_id}.jpg", data, content_type="image/jpeg")
    started = time.perf_counter()
    SUBMITTED[request_id] = datetime.now(UTC)
    queue.submit(
        ImageRequestMessage(
            queue_uri=queue.url,
            client_id=CLIENT_ID,
            request_id=request_id,
            image_uri=image_url,
            image_library_uri=library_uri,
            tile_size=TILE,
            slices=slices,
            tiles_across=TILES_ACROSS,
        )
    )
    return request_id, started


def timeline(services: Any, request_id: str) -> list[str]:
    """The job's event log as offsets from the moment its ImageRequest was sent."""
    start = SUBMITTED[request_id]
    lines = []
    for event in services.jobs.events(request_id, job=services.jobs.get(CLIENT_ID, request_id)):
        took = f" ({event.seconds:.2f} s)" if event.seconds is not None else ""
        lines.append(f"+{(event.at - start).total_seconds():5.2f} s {event.kind}{took}: {event.message}")
    return lines


def in_process(data: bytes, library: Any, max_output_pixels: int) -> tuple[float, tuple[int, int]]:
    """Decode + render + JPEG encode in this process; best of two after a warm-up."""
    from mosaic.images import open_image
    from mosaic.render import render
    from workers.imaging.slicing import encode_output

    def once() -> tuple[float, tuple[int, int]]:
        start = time.perf_counter()
        out = render(
            open_image(data),
            library,
            tile_size=TILE,
            tiles_across=TILES_ACROSS,
            seed="bench",
            max_output_pixels=max_output_pixels,
        )
        encode_output(out)
        return time.perf_counter() - start, out.shape[:2]

    once()  # fills the library caches, as a worker's first job does
    runs = [once() for _ in range(2)]
    return min(seconds for seconds, _ in runs), runs[0][1]


def from_idle(cs: str, folder: Path, services: Any, library_uri: str, data: bytes) -> dict[str, Any]:
    """One 4-slice job on roles that have sat idle for 25 s with the default polling (Settings)."""
    folder.mkdir()
    roles = Roles(cs, folder, {"PHOTOMOSAICS_LOG_LEVEL": "WARNING"})
    for role in ("controller", "responder", *["processor"] * PROCESSORS):
        roles.start(role)
    try:
        roles.wait_ready()
        time.sleep(25)  # every listener's back-off has reached its cap
        request_id, started = submit(services, data, library_uri, SLICES[-1])
        wait_done(services, request_id)
        seconds = time.perf_counter() - started
    finally:
        roles.stop()
    print(f"  from idle, default polling, {SLICES[-1]} slices: {seconds:.2f} s", flush=True)
    return {"seconds": seconds, "timeline": timeline(services, request_id)}


def idle_cost(connection_string: str, folder: Path) -> dict[str, Any]:
    """Transactions of one idle responder with the default polling, over ``IDLE_SECONDS``."""
    from workers.runtime.backoff import poll_delay

    roles = Roles(connection_string, folder, {"PHOTOMOSAICS_LOG_LEVEL": "WARNING"})
    roles.start("responder")
    roles.wait_ready()
    time.sleep(1)  # its start-up calls
    before = roles.snapshot()
    time.sleep(IDLE_SECONDS)
    after = roles.snapshot()
    roles.stop()
    operations, stats = diff(before, after)
    # The schedule from start-up: how many receives the first hour costs.
    elapsed, polls = 0.0, 0
    while elapsed < 3600:
        polls += 1
        elapsed += poll_delay(polls, poll_min=_DEFAULTS.poll_min_interval, poll_max=_DEFAULTS.poll_max_interval)
    return {"operations": dict(operations), "receives": stats["receives"], "first_hour_schedule": polls}


def main() -> int:
    from benchmarks.photos import target_jpeg
    from dal.config import Settings, StorageClients
    from dal.observability.transactions import TransactionCounter
    from photomosaics.local.azurite import Azurite
    from workers.demo_library import ensure_demo_library
    from workers.services import RoleServices

    RESULTS.mkdir(exist_ok=True)
    print(
        f"cpus: {os.cpu_count()}; processors: {PROCESSORS}; job: {SOURCE_SIZE[0]}x{SOURCE_SIZE[1]} JPEG, "
        f"tile {TILE}, {TILES_ACROSS} tiles across",
        flush=True,
    )
    with Azurite() as azurite, tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        cs = azurite.connection_string
        submitter = TransactionCounter()
        settings = Settings.from_env({})
        services = RoleServices(StorageClients(cs, profile="worker", response_hook=submitter), settings, "bench")
        services.ensure()
        library_uri = ensure_demo_library(services.storage)
        library = services.libraries.load(library_uri)
        data = target_jpeg("chelsea", SOURCE_SIZE)

        local_seconds, shape = in_process(data, library, settings.max_output_pixels)
        megapixels = shape[0] * shape[1] / 1e6
        print(f"in-process render: {local_seconds:.2f} s for {shape[1]}x{shape[0]} ({megapixels:.1f} MP)", flush=True)

        counts_dir = Path(tmp) / "counts"
        counts_dir.mkdir()
        roles = Roles(cs, counts_dir, ROLE_ENV)
        for role in ("controller", "responder", *["processor"] * PROCESSORS):
            roles.start(role)
        rows: list[dict[str, Any]] = []
        try:
            roles.wait_ready()
            for round_name in ("cold", "warm"):
                for slices in SLICES:
                    before = roles.snapshot()
                    submitter.reset()
                    request_id, started = submit(services, data, library_uri, slices)
                    job = wait_done(services, request_id)
                    seconds = time.perf_counter() - started
                    after = roles.snapshot()
                    operations, stats = diff(before, after)
                    operations.update({k: v for k, v in submitter.counts().items() if "GetEntity" not in k})
                    rows.append(
                        {
                            "round": round_name,
                            "slices": slices,
                            "seconds": seconds,
                            "ratio": seconds / local_seconds,
                            "output": [job.output_width, job.output_height],
                            "transactions": sum(operations.values()),
                            "operations": dict(operations),
                            "receives": stats["receives"],
                            "empty_receives": stats["empty_receives"],
                            "timeline": timeline(services, request_id),
                        }
                    )
                    print(
                        f"  {round_name} {slices} slice(s): {seconds:6.2f} s  x{seconds / local_seconds:.2f}  "
                        f"{sum(operations.values())} transactions ({stats['empty_receives']} empty receives)",
                        flush=True,
                    )
        finally:
            roles.stop()
        cold_start = from_idle(cs, Path(tmp) / "idle-start", services, library_uri, data)
        idle = idle_cost(cs, counts_dir)

    report(rows, local_seconds, megapixels, idle, cold_start)
    (RESULTS / "pipeline.json").write_text(
        json.dumps(
            {
                "in_process_seconds": local_seconds,
                "megapixels": megapixels,
                "jobs": rows,
                "idle": idle,
                "from_idle_default_polling": cold_start,
                "cpus": os.cpu_count(),
                "processors": PROCESSORS,
            },
            indent=1,
        )
    )
    return 0


def report(
    rows: list[dict[str, Any]], local: float, megapixels: float, idle: dict[str, Any], from_idle: dict[str, Any]
) -> None:
    print(f"\nEnd to end, {megapixels:.1f} MP out, tile {TILE} (in-process: {local:.2f} s):")
    print("| slices | cold s | warm s | warm / in-process | transactions/job | of which empty receives |")
    print("|---:|---:|---:|---:|---:|---:|")
    for slices in SLICES:
        cold = next(r for r in rows if r["slices"] == slices and r["round"] == "cold")
        warm = next(r for r in rows if r["slices"] == slices and r["round"] == "warm")
        print(
            f"| {slices} | {cold['seconds']:.2f} | {warm['seconds']:.2f} | {warm['ratio']:.2f} | "
            f"{warm['transactions']} | {warm['empty_receives']} |"
        )
    names = sorted({op for r in rows if r["round"] == "warm" for op in r["operations"]})
    print("\nTransactions per job by operation (warm round):")
    print("| operation | " + " | ".join(f"{s} slice(s)" for s in SLICES) + " |")
    print("|---|" + "---:|" * len(SLICES))
    for name in names:
        cells = [
            str(next(r for r in rows if r["slices"] == s and r["round"] == "warm")["operations"].get(name, 0))
            for s in SLICES
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for row in rows:
        if row["round"] == "warm" and row["slices"] in (1, SLICES[-1]):
            print(f"\nWhere the time goes, warm, {row['slices']} slice(s) (job event log):")
            for line in row["timeline"]:
                print(f"  {line}")
    print(
        f"\nThe same {SLICES[-1]}-slice job on roles idle for 25 s with the default polling ({_DEFAULTS.poll_max_interval:g} s cap): "
        f"{from_idle['seconds']:.2f} s"
    )
    for line in from_idle["timeline"]:
        print(f"  {line}")
    per_hour = idle["receives"] * 3600 / IDLE_SECONDS
    print(
        f"\nIdle responder, default polling ({_DEFAULTS.poll_min_interval:g} s doubling to {_DEFAULTS.poll_max_interval:g} s), "
        f"{IDLE_SECONDS} s measured after start-up:"
    )
    print(
        f"  {sum(idle['operations'].values())} transactions ({idle['operations']}); "
        f"schedule: {idle['first_hour_schedule']} receives in the first idle hour, "
        f"{3600 / _DEFAULTS.poll_max_interval:.0f}/h once saturated "
        f"(this minute extrapolated: {per_hour:.0f}/h)"
    )


if __name__ == "__main__":
    sys.exit(main())
