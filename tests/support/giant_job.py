"""One big job through real role processes on Azurite, with each role's peak RSS.

Shared by ``tests/test_giant_job.py`` (memory and pixels asserted, never time) and
``benchmarks/giant.py`` (time and memory printed for 400 MP and 1 GP). The job is as cheap as
a job of that size can be: a small synthetic library, 64 px tiles (``MAX_TILE_SIZE``: the
fewest cells to match), a small source photo; the pixels still all exist, so every role does
the real work of its size: processors render bands of up to 50 MP
(``mosaic.limits.MAX_SLICE_PIXELS``), the controller streams them into the JPEG and the Deep
Zoom zip, and the web role (``photomosaics web``: gunicorn, one worker) takes the job in and
then serves what a person looking at it asks for: the job page, its previews, the descriptor
and tiles of every level, the full-resolution download and the pyramid zip. Peak RSS is the
kernel's high-water mark (``VmHWM`` in ``/proc/<pid>/status``), read just before the roles
are stopped; for the web role, the largest of gunicorn's master and worker.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from mosaic.deepzoom import DZI_TILE_SIZE
from tests.support.pipelines import Pipeline, RoleProcess, sample_photo, synthetic_library
from tests.support.waiting import wait_for

TILE = 64
LIBRARY_SIZE = 24
GIANT_ENV = {"PHOTOMOSAICS_VISIBILITY_TIMEOUT": "120", "PHOTOMOSAICS_POLL_MAX_SECONDS": "0.5"}
ROLES = ("controller", "processor", "responder", "web")
_CSRF = {"X-Requested-With": "photomosaics"}


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far (``/proc/<pid>/stat``): the load-independent cost."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (gunicorn's master and workers), from ``/proc/.../children``."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_web(pipe: Pipeline) -> tuple[RoleProcess, str]:
    port = _free_port()
    web = pipe.start(
        "web", "--port", str(port), "--workers", "1", env={**GIANT_ENV, "PHOTOMOSAICS_SECRET_KEY": os.urandom(16).hex()}
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert web.alive(), f"the web role ended\n{pipe.logs()}"
        try:
            return requests.get(f"{base}/healthz", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    wait_for(up, seconds=60, step=0.2, what="the web role's /healthz", details=pipe.logs)
    return web, base


def _download(session: requests.Session, url: str, path: Path | None = None) -> tuple[int, bytes, bytes, int, str]:
    """Stream ``url`` (to ``path``, or nowhere): the bytes received, the first 64 KB, the last
    two bytes, the length the server declared (its ``Content-Length``) and the SHA-256."""
    total, head, tail, digest = 0, b"", b"", hashlib.sha256()
    with session.get(url, stream=True, timeout=120) as response:
        response.raise_for_status()
        declared = int(response.headers["Content-Length"])
        with path.open("wb") if path else open(os.devnull, "wb") as out:
            for chunk in response.iter_content(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                head = head or chunk[: 1 << 16]
                tail = (tail + chunk)[-2:]
                total += len(chunk)
    return total, head, tail, declared, digest.hexdigest()


def _look_at(session: requests.Session, base: str, job: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """What a person does with a finished giant job: every request answered, the bytes kept."""
    rid = job["request_id"]
    get = lambda path, **kw: session.get(f"{base}{path}", timeout=60, **kw)  # noqa: E731
    assert get(f"/jobs/{rid}").status_code == 200
    previews = {}
    for size in (None, 960):  # sizes a preview comes in (webapp.previews.PREVIEW_SIDES)
        answer = get(job["preview_url"], params={"size": size} if size else None)
        assert answer.status_code == 200 and answer.headers["Content-Type"] == "image/jpeg", answer.text[:300]
        previews[size or "default"] = answer.content
    dzi = get(job["dzi_url"]).text
    width, height = (int(re.search(rf'{k}="(\d+)"', dzi).group(1)) for k in ("Width", "Height"))  # type: ignore[union-attr]
    top = math.ceil(math.log2(max(width, height)))
    tiles: dict[tuple[int, int, int], bytes] = {}
    wanted = [(level, 0, 0) for level in range(top + 1)]  # the first tile of every level
    wanted += [
        (level, c, r)
        for level in range(top - 4, top - 2)  # two screen-size levels, whole
        for c in range(math.ceil(math.ceil(width / 2 ** (top - level)) / DZI_TILE_SIZE))
        for r in range(math.ceil(math.ceil(height / 2 ** (top - level)) / DZI_TILE_SIZE))
    ]
    wanted += [
        (top, c, r) for c in range(0, width // DZI_TILE_SIZE, 17) for r in range(min(8, height // DZI_TILE_SIZE))
    ]  # full size
    for level, column, row in wanted:
        answer = get(f"/api/jobs/{rid}/dzi_files/{level}/{column}_{row}.jpg")
        assert answer.status_code == 200, (level, column, row, answer.text[:300])
        tiles[level, column, row] = answer.content
    result_bytes, result_head, result_tail, result_declared, result_sha256 = _download(
        session, f"{base}{job['result_url']}?download=1"
    )
    zip_path = tmp / "pyramid.zip"
    zip_bytes, *_ = _download(session, f"{base}{job['pyramid_url']}", zip_path)
    return {
        "dzi": dzi,
        "previews": previews,
        "tiles": tiles,
        "result_bytes": result_bytes,
        "result_head": result_head,
        "result_tail": result_tail,
        "result_declared": result_declared,
        "result_sha256": result_sha256,
        "pyramid_zip": zip_path,
        "pyramid_bytes": zip_bytes,
    }


def _serial_seconds(session: requests.Session, base: str, job: dict[str, Any]) -> tuple[float, float]:
    """The controller's serial parts, from the job's log as the web serves it: submit to the
    first slice dispatched, and the last slice done to done. The "done" line is written just
    after the row that says done (``workers.controller.controller``), so a reader that saw the status
    may have to wait a moment for it."""

    def logged_done() -> list[dict[str, Any]] | None:
        events: list[dict[str, Any]] = session.get(f"{base}{job['status_url']}", timeout=30).json()["events"]
        return events if any(e["kind"] == "done" for e in events) else None

    events = wait_for(logged_done, seconds=30, step=0.2, what="the done line in the finished job's log")
    at = lambda kind: [datetime.fromisoformat(e["at"]) for e in events if e["kind"] == kind]  # noqa: E731
    created = datetime.fromisoformat(job["created_at"])
    return (min(at("dispatched")) - created).total_seconds(), (max(at("done")) - max(at("slice_done"))).total_seconds()


def run_giant_job(
    connection_string: str, tmp: Path, *, megapixels: float, processors: int = 2, slices: int = 1, timeout: float = 900
) -> dict[str, Any]:
    """Run one ``megapixels`` job (3:2) to done through the web role, then look at it through the web.

    ``slices`` is the number asked for: the controller makes it at least enough for bands of 50 MP.
    Returns its size, slices, seconds (submit to done, and the looking), what the web served
    (``served``), the peak RSS per role (``peak_rss``) and the CPU seconds per role
    (``cpu_seconds``: what the job costs whatever else runs on the machine). The roles are stopped on return;
    ``pipe`` (its storage clients) stays usable."""
    pipe = Pipeline(connection_string, tmp, fresh_processes=True)  # peak memory as deployed: no forked imports
    pipe.create_library("tiles", synthetic_library(LIBRARY_SIZE))
    roles = [pipe.start("controller", env=GIANT_ENV), pipe.start("responder", env=GIANT_ENV)]
    roles += [pipe.start("processor", env=GIANT_ENV) for _ in range(processors)]
    try:
        web, base = _start_web(pipe)
        session = requests.Session()
        session.headers.update(_CSRF)
        across = int(math.sqrt(megapixels * 1e6 * 1.5)) // TILE
        started = time.perf_counter()
        created = session.post(
            f"{base}/api/jobs",
            files={"image": ("photo.png", sample_photo(300, 200, seed=13))},
            data={"library": "tiles", "tile_size": TILE, "slices": slices, "tiles_across": across},
            timeout=60,
        )
        assert created.status_code == 202, created.text
        status_url = f"{base}{created.json()['status_url']}"

        def ended() -> dict[str, Any] | None:
            answer: dict[str, Any] = session.get(status_url, timeout=30).json()
            return answer if answer["status"] in ("done", "failed") else None

        job = wait_for(
            ended,
            seconds=timeout,
            step=0.5,
            what="the giant job to end",
            details=pipe.logs,
        )
        seconds = time.perf_counter() - started
        assert job["status"] == "done", f"{job['status']}: {job['error']}\n{pipe.logs()}"
        serial = _serial_seconds(session, base, job)
        started = time.perf_counter()
        served = _look_at(session, base, job, tmp)
        serve_seconds = time.perf_counter() - started
        peaks: dict[str, int] = {}
        cpu: dict[str, float] = {}
        for role in [*roles, web]:
            pids = _process_tree(role.pid) if role is web else [role.pid]
            peaks[role.role] = max(peaks.get(role.role, 0), *(peak_rss_bytes(pid) for pid in pids))
            cpu[role.role] = cpu.get(role.role, 0.0) + sum(cpu_seconds(pid) for pid in pids)
        events = pipe.services.jobs.events(job["request_id"], job=pipe.job(job["request_id"]))
        stitched = [e for e in events if e.kind == "stitched"]
        rendered = [e.stages for e in events if e.kind == "slice_done" and e.stages]
        return {
            "request_id": job["request_id"],
            "job": job,
            "output": (job["output_width"], job["output_height"]),
            "megapixels": job["output_width"] * job["output_height"] / 1e6,
            "slices": job["slices"],
            "seconds": seconds,
            "serve_seconds": serve_seconds,
            "stitch_stages": stitched[0].stages if stitched else {},
            "serial_before": serial[0],
            "serial_after": serial[1],
            "slice_stages": {k: round(sum(s.get(k, 0) for s in rendered), 1) for k in rendered[0]} if rendered else {},
            "served": served,
            "peak_rss": peaks,
            "cpu_seconds": cpu,
            "pipe": pipe,
        }
    finally:
        pipe.stop_all()
