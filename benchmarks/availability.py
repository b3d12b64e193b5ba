"""Availability under throttling: the same batch of jobs, side by side, clean and throttled.

One Azurite, two isolated pipelines (name prefixes), each with a controller, a responder and
two processors whose storage goes through ``tests/faultproxy.py``: one proxy injects nothing,
the other answers 20 % of requests with 503 ServerBusy (plus 3 % 500 OperationTimedOut and
2 % resets) for the whole run, as in issue 9 ("20 % injected 503s for a minute"). Retry waits
are the product's (ServerBusy: 10 s) unless ``PHOTOMOSAICS_RETRY_SCALE`` is set.

Prints, for each: wall time for the batch, jobs lost (goal 0), storage transactions, retries
by cause and seconds spent backing off, and the throttled/clean ratios.

Then the paired secondary account (``dal.failover``) at the send level, with a second Azurite
and the primary cut by the proxy (every connection reset): time of the first send to fail over
(the ``interactive`` profile's retry budget, what ``POST /api/jobs`` would spend), time of the
sends after it, messages lost, the secondary's transactions while the primary is healthy
(goal 0), and the time and transactions for the syphon to drain the backlog once the primary
is back. Before this increment every one of those sends failed.
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
    from dal.metrics import COUNT_ENV
    from tests.faultproxy import faulty_account
    from tests.pipeline_helpers import Pipeline, sample_photo, synthetic_library
    from workers.services import Services

    folder = tmp / label
    folder.mkdir()
    pipe = Pipeline(cs, folder)
    pipe.library_uri = pipe.create_library("tiles", synthetic_library())
    with faulty_account(cs, faults=faults) as account:
        proxied = Pipeline(account.connection_string, folder, prefix=pipe.prefix)
        proxied.services = Services(StorageClients(account.connection_string, profile="worker"), proxied.settings, "bench")
        env = {COUNT_ENV: str(folder / "counts"), "PHOTOMOSAICS_VISIBILITY_TIMEOUT": "30"}
        if os.environ.get("PHOTOMOSAICS_RETRY_SCALE"):
            env["PHOTOMOSAICS_RETRY_SCALE"] = os.environ["PHOTOMOSAICS_RETRY_SCALE"]
        account.set_active(True)
        pipe.roles = proxied.roles
        for role in ("controller", "responder", "processor", "processor"):
            proxied.start(role, env=env)
        started = time.perf_counter()
        try:
            ids = [proxied.submit(sample_photo(48, 36, seed=500 + n), library_uri=account.through(pipe.library_uri),
                                  tile_size=8, slices=3) for n in range(JOBS)]  # fmt: skip
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
        "label": label, "seconds": seconds, "jobs": JOBS,
        "lost": sum(1 for j in finished.values() if j.status != "done") + (JOBS - len(finished)),
        "transactions": sum(s.get("total", 0) for s in snapshots),
        "retries": retries, "backoff_seconds": sum(s.get("backoff_seconds", 0.0) for s in snapshots),
        "injected": injected,
    }  # fmt: skip


FAILOVER_MESSAGES = 20


def _failover(cs: str) -> dict[str, Any]:
    import uuid

    from dal.azurite import Azurite
    from dal.config import StorageClients
    from dal.failover import FailoverSender, Syphon
    from dal.messages import ImageRequestMessage
    from dal.metrics import TransactionCounter
    from dal.queues import QueueAccessor
    from tests.faultproxy import faulty_account

    prefix = f"fo{uuid.uuid4().hex[:8]}"
    QueueAccessor(StorageClients(cs, profile="probe"), prefix=prefix).ensure_all()
    secondary_counter, syphon_counter = TransactionCounter(), TransactionCounter()
    with Azurite() as second, faulty_account(cs, faults={"reset": 1.0}) as account:
        secondary = StorageClients(second.connection_string, profile="interactive", response_hook=secondary_counter)
        primary = QueueAccessor(StorageClients(account.connection_string, profile="interactive"), prefix=prefix)
        sender = FailoverSender(primary, secondary)

        def message() -> ImageRequestMessage:
            rid = str(uuid.uuid4())
            return ImageRequestMessage(queue_uri=primary.image_request.url, client_id="bench", request_id=rid,
                                       image_uri=f"http://x/imageinput/{rid}.jpg", image_library_uri="http://x/t",
                                       tile_size=8, slices=3)  # fmt: skip

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
        syphon = Syphon(QueueAccessor(StorageClients(cs, profile="worker"), prefix=prefix), syphon_storage)
        started = time.perf_counter()
        moved = syphon.run_once()
        drain = time.perf_counter() - started
        idle_before = syphon_counter.total()
        syphon.run_once()
        arrived = QueueAccessor(StorageClients(cs, profile="probe"), prefix=prefix).image_request.approximate_depth()
    return {"first_failover_s": first, "next_send_s": rest, "parked": where.count("secondary"),
            "moved": moved, "drain_s": drain, "drain_transactions": idle_before,
            "empty_pass_transactions": syphon_counter.total() - idle_before,
            "healthy_secondary_transactions": healthy_secondary,
            "lost": 5 + FAILOVER_MESSAGES - arrived}  # fmt: skip


def main() -> int:
    from dal.azurite import Azurite

    RESULTS.mkdir(exist_ok=True)
    print(f"{JOBS} jobs (48x36, tile 8, 3 slices), 2 processors; faults {FAULTS}", flush=True)
    with Azurite() as azurite, tempfile.TemporaryDirectory(prefix="bench-availability-") as tmp:
        clean = _run(azurite.connection_string, Path(tmp), {}, "clean")
        throttled = _run(azurite.connection_string, Path(tmp), FAULTS, "throttled")
        failover = _failover(azurite.connection_string)
    print(f"{'':10} {'seconds':>8} {'lost':>5} {'transactions':>13} {'retries':>28} {'backoff s':>10}")
    for row in (clean, throttled):
        print(f"{row['label']:10} {row['seconds']:8.1f} {row['lost']:5d} {row['transactions']:13d} "
              f"{json.dumps(row['retries']):>28} {row['backoff_seconds']:10.1f}")  # fmt: skip
    print(f"jobs lost under throttling: {throttled['lost']} (goal 0)")
    print(f"throttled / clean: time x{throttled['seconds'] / clean['seconds']:.2f}, "
          f"transactions x{throttled['transactions'] / max(clean['transactions'], 1):.2f} "
          f"(+{throttled['transactions'] - clean['transactions']} extra); injected {throttled['injected']}")
    f = failover
    print(f"paired secondary, primary cut ({FAILOVER_MESSAGES} sends; before: every send failed):")
    print(f"  time to fail over (first send, interactive profile): {f['first_failover_s']:.1f} s; "
          f"each later send {f['next_send_s'] * 1000:.0f} ms (goal: POST keeps answering 202)")
    print(f"  sends parked on the secondary: {f['parked']}/{FAILOVER_MESSAGES}; messages lost: {f['lost']} (goal 0)")
    print(f"  backlog drain after recovery: {f['moved']} moved in {f['drain_s']:.2f} s, "
          f"{f['drain_transactions']} transactions; an empty syphon pass: {f['empty_pass_transactions']}")
    print(f"  extra transactions on the secondary while the primary is healthy: "
          f"{f['healthy_secondary_transactions']} (goal 0)")
    (RESULTS / "availability.json").write_text(
        json.dumps({"clean": clean, "throttled": throttled, "failover": failover}, indent=1))
    return 1 if throttled["lost"] or clean["lost"] or failover["lost"] else 0
