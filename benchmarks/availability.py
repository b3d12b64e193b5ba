"""Availability under throttling: the same batch of jobs, side by side, clean and throttled.

One Azurite, two isolated pipelines (name prefixes), each with a controller, a responder and
two processors whose storage goes through ``tests/support/faultproxy.py``: one proxy injects nothing,
the other answers 20 % of requests with 503 ServerBusy (plus 3 % 500 OperationTimedOut and
2 % resets) for the whole run, ("20 % injected 503s for a minute"). Retry waits
are the product's (ServerBusy: 10 s) unless ``PHOTOMOSAICS_RETRY_SCALE`` is set.

Prints, for each: wall time for the batch, jobs lost (goal 0), storage transactions, retries
by cause and seconds spent backing off, and the throttled/clean ratios.

Then the paired secondary account (``dal.availability.failover``) at the send level, with a second Azurite
and the primary cut by the proxy (every connection reset): time of the first send to fail over
(the ``interactive`` profile's retry budget, what ``POST /api/jobs`` would spend), time of the
sends after it, messages lost, the secondary's transactions while the primary is healthy
(goal 0), and the time and transactions for the syphon to drain the backlog once the primary
is back. Before this increment every one of those sends failed.

Last, the whole service across an outage (``_failover_pipeline``): the web app's POST while
the primary is cut (all 202?), the first failover time, the drain after recovery, the time
until every job is done after recovery (beside the same service's time for healthy jobs),
jobs lost (the secondary's cost while healthy is the send-level figure above).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

JOBS = 8
FAULTS = {"503": 0.2, "500": 0.03, "reset": 0.02}
RESULTS = Path("bench-results")


def _run(cs: str, tmp: Path, faults: dict[str, float], label: str) -> dict[str, Any]:
    from dal.config import StorageClients
    from dal.observability.transactions import COUNT_ENV
    from tests.support.faultproxy import faulty_account
    from tests.support.pipelines import Pipeline, sample_photo, synthetic_library
    from workers.services import RoleServices

    folder = tmp / label
    folder.mkdir()
    pipe = Pipeline(cs, folder)
    pipe.library_uri = pipe.create_library("tiles", synthetic_library())
    with faulty_account(cs, faults=faults) as account:
        proxied = Pipeline(account.connection_string, folder, prefix=pipe.prefix)
        proxied.services = RoleServices(
            StorageClients(account.connection_string, profile="worker"), proxied.settings, "bench"
        )
        env = {COUNT_ENV: str(folder / "counts"), "PHOTOMOSAICS_VISIBILITY_TIMEOUT": "30"}
        if os.environ.get("PHOTOMOSAICS_RETRY_SCALE"):
            env["PHOTOMOSAICS_RETRY_SCALE"] = os.environ["PHOTOMOSAICS_RETRY_SCALE"]
        account.set_active(True)
        pipe.roles = proxied.roles
        for role in ("controller", "responder", "processor", "processor"):
            proxied.start(role, env=env)
        started = time.perf_counter()
        try:
            ids = [
                proxied.submit(
                    sample_photo(48, 36, seed=500 + n),
                    library_uri=account.through(pipe.library_uri),
                    tile_size=8,
                    slices=3,
                )
                for n in range(JOBS)
            ]
            finished = pipe.wait(ids, timeout=900)
            seconds = time.perf_counter() - started
            injected = dict(account.counts())
        finally:
            proxied.stop_all()
    snapshots = [json.loads(p.read_text()) for p in (folder / "counts").glob("*.json")]
    retries: dict[str, int] = {}
    for snap in snapshots:
        for kind, n in snap.get("retries", {}).items():
            retries[kind] = retries.get(kind, 0) + n
    return {
        "label": label,
        "seconds": seconds,
        "jobs": JOBS,
        "lost": sum(1 for j in finished.values() if j.status != "done") + (JOBS - len(finished)),
        "transactions": sum(s.get("total", 0) for s in snapshots),
        "retries": retries,
        "backoff_seconds": sum(s.get("backoff_seconds", 0.0) for s in snapshots),
        "injected": injected,
    }


FAILOVER_MESSAGES = 20


def _failover(cs: str) -> dict[str, Any]:
    """The send level: FailoverSender and Syphon alone, the primary cut by the proxy."""
    import uuid

    from dal.availability.failover import FailoverSender
    from dal.config import Settings, StorageClients
    from dal.observability.transactions import TransactionCounter
    from dal.operations.syphon import Syphon
    from dal.queues.accessor import QueueAccessor
    from dal.queues.messages import ImageRequestMessage
    from dal.stores import Stores
    from photomosaics.local.azurite import Azurite
    from tests.support.faultproxy import faulty_account

    prefix = f"fo{uuid.uuid4().hex[:8]}"
    QueueAccessor(StorageClients(cs, profile="probe"), prefix=prefix).ensure_all()
    secondary_counter, syphon_counter = TransactionCounter(), TransactionCounter()
    with Azurite() as second, faulty_account(cs, faults={"reset": 1.0}) as account:
        secondary = StorageClients(second.connection_string, profile="interactive", response_hook=secondary_counter)
        primary = QueueAccessor(StorageClients(account.connection_string, profile="interactive"), prefix=prefix)
        sender = FailoverSender(primary, secondary)

        def message() -> ImageRequestMessage:
            rid = str(uuid.uuid4())
            return ImageRequestMessage(
                queue_uri=primary.image_request.url,
                client_id="bench",
                request_id=rid,
                image_uri=f"http://x/imageinput/{rid}.jpg",
                image_library_uri="http://x/t",
                tile_size=8,
                slices=3,
            )

        for _ in range(5):
            sender.submit(message())
        healthy_secondary = secondary_counter.total()
        account.set_active(True)
        started = time.perf_counter()
        where = [sender.submit(message())]
        first = time.perf_counter() - started
        started = time.perf_counter()
        where += [sender.submit(message()) for _ in range(FAILOVER_MESSAGES - 1)]
        rest = (time.perf_counter() - started) / (FAILOVER_MESSAGES - 1)
        account.set_active(False)
        syphon_storage = StorageClients(second.connection_string, profile="worker", response_hook=syphon_counter)
        stores = Stores(StorageClients(cs, profile="worker"), Settings(name_prefix=prefix))
        syphon = Syphon(stores, syphon_storage)
        started = time.perf_counter()
        moved = syphon.run_once()
        drain = time.perf_counter() - started
        idle_before = syphon_counter.total()
        syphon.run_once()
        arrived = QueueAccessor(StorageClients(cs, profile="probe"), prefix=prefix).image_request.approximate_depth()
    return {
        "first_failover_s": first,
        "next_send_s": rest,
        "parked": where.count("secondary"),
        "moved": moved,
        "drain_s": drain,
        "drain_transactions": idle_before,
        "empty_pass_transactions": syphon_counter.total() - idle_before,
        "healthy_secondary_transactions": healthy_secondary,
        "lost": 5 + FAILOVER_MESSAGES - arrived,
    }


PIPELINE_JOBS = 10
BENCH_SYPHON_INTERVAL = 2.0  # the product pings every 60 s: add up to that to the recovery figures


def _failover_pipeline(cs: str, tmp: Path) -> dict[str, Any]:
    """The whole service: web app (in process), controller, responder, processor and syphon.

    The primary goes through a fault proxy that can cut it. Healthy jobs first, then the primary
    is cut, jobs are submitted, the primary is restored, and the clocks run until the backlog is
    drained and every job is done. (The secondary's cost while healthy is the send-level section's
    figure: the senders send it nothing, a syphon pass is counted there.)
    """
    import io

    from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV, backlog_queues
    from dal.config import CONNECTION_STRING_ENV, StorageClients
    from photomosaics.local.azurite import Azurite
    from tests.support.faultproxy import faulty_account
    from tests.support.pipelines import Pipeline, sample_photo, synthetic_library
    from webapp import create_app
    from webapp.csrf import CSRF_HEADER, CSRF_VALUE

    folder = tmp / "failover"
    folder.mkdir()
    pipe = Pipeline(cs, folder)
    pipe.create_library("tiles", synthetic_library())
    with Azurite() as second, faulty_account(cs, faults={"reset": 1.0}) as primary:
        env = {
            CONNECTION_STRING_ENV: primary.connection_string,
            SECONDARY_CONNECTION_STRING_ENV: second.connection_string,
            "PHOTOMOSAICS_SYPHON_INTERVAL": str(BENCH_SYPHON_INTERVAL),
        }
        for role in ("controller", "processor", "responder", "syphon"):
            pipe.start(role, env=env)
        app = create_app(
            {
                "SECRET_KEY": "benchmark-secret-key-of-32-characters",
                "SETTINGS": pipe.settings,
                "CONNECTION_STRING": primary.connection_string,
                "SECONDARY_CONNECTION_STRING": second.connection_string,
            }
        )
        client = app.test_client()

        def post(n: int) -> tuple[int, str, float]:
            started = time.perf_counter()
            answer = client.post(
                "/api/jobs",
                headers={CSRF_HEADER: CSRF_VALUE},
                data={
                    "image": (io.BytesIO(sample_photo(32, 24, seed=700 + n)), "p.png"),
                    "library": "tiles",
                    "tile_size": "8",
                    "slices": "2",
                },
            )
            return answer.status_code, (answer.get_json() or {}).get("request_id", ""), time.perf_counter() - started

        def wait(ids: list[str], timeout: float = 600) -> dict[str, str]:
            deadline, states = time.monotonic() + timeout, {}
            while time.monotonic() < deadline:
                states = {rid: client.get(f"/api/jobs/{rid}").get_json() for rid in ids}
                if all(j["status"] in ("done", "failed") and not j["waiting_for_storage"] for j in states.values()):
                    break
                time.sleep(0.2)
            return {rid: j["status"] for rid, j in states.items()}

        try:
            # Healthy: one job to warm the roles up, then the same batch as below, timed side by side.
            wait([post(99)[1]])
            started = time.perf_counter()
            healthy = [post(n) for n in range(PIPELINE_JOBS)]
            healthy_states = wait([rid for _, rid, _ in healthy])
            healthy_seconds = time.perf_counter() - started

            primary.set_active(True)  # cut
            cut = [post(100 + n) for n in range(PIPELINE_JOBS)]
            time.sleep(2)
            backlog = sum(
                q.approximate_depth()
                for q in backlog_queues(StorageClients(second.connection_string, profile="probe"), pipe.prefix, 3)
            )
            primary.set_active(False)  # restored
            restored = time.perf_counter()
            probe = StorageClients(second.connection_string, profile="probe")
            while (
                sum(q.approximate_depth() for q in backlog_queues(probe, pipe.prefix, 3))
                and time.perf_counter() - restored < 300
            ):
                time.sleep(0.1)
            drained = time.perf_counter() - restored
            states = wait([rid for _, rid, _ in cut])
            completed = time.perf_counter() - restored
        finally:
            primary.set_active(False)
            pipe.stop_all()
    return {
        "healthy_jobs": len(healthy),
        "healthy_seconds": healthy_seconds,
        "healthy_lost": sum(1 for s in healthy_states.values() if s != "done"),
        "accepted": sum(1 for code, _, _ in cut if code == 202),
        "submitted": len(cut),
        "first_post_s": cut[0][2],
        "later_post_s": sum(t for _, _, t in cut[1:]) / max(1, len(cut) - 1),
        "parked": backlog,
        "drain_s": drained,
        "complete_after_recovery_s": completed,
        "lost": sum(1 for s in states.values() if s != "done") + (len(cut) - len(states)),
    }


def main() -> int:
    from photomosaics.local.azurite import Azurite

    RESULTS.mkdir(exist_ok=True)
    print(f"{JOBS} jobs (48x36, tile 8, 3 slices), 2 processors; faults {FAULTS}", flush=True)
    with Azurite() as azurite, tempfile.TemporaryDirectory(prefix="bench-availability-") as tmp:
        clean = _run(azurite.connection_string, Path(tmp), {}, "clean")
        throttled = _run(azurite.connection_string, Path(tmp), FAULTS, "throttled")
        failover = _failover(azurite.connection_string)
        pipeline = _failover_pipeline(azurite.connection_string, Path(tmp))
    print(f"{'':10} {'seconds':>8} {'lost':>5} {'transactions':>13} {'retries':>28} {'backoff s':>10}")
    for row in (clean, throttled):
        print(
            f"{row['label']:10} {row['seconds']:8.1f} {row['lost']:5d} {row['transactions']:13d} "
            f"{json.dumps(row['retries']):>28} {row['backoff_seconds']:10.1f}"
        )
    print(f"jobs lost under throttling: {throttled['lost']} (goal 0)")
    print(
        f"throttled / clean: time x{throttled['seconds'] / clean['seconds']:.2f}, "
        f"transactions x{throttled['transactions'] / max(clean['transactions'], 1):.2f} "
        f"(+{throttled['transactions'] - clean['transactions']} extra); injected {throttled['injected']}"
    )
    f = failover
    print(f"paired secondary, primary cut ({FAILOVER_MESSAGES} sends; before: every send failed):")
    print(
        f"  time to fail over (first send, interactive profile): {f['first_failover_s']:.1f} s; "
        f"each later send {f['next_send_s'] * 1000:.0f} ms (goal: POST keeps answering 202)"
    )
    print(f"  sends parked on the secondary: {f['parked']}/{FAILOVER_MESSAGES}; messages lost: {f['lost']} (goal 0)")
    print(
        f"  backlog drain after recovery: {f['moved']} moved in {f['drain_s']:.2f} s, "
        f"{f['drain_transactions']} transactions; an empty syphon pass: {f['empty_pass_transactions']}"
    )
    print(
        f"  extra transactions on the secondary while the primary is healthy: "
        f"{f['healthy_secondary_transactions']} from senders (goal 0); a syphon pass: "
        f"{f['empty_pass_transactions']} on the secondary = {f['empty_pass_transactions'] * 1440:,}/day at 60 s"
    )
    _print_pipeline(pipeline)
    (RESULTS / "availability.json").write_text(
        json.dumps(
            {"clean": clean, "throttled": throttled, "failover": failover, "failover_pipeline": pipeline}, indent=1
        )
    )
    return 1 if throttled["lost"] or clean["lost"] or failover["lost"] or pipeline["lost"] else 0


def _print_pipeline(p: dict[str, Any]) -> None:
    print(
        f"whole service, primary cut ({p['submitted']} jobs, 32x24, 2 slices; syphon every "
        f"{BENCH_SYPHON_INTERVAL:.0f} s here, 60 s by default):"
    )
    print(f"  POST /api/jobs while down: {p['accepted']}/{p['submitted']} answered 202 (goal: all; before: none)")
    print(
        f"  first failover (first POST): {p['first_post_s']:.1f} s; later POSTs {p['later_post_s'] * 1000:.0f} ms "
        f"(goal: a few seconds, then normal)"
    )
    print(
        f"  parked in the backlog: {p['parked']}; drained {p['drain_s']:.1f} s after the primary came back "
        f"(goal: within one ping interval + seconds)"
    )
    print(
        f"  all jobs done {p['complete_after_recovery_s']:.1f} s after recovery; the same {p['healthy_jobs']} jobs "
        f"on a healthy primary: {p['healthy_seconds']:.1f} s from submission (x"
        f"{p['complete_after_recovery_s'] / max(p['healthy_seconds'], 0.1):.2f}; goal: drain + the usual time)"
    )
    print(f"  jobs lost: {p['lost']} (goal 0); healthy jobs lost: {p['healthy_lost']}")


def failover_demo() -> int:
    """``make demo-failover``: only the whole-service outage above, with its figures."""
    from photomosaics.local.azurite import Azurite

    with Azurite() as azurite, tempfile.TemporaryDirectory(prefix="demo-failover-") as tmp:
        pipeline = _failover_pipeline(azurite.connection_string, Path(tmp))
    _print_pipeline(pipeline)
    return 1 if pipeline["lost"] else 0


if __name__ == "__main__":
    import sys

    sys.exit(failover_demo() if sys.argv[1:] == ["failover"] else main())
