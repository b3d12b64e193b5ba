"""Fair scheduling between clients: client A queues 20 jobs, then client B one.

Real role processes (controller, responder and two processors, as ``make run`` starts them
on 2 cores) on a fresh in-memory Azurite, once per setting, side by side in one run:

- ``PHOTOMOSAICS_FAIR_LANES=1``: first come, first served (one lane);
- ``PHOTOMOSAICS_FAIR_LANES=2``: the default (``dal/queues/lanes.py``).

Each run times one job alone first (after a warm-up job: libraries loaded), then sends A's
20 jobs and right after them B's one, and reports B's time from its send to ``done`` as a
multiple of the lone job's time. The goal (the issue: "within a small multiple of one job's
time") is printed beside it: at most ``GOAL_MULTIPLE`` x. A's jobs are sent as a CLI producer
would (straight to ``imagerequest``): the web app's quotas would stop A at 3 unfinished jobs,
which is the other half of the protection and not what is measured here.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.pipeline import RESULTS, Roles

A_JOBS = 20
PROCESSORS = 2
GOAL_MULTIPLE = 3.0
SLICES = 2
TILE = 8
TILES_ACROSS = 96
PHOTO_SIZE = (640, 480)
ROLE_ENV = {
    "PHOTOMOSAICS_POLL_MIN_SECONDS": "0.05",
    "PHOTOMOSAICS_POLL_MAX_SECONDS": "0.5",
    "PHOTOMOSAICS_LOG_LEVEL": "WARNING",
}


def _web(cs: str, lanes: int) -> Any:
    """The web app in this process, quotas raised so that A may queue 20 jobs."""
    from dal.config import Settings
    from webapp import create_app

    settings = Settings.from_env(
        {
            "PHOTOMOSAICS_FAIR_LANES": str(lanes),
            "PHOTOMOSAICS_MAX_UNFINISHED_JOBS": "1000",
            "PHOTOMOSAICS_SUBMISSIONS_PER_MINUTE": "1000",
            "PHOTOMOSAICS_ADDRESS_BURST": "1000",
        }
    )
    return create_app(
        {"SECRET_KEY": "benchmark-secret-key-of-32-characters", "SETTINGS": settings, "CONNECTION_STRING": cs}
    )


def _send(browser: Any, data: bytes) -> tuple[str, str, float]:
    """POST /api/jobs as a browser does; (client id, request id, send time)."""
    import io

    sent = time.perf_counter()
    form = {
        "image": (io.BytesIO(data), "photo.jpg"),
        "library": "demo",
        "tile_size": str(TILE),
        "slices": str(SLICES),
        "tiles_across": str(TILES_ACROSS),
    }
    response = browser.post(
        "/api/jobs", data=form, content_type="multipart/form-data", headers={"X-Requested-With": "photomosaics"}
    )
    if response.status_code != 202:
        raise RuntimeError(f"submission refused: {response.status_code} {response.get_json()}")
    with browser.session_transaction() as session:
        client = session["cid"]
    return client, response.get_json()["request_id"], sent


def _wait(services: Any, jobs: list[tuple[str, str, float]], *, timeout: float = 900) -> dict[str, float]:
    """Seconds from each job's send to ``done`` (polled every 0.2 s)."""
    from dal.jobs.model import TERMINAL_STATUSES

    took: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(took) < len(jobs):
        for client, rid, sent in jobs:
            if rid in took:
                continue
            job = services.jobs.get(client, rid)
            if job is not None and job.status in TERMINAL_STATUSES:
                if job.status != "done":
                    raise RuntimeError(f"job {rid} ended {job.status}: {job.error}")
                took[rid] = time.perf_counter() - sent
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(jobs) - len(took)} jobs unfinished after {timeout:.0f} s")
        time.sleep(0.2)
    return took


def one_run(lanes: int, data: bytes) -> dict[str, float]:
    from dal.config import Settings, StorageClients
    from photomosaics.local.azurite import Azurite
    from workers.demo_library import ensure_demo_library
    from workers.services import RoleServices

    with Azurite() as azurite, tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        cs = azurite.connection_string
        settings = Settings.from_env({"PHOTOMOSAICS_FAIR_LANES": str(lanes)})
        services = RoleServices(StorageClients(cs, profile="worker"), settings, "bench")
        services.ensure()
        ensure_demo_library(services.storage)
        counts = Path(tmp) / "counts"
        counts.mkdir()
        roles = Roles(cs, counts, {**ROLE_ENV, "PHOTOMOSAICS_FAIR_LANES": str(lanes)})
        for role in ("controller", "responder", *["processor"] * PROCESSORS):
            roles.start(role)
        app = _web(cs, lanes)
        try:
            roles.wait_ready()
            _wait(services, [_send(app.test_client(), data)])  # warm-up: libraries loaded everywhere
            alone = _send(app.test_client(), data)
            one_job = _wait(services, [alone])[alone[1]]
            client_a = app.test_client()
            a_jobs = [_send(client_a, data) for _ in range(A_JOBS)]
            b_job = _send(app.test_client(), data)
            took = _wait(services, [*a_jobs, b_job])
        finally:
            roles.stop()
        return {
            "one_job": one_job,
            "b": took[b_job[1]],
            "a_last": max(took[rid] for _, rid, _ in a_jobs),
        }


def main() -> int:
    from benchmarks.photos import target_jpeg

    RESULTS.mkdir(exist_ok=True)
    data = target_jpeg("chelsea", PHOTO_SIZE)
    print(
        f"client A sends {A_JOBS} jobs, then client B one; each job {TILES_ACROSS} tiles across at tile {TILE} "
        f"in {SLICES} slices; {PROCESSORS} processors",
        flush=True,
    )
    results = {lanes: one_run(lanes, data) for lanes in (1, 2)}
    print(f"{'scheduling':<34} {'one job alone':>14} {'B sent→done':>12} {'B ÷ one job':>12} {'A all done':>11}  goal")
    for lanes, name in ((1, "first come, first served (1 lane)"), (2, "fair lanes (default, 2)")):
        r = results[lanes]
        multiple = r["b"] / r["one_job"]
        verdict = "met" if multiple <= GOAL_MULTIPLE else "missed"
        print(
            f"{name:<34} {r['one_job']:>12.2f} s {r['b']:>10.2f} s {multiple:>11.1f}x {r['a_last']:>9.1f} s"
            f"  ≤ {GOAL_MULTIPLE:.0f}x one job: {verdict}"
        )
    before, after = results[1]["b"], results[2]["b"]
    print(
        f"B waits {before / after:.1f}x less with fair lanes; A's 20 jobs finish "
        f"{results[2]['a_last'] / results[1]['a_last']:.2f}x as late (work-conserving: about 1.0x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
