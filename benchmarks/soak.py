"""Reliability soak: a steady stream of jobs while faults are injected at random.

The service is the one ``photomosaics run`` starts (``photomosaics.local.children.children``):
the web app, a controller, a responder and two processors as supervised child processes
(``photomosaics.local.supervisor``; a dead child's leases are handed back at once), its own Azurite on
disk, and hints through the local folder and a real Valkey server together (``make run``
pointed at a shared server). Several clients (own sessions, so own client ids) each POST a
job every few seconds, jittered: by default the job a person makes with the create page's
defaults (a 1 MP photo, 32 px tiles, 100 across, 4 slices; every ``BENCH_SOAK_INTERVAL``, 8 s,
per client), or with ``BENCH_SOAK_JOB=small`` a 40x30 photo at tile 8 in 2 slices (every
2.5 s). The small job is done in a fraction of a second, so its p99 under faults is the
faults' own length: no job in flight finishes while storage is frozen for 2-5 s.

Two phases of the same load and length, one after the other: calm, then with faults. One
fault every 4-12 s (seeded), of five kinds: a worker role SIGKILLed (the supervisor restarts
it); storage frozen (Azurite SIGSTOPped for 2-5 s, then SIGCONT); junk in a work queue
(``tests/support/junk.py``); the Valkey server killed and started again 3-10 s later; a processor
SIGSTOPped past its lease, then resumed (the lease is ``LEASE`` s here, the pause longer; the
controller hedges the paused processor's slice long before, ``workers.controller.hedging``). One
processor is paused at a time: with both stopped no job could move until one resumes, an
outage of the whole stage rather than a hung worker.

After each phase every accepted job is waited for. Printed beside the goals: accepted (202),
refused, done, failed and why, lost (accepted, never finished: goal 0), stitched twice (more
than one ``stitched`` event in the job's log, or ``stitched in`` line in the controllers'
log: goal 0), p50/p99 from the job's own
``created_at`` to ``finished_at`` (goal: p99 with faults at most twice the calm one), the p99
with faults less the time storage was frozen under each job (what the code adds to a paused
dependency: nothing moves while storage is stopped), and the faults injected. ``python -m benchmarks soak``; ``BENCH_SOAK_SECONDS`` (180 per phase),
``BENCH_SOAK_CLIENTS`` (3), ``BENCH_SOAK_JOB`` and ``BENCH_SOAK_INTERVAL`` size it;
``BENCH_SOAK_SEED`` (1) picks the clients' and the faults' random draws; ``BENCH_SOAK_DIR``
keeps the children's logs (in ``<dir>/logs``) instead of a temporary folder. The run fails
(exit 1) when an accepted job is lost, failed or stitched twice.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import secrets
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECONDS = float(os.environ.get("BENCH_SOAK_SECONDS", "180"))
CLIENTS = int(os.environ.get("BENCH_SOAK_CLIENTS", "3"))
# What each client sends: the job a person makes with the create page's defaults (a 1 MP
# photo, 32 px tiles, 100 across, 4 slices), or a tiny one that shows the faults' own length.
JOBS = {
    "default": ((1152, 864), {"library": "tiles", "tile_size": "32", "tiles_across": "100", "slices": "4"}, 8.0),
    "small": ((40, 30), {"library": "tiles", "tile_size": "8", "slices": "2"}, 2.5),
}
JOB = os.environ.get("BENCH_SOAK_JOB", "default")
PHOTO_SIZE, FORM, _INTERVAL = JOBS[JOB]
INTERVAL = float(os.environ.get("BENCH_SOAK_INTERVAL", str(_INTERVAL)))
SEED = int(os.environ.get("BENCH_SOAK_SEED", "1"))
LEASE = 15
DRAIN = 300.0  # after a phase, how long accepted jobs may take to finish before they count as lost
FAULT_GAP = (4.0, 12.0)
RESULTS = Path("bench-results")
PROCESSORS = ("processor-1", "processor-2")
ROLES = ("controller", "responder", *PROCESSORS)


class Service:
    """Azurite, Valkey, the stores and a tile library, and the supervised children."""

    def __init__(self, tmp: Path) -> None:
        from photomosaics.local.azurite import Azurite
        from tests.support.hint_server import ValkeyProcess

        self.tmp = tmp
        self.azurite = Azurite(location=tmp / "azurite")
        self.valkey = ValkeyProcess(tmp)
        self.supervisor: Any = None
        self.base = ""
        self.handed_back = 0

    def start(self) -> None:
        from dal.config import Settings, StorageClients
        from dal.hints.channel import HINT_DIR_ENV, HINTS_URL_ENV, short_hint_dir
        from photomosaics.commands.run import choose_port
        from photomosaics.local.children import children
        from photomosaics.local.supervisor import ChildSpec, Supervisor
        from tests.support.pipelines import synthetic_library
        from workers.runtime.leases import LEASE_DIR_ENV
        from workers.services import RoleServices

        cs = self.azurite.start()
        self.valkey.start()
        self.storage = StorageClients(cs, profile="probe")
        self.services = RoleServices(StorageClients(cs, profile="worker"), Settings.from_env({}), "soak")
        self.services.ensure()
        self.services.libraries.create("tiles", "soak tiles", synthetic_library(), shared=True)
        hints, leases = short_hint_dir(self.tmp / "hints"), self.tmp / "leases"
        leases.mkdir(parents=True, exist_ok=True)
        shared = {
            HINT_DIR_ENV: str(hints),
            LEASE_DIR_ENV: str(leases),
            HINTS_URL_ENV: self.valkey.url,
            "PHOTOMOSAICS_LEASE_SECONDS": str(LEASE),
            "PHOTOMOSAICS_LOG_LEVEL": "INFO",
            # a load generator is not what the per-client quotas are for
            "PHOTOMOSAICS_MAX_UNFINISHED_JOBS": "100000",
            "PHOTOMOSAICS_SUBMISSIONS_PER_MINUTE": "100000",
            "PHOTOMOSAICS_ADDRESS_BURST": "100000",  # every client is 127.0.0.1 here
            "PHOTOMOSAICS_ADDRESS_SUBMISSIONS_PER_HOUR": "100000",
        }
        port = choose_port("127.0.0.1", 0)
        specs = children(
            connection_string=cs,
            secret_key=secrets.token_urlsafe(32),
            host="127.0.0.1",
            port=port,
            processors=2,
            shared=shared,
        )
        logs = self.tmp / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # Each child's output to its own file: sh execs the child, so the pid is the role's.
        specs = [
            ChildSpec(
                name=s.name,
                argv=["sh", "-c", 'exec "$@" >>"$0" 2>&1', str(logs / f"{s.name}.log"), *s.argv],
                env=s.env,
                standby=s.standby,
            )
            for s in specs
        ]
        self.logs = logs
        self.supervisor = Supervisor(specs, grace=20, on_exit=self._hand_back(cs, shared))
        threading.Thread(target=self.supervisor.run, name="soak-supervisor", daemon=True).start()
        self.base = f"http://127.0.0.1:{port}"

    def _hand_back(self, cs: str, shared: dict[str, str]) -> Any:
        """``photomosaics run``'s ``on_exit`` (what a dead child held is visible and announced at
        once), counting the messages found in the dead child's lease journal."""
        from dal.hints.channel import HINTS_URL_ENV
        from photomosaics.local.children import hand_back_on_exit
        from workers.runtime.leases import LEASE_DIR_ENV, read_journal

        hand_back = hand_back_on_exit(cs, shared, hints_url=shared[HINTS_URL_ENV], lease_seconds=LEASE)

        def on_exit(name: str, pid: int, code: int | None) -> None:
            self.handed_back += len(read_journal(shared[LEASE_DIR_ENV], pid))
            hand_back(name, pid, code)

        return on_exit

    def stitches_logged(self) -> Counter[str]:
        """Stitches per job from the controllers' own log lines (``job <id>: stitched in``)."""
        found: Counter[str] = Counter()
        with contextlib.suppress(FileNotFoundError):
            for line in (self.logs / "controller.log").read_text(errors="replace").splitlines():
                if ": stitched in " in line:
                    found[line.split(": stitched in ")[0].rsplit("job ", 1)[-1]] += 1
        return found

    def print_logs(self, lines: int = 15) -> None:
        for path in sorted(self.logs.glob("*.log")) if hasattr(self, "logs") else []:
            print(f"--- {path.name} ---", *path.read_text(errors="replace").splitlines()[-lines:], sep="\n")

    def pid(self, name: str) -> int | None:
        return self.supervisor.pids().get(name) if self.supervisor else None

    def stop(self) -> None:
        for pid in (self.azurite.pid, *(self.pid(n) for n in ROLES)):  # nothing may stay frozen
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGCONT)  # type: ignore[arg-type]
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor.stopped.wait(60)
        self.valkey.kill()
        self.azurite.stop()


@dataclass
class Submitted:
    client: int
    status: int
    request_id: str = ""
    detail: str = ""


@dataclass
class Clients:
    """``CLIENTS`` threads, each its own session (client id), POSTing a job every ``INTERVAL`` s."""

    base: str
    seed: int
    submitted: list[Submitted] = field(default_factory=list)
    sessions: dict[int, Any] = field(default_factory=dict)

    def run(self, seconds: float) -> None:
        stop = threading.Event()
        threads = [threading.Thread(target=self._client, args=(n, stop), daemon=True) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        stop.wait(seconds)
        stop.set()
        for thread in threads:
            thread.join(60)

    def session(self, n: int) -> Any:
        import requests

        from webapp.csrf import CSRF_HEADER, CSRF_VALUE

        if n not in self.sessions:
            self.sessions[n] = requests.Session()
            self.sessions[n].headers[CSRF_HEADER] = CSRF_VALUE
        return self.sessions[n]

    def _client(self, n: int, stop: threading.Event) -> None:
        import requests

        from tests.support.pipelines import sample_photo

        rng = random.Random(self.seed * 100 + n)
        session, image = self.session(n), sample_photo(*PHOTO_SIZE, seed=self.seed * 100 + n)
        while not stop.wait(rng.uniform(0.5, 1.5) * INTERVAL):
            try:
                answer = session.post(f"{self.base}/api/jobs", data=FORM, files={"image": ("p.png", image)}, timeout=30)
            except requests.RequestException as exc:
                self.submitted.append(Submitted(n, 0, detail=type(exc).__name__))
                continue
            body = answer.json() if answer.headers.get("Content-Type", "").startswith("application/json") else {}
            self.submitted.append(
                Submitted(
                    n,
                    answer.status_code,
                    body.get("request_id", ""),
                    "" if answer.status_code == 202 else str(body.get("error", answer.reason)),
                )
            )


FROZEN = "storage frozen"


@dataclass
class Fault:
    """One fault injected: what, when, and until when (``end == start`` for a kill or junk)."""

    what: str
    start: float
    end: float = 0.0

    def __post_init__(self) -> None:
        self.end = max(self.end, self.start)

    def describe(self, since: float) -> str:
        """``what@+1.2s`` (from ``since``), and for how long when it lasted."""
        lasted = f" for {self.end - self.start:.1f}s" if self.end > self.start else ""
        return f"{self.what}@{self.start - since:+.1f}s{lasted}"


class Faults:
    """One random fault every ``FAULT_GAP`` seconds until ``end``; what a fault stopped is resumed by a timer."""

    KINDS = ("kill_role", "freeze_storage", "junk", "hints_down", "pause_processor")

    def __init__(self, service: Service, seed: int) -> None:
        self.service = service
        self.rng = random.Random(seed)
        self.injected: Counter[str] = Counter()
        self.timeline: list[Fault] = []  # every fault injected, with what it hit and for how long
        self._undo: dict[str, Callable[[], None]] = {}  # what is stopped right now -> how to resume it
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(self.rng.uniform(*FAULT_GAP)):
            kind = self.rng.choice(self.KINDS)
            try:
                if (fault := getattr(self, f"_{kind}")()) is not None:
                    self.injected[kind] += 1
                    self.timeline.append(fault)
            except Exception as exc:  # a fault that could not be injected is reported, not fatal
                self.injected[f"{kind} (failed: {type(exc).__name__})"] += 1

    def end(self) -> None:
        """Stop injecting, and resume whatever is still stopped, at once."""
        self._stop.set()
        for timer in self._timers:
            timer.cancel()
        for key in list(self._undo):
            self._resume(key)

    def _stopped(self, key: str) -> bool:
        with self._lock:
            return key in self._undo

    def _until(self, key: str, seconds: float, undo: Callable[[], None], what: str) -> Fault:
        with self._lock:
            self._undo[key] = undo
        timer = threading.Timer(seconds, self._resume, (key,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        now = time.time()
        return Fault(what, now, now + seconds)

    def _resume(self, key: str) -> None:
        with self._lock:
            undo = self._undo.pop(key, None)
        if undo is not None:
            with contextlib.suppress(ProcessLookupError):
                undo()

    def _kill_role(self) -> Fault | None:
        name = self.rng.choice([n for n in ROLES if not self._stopped(n)])
        pid = self.service.pid(name)
        if pid is None:  # being restarted already
            return None
        os.kill(pid, signal.SIGKILL)
        return Fault(f"killed {name}", time.time())

    def _freeze_storage(self) -> Fault | None:
        pid = self.service.azurite.pid
        if pid is None or self._stopped("azurite"):
            return None
        os.kill(pid, signal.SIGSTOP)
        return self._until("azurite", self.rng.uniform(2.0, 5.0), lambda: os.kill(pid, signal.SIGCONT), FROZEN)

    def _junk(self) -> Fault | None:
        from tests.support.junk import put_junk

        queues = self.service.services.queues
        queue = self.rng.choice(
            [*queues.image_request_lanes, *queues.slice_request_queues(), queues.slice_response, queues.image_response]
        )
        put_junk(queue)
        return Fault(f"junk in {queue.name}", time.time())

    def _hints_down(self) -> Fault | None:
        if self._stopped("valkey"):
            return None
        self.service.valkey.kill()
        return self._until("valkey", self.rng.uniform(3.0, 10.0), self.service.valkey.start, "Valkey down")

    def _pause_processor(self) -> Fault | None:
        # One processor at a time: the fault is a hung processor, and its peer takes its work
        # (hedged). With every processor stopped no job can move, whatever the code does.
        if any(self._stopped(name) for name in PROCESSORS):
            return None
        name = self.rng.choice(PROCESSORS)
        pid = self.service.pid(name)
        if pid is None:
            return None
        os.kill(pid, signal.SIGSTOP)
        return self._until(
            name, LEASE + self.rng.uniform(3.0, 8.0), lambda: os.kill(pid, signal.SIGCONT), f"{name} paused"
        )


def _phase(service: Service, label: str, seed: int, *, faults: bool) -> dict[str, Any]:
    """``SECONDS`` of load (and faults), then wait for every accepted job; the figures."""
    clients = Clients(service.base, seed)
    injector = Faults(service, seed) if faults else None
    thread = threading.Thread(target=injector.run, daemon=True) if injector else None
    if thread:
        thread.start()
    try:
        clients.run(SECONDS)
    finally:
        if injector:
            injector.end()
            assert thread is not None
            thread.join(30)
    jobs = _wait_all(service, clients)
    accepted = [s for s in clients.submitted if s.status == 202]
    done = [j for j in jobs.values() if j["status"] == "done"]
    latencies = sorted(j["elapsed_seconds"] for j in done)
    frozen = [f for f in (injector.timeline if injector else []) if f.what == FROZEN]
    # The same latencies less the time storage was frozen under each job: what the code adds.
    unfrozen = sorted(j["elapsed_seconds"] - _overlap(j, frozen) for j in done)
    logged = service.stitches_logged()
    stitches = {rid: max(_stitch_count(service, rid), logged[rid]) for rid in jobs}
    return {
        "label": label,
        "seconds": SECONDS,
        "clients": CLIENTS,
        "accepted": len(accepted),
        "refused": dict(Counter(f"{s.status} {s.detail}".strip() for s in clients.submitted if s.status != 202)),
        "done": len(done),
        "failed": dict(Counter(j["error"] for j in jobs.values() if j["status"] == "failed")),
        "lost": len(accepted) - len([j for j in jobs.values() if j["status"] in ("done", "failed")]),
        "stitched_twice": sum(1 for n in stitches.values() if n > 1),
        "not_stitched_done": sum(1 for rid, j in jobs.items() if j["status"] == "done" and stitches[rid] == 0),
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p99": _percentile(latencies, 0.99),
        "max": latencies[-1] if latencies else float("nan"),
        "p99_unfrozen": _percentile(unfrozen, 0.99),
        "faults": dict(injector.injected) if injector else {},
        "slowest": _slowest(jobs, injector.timeline if injector else []),
        "handed_back": service.handed_back,
        "restarts": dict(service.supervisor.restarts()),
    }


def _percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of them at or below it."""
    if not values:
        return float("nan")
    return values[max(0, min(len(values), math.ceil(q * len(values))) - 1)]


def _wait_all(service: Service, clients: Clients) -> dict[str, dict[str, Any]]:
    """Every accepted job as its client sees it (``GET /api/jobs/<id>``), once finished or after ``DRAIN``."""
    pending = {s.request_id: s.client for s in clients.submitted if s.status == 202}
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + DRAIN
    while pending and time.monotonic() < deadline:
        for rid, n in list(pending.items()):
            try:
                answer = clients.session(n).get(f"{service.base}/api/jobs/{rid}", timeout=30)
            except Exception:  # the web app restarting: ask again
                continue
            if answer.status_code == 200:
                seen[rid] = answer.json()
                if seen[rid]["status"] in ("done", "failed"):
                    del pending[rid]
        if pending:
            time.sleep(1.0)
    return seen


def _stitch_count(service: Service, rid: str) -> int:
    """How many stitches the job's event log records (each stitch writes one ``stitched`` event)."""
    return sum(1 for event in service.services.jobs.events(rid) if event.kind == "stitched")


def _overlap(job: dict[str, Any], faults: list[Fault]) -> float:
    """Seconds of the job's life (``created_at`` to ``finished_at``) that the faults lasted."""
    start, end = _life(job)
    return sum(max(0.0, min(end, f.end) - max(start, f.start)) for f in faults)


def _life(job: dict[str, Any]) -> tuple[float, float]:
    from datetime import datetime

    created, finished = (job[key].replace("Z", "+00:00") for key in ("created_at", "finished_at"))
    return datetime.fromisoformat(created).timestamp(), datetime.fromisoformat(finished).timestamp()


def _slowest(jobs: dict[str, dict[str, Any]], timeline: list[Fault], count: int = 3) -> list[str]:
    """The slowest jobs, each with the faults in effect while it ran (from 1 s before it was created)."""
    rows = []
    done = [j for j in jobs.values() if j["status"] == "done" and j.get("finished_at")]
    for job in sorted(done, key=lambda j: -j["elapsed_seconds"])[:count]:
        start, end = _life(job)
        during = [fault.describe(start) for fault in timeline if fault.start <= end and fault.end >= start - 1]
        rows.append(f"{job['request_id'][:8]} {job['elapsed_seconds']:.2f} s: {', '.join(during) or 'no fault'}")
    return rows


def _warm_up(service: Service) -> None:
    """The web app answers and one job goes all the way through (every role is up)."""
    import requests

    from tests.support.pipelines import sample_photo

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"{service.base}/healthz", timeout=5).status_code == 200:
                break
        time.sleep(0.5)
    clients = Clients(service.base, seed=0)
    session = clients.session(0)
    answer = session.post(
        f"{service.base}/api/jobs", data=FORM, files={"image": ("p.png", sample_photo(*PHOTO_SIZE, seed=1))}, timeout=60
    )
    if answer.status_code != 202:
        raise RuntimeError(f"warm-up job refused: {answer.status_code} {answer.text[:300]}")
    clients.submitted.append(Submitted(0, 202, answer.json()["request_id"]))
    job = _wait_all(service, clients)
    if not job or next(iter(job.values()))["status"] != "done":
        raise RuntimeError(f"warm-up job did not finish: {job}")


def _print(calm: dict[str, Any], faulty: dict[str, Any]) -> None:
    print(
        f"{CLIENTS} clients, a {PHOTO_SIZE[0]}x{PHOTO_SIZE[1]} job ({json.dumps(FORM)}) every ~{INTERVAL:g} s each, "
        f"{SECONDS:.0f} s per phase; "
        f"lease {LEASE} s; 2 processors"
    )
    print(
        "| phase | accepted | refused | done | failed | lost (goal 0) | stitched twice (goal 0) | p50 s | p99 s | max s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in (calm, faulty):
        print(
            f"| {row['label']} | {row['accepted']} | {sum(row['refused'].values())} | {row['done']} "
            f"| {sum(row['failed'].values())} | {row['lost']} | {row['stitched_twice']} | {row['p50']:.2f} "
            f"| {row['p99']:.2f} | {row['max']:.2f} |"
        )
    ratio = faulty["p99"] / calm["p99"] if calm["p99"] else float("nan")
    print(f"p99 with faults / calm: x{ratio:.2f} (goal <= 2)")
    unfrozen = faulty["p99_unfrozen"] / calm["p99"] if calm["p99"] else float("nan")
    print(
        f"p99 with faults less the time storage was frozen under each job: {faulty['p99_unfrozen']:.2f} s, "
        f"x{unfrozen:.2f} the calm p99 (what the faults cost beyond storage's own pause)"
    )
    print(
        f"faults injected: {json.dumps(faulty['faults'])}; restarts {json.dumps(faulty['restarts'])}; "
        f"messages in dead children's lease journals (handed back): {faulty['handed_back']}"
    )
    print(f"slowest jobs with faults (and the faults while they ran): {'; '.join(faulty['slowest'])}")
    for row in (calm, faulty):
        if row["failed"] or row["refused"]:
            print(f"{row['label']}: failed {json.dumps(row['failed'])}; refused {json.dumps(row['refused'])}")
        if row["not_stitched_done"]:
            print(
                f"{row['label']}: {row['not_stitched_done']} done jobs without a 'stitched' event (one-slice jobs have none)"
            )


def main() -> int:
    RESULTS.mkdir(exist_ok=True)
    keep = os.environ.get("BENCH_SOAK_DIR")  # keep the children's logs there (else a temporary folder)
    with contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="bench-soak-") as folder:
        service = Service(Path(folder))
        try:
            service.start()
            _warm_up(service)
            calm = _phase(service, "calm", seed=SEED, faults=False)
            faulty = _phase(service, "faults", seed=SEED + 1, faults=True)
        except BaseException:
            service.print_logs()
            raise
        finally:
            service.stop()
    _print(calm, faulty)
    (RESULTS / "soak.json").write_text(json.dumps({"calm": calm, "faults": faulty}, indent=1))
    # The goal is every accepted job done, once: a lost, failed or twice stitched job fails the run.
    broken = [row[key] for row in (calm, faulty) for key in ("lost", "stitched_twice")]
    return 1 if any(broken) or calm["failed"] or faulty["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
