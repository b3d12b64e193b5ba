"""Prometheus endpoints: a role's /metrics and /healthz while it works, the web app's /metrics.

Real role processes on the session Azurite; each scrape is parsed with prometheus_client's
own parser, so names and label sets are what a Prometheus server would store.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from tests.support.metrics import samples, value_of
from tests.support.pipelines import Pipeline
from tests.support.sliceable import unit_photo
from tests.support.waiting import wait_for


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    return samples(text)


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except (urllib.error.URLError, ConnectionError):
        return False
    return True


def test_role_metrics_move_while_a_job_runs_and_healthz_answers(pipe: Pipeline) -> None:
    # Port 0: each role binds a free port itself and logs it (a port chosen here could be taken
    # by another test's process before the role binds it).
    roles = {}
    for role in ("controller", "processor", "responder"):
        env = {"PHOTOMOSAICS_METRICS_PORT": "0"}
        if role == "processor":
            env["PHOTOMOSAICS_TEST_SLICE_DELAY"] = "0.4"  # slow enough to be seen mid-job
        if role == "controller":  # exact counts below: no hedged copy (workers.controller.hedging) if a render stalls
            env["PHOTOMOSAICS_HEDGES_PER_SLICE"] = "0"
        roles[role] = pipe.start(role, env=env)
    url = {role: _metrics_url(process) for role, process in roles.items()}
    for role in roles:
        health = url[role] + "/healthz"
        wait_for(lambda health=health: _answers(health), seconds=30, step=0.2, what=f"{role}'s /healthz")
    before = _scrape(url["processor"] + "/metrics")
    assert value_of(before, "photomosaics_messages_received_total", role="processor", queue="slicerequest") == 0
    assert value_of(before, "photomosaics_queue_messages", queue="slicerequest") == 0
    assert value_of(before, "photomosaics_storage_requests_total", operation="queue GetMessages") >= 1

    slices = 4
    rid = pipe.submit(unit_photo(slices, seed=3), library_uri=pipe.library_uri, tile_size=8, slices=slices)
    seen: list[float] = []  # slices done, scrape by scrape

    def every_slice_done() -> bool:
        seen.append(
            value_of(
                _scrape(url["processor"] + "/metrics"), "photomosaics_messages_succeeded_total", queue="slicerequest"
            )
        )
        return seen[-1] == slices

    wait_for(every_slice_done, seconds=60, step=0.15, what="every slice counted", details=pipe.logs)
    jobs = pipe.wait([rid], timeout=60)
    assert jobs[rid].status == "done", jobs[rid]
    assert any(0 < done < slices for done in seen), (
        f"no scrape saw the job half-way (slices done between 1 and 3): {seen}"
    )

    after = _scrape(url["processor"] + "/metrics")
    labels = {"role": "processor", "queue": "slicerequest"}
    assert value_of(after, "photomosaics_messages_received_total", **labels) == slices
    assert value_of(after, "photomosaics_messages_processed_total", **labels) == slices
    assert value_of(after, "photomosaics_messages_failed_total", **labels) == 0
    assert value_of(after, "photomosaics_message_handler_duration_seconds_count", outcome="ok", **labels) == slices
    # Each render slept 0.4 s: the histogram's sum cannot be less.
    assert value_of(after, "photomosaics_message_handler_duration_seconds_sum", **labels) >= 0.4 * slices
    assert value_of(after, "photomosaics_storage_requests_total", operation="blob PutBlob") >= slices
    assert value_of(after, "photomosaics_storage_requests_total", operation="queue DeleteMessage") >= slices

    controller = _scrape(url["controller"] + "/metrics")
    assert value_of(controller, "photomosaics_messages_succeeded_total", queue="imagerequest") == 1
    assert value_of(controller, "photomosaics_messages_succeeded_total", queue="sliceresponse") == slices
    assert value_of(controller, "photomosaics_poison_queue_messages", queue="sliceresponse") == 0
    with urllib.request.urlopen(url["responder"] + "/healthz", timeout=5) as response:
        assert response.status == 200 and response.read() == b"ok\n"


def test_healthz_fails_when_a_receive_loop_stops_polling(storage: Any, unique: str) -> None:
    """A listener whose loop never polls (here: never started) turns /healthz to 503 after ``stale``."""
    from dal.queues.work_queue import ImageProcessingQueue
    from workers.runtime.listener import QueueListener
    from workers.runtime.observability import serve_role_metrics

    queue = ImageProcessingQueue(storage, "slicerequest", prefix=f"t{unique}")
    queue.ensure_exists()
    listener = QueueListener(queue, lambda received: None, name="stuck")
    server = serve_role_metrics("processor", [listener], address=("127.0.0.1", 0))
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert urllib.request.urlopen(url + "/healthz", timeout=5).status == 200
        liveness = server.liveness  # type: ignore[attr-defined]
        liveness.stale = 0.2
        time.sleep(0.4)
        try:
            urllib.request.urlopen(url + "/healthz", timeout=5)
            raise AssertionError("a stuck loop still reported healthy")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503 and b"stuck: no receive" in exc.read()
        listener.stats["receives"] += 1  # what one poll of a live loop does
        assert urllib.request.urlopen(url + "/healthz", timeout=5).status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_bad_metrics_port_is_a_clear_error() -> None:
    import pytest

    from workers.runtime.observability import metrics_address

    assert metrics_address({}) is None
    assert metrics_address({"PHOTOMOSAICS_METRICS_PORT": "9100"}) == ("127.0.0.1", 9100)
    assert metrics_address({"PHOTOMOSAICS_METRICS_PORT": "0", "PHOTOMOSAICS_METRICS_HOST": "0.0.0.0"}) == ("0.0.0.0", 0)
    for bad in ("http", "70000", "-1"):
        with pytest.raises(ValueError, match="PHOTOMOSAICS_METRICS_PORT must be"):
            metrics_address({"PHOTOMOSAICS_METRICS_PORT": bad})


def _metrics_url(process: Any) -> str:
    """The base URL a role logged for its metrics server (``role.metrics ... url=.../metrics``)."""

    def logged() -> str | None:
        for line in process.log_path.read_text(errors="replace").splitlines():
            if "role.metrics" in line and "url=" in line:
                return line.split("url=", 1)[1].split()[0].removesuffix("/metrics")
        return None

    return wait_for(logged)
