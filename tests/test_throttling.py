"""Throttling as Azure does it, through a fault-injecting proxy (``tests/support/faultproxy.py``).

Azurite cannot throttle on demand, so a loopback proxy in front of it answers a share of
requests with 503 ServerBusy, 500 OperationTimedOut or a connection reset. The app's retry
policies (``dal.retry``) must wait (about 10 s after a ServerBusy; scaled down here by
``PHOTOMOSAICS_RETRY_SCALE`` / ``PHOTOMOSAICS_SERVER_BUSY_SECONDS``), retry, and lose or
duplicate nothing; the transaction counter (``dal.observability.transactions``) must show the retries.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pytest

from dal.config import StorageClients
from dal.observability.transactions import COUNT_ENV, TransactionCounter
from dal.retry import RETRY_SCALE_ENV, SERVER_BUSY_ENV
from tests.support.faultproxy import FaultyAccount, faulty_account
from tests.support.pipelines import Pipeline, assert_jobs_pixel_identical
from tests.support.sliceable import PLAIN_TILE, plain_photo
from tests.support.waiting import wait_for
from workers.services import RoleServices

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_server_busy_send_waits_then_succeeds_once(
    azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SERVER_BUSY_ENV, "1.5")
    monkeypatch.setenv(RETRY_SCALE_ENV, "1")
    name = f"busy{uuid.uuid4().hex[:10]}"
    direct = StorageClients(azurite_connection_string, profile="probe").queue_service.get_queue_client(name)
    direct.create_queue()
    with faulty_account(azurite_connection_string, faults={"503": 1.0}) as account:
        counter = TransactionCounter()
        queue = StorageClients(account.connection_string, profile="worker", response_hook=counter)
        client = queue.queue_service.get_queue_client(name)
        account.set_active(True)  # every request is throttled ...
        threading.Timer(0.3, account.set_active, args=(False,)).start()  # ... for 0.3 s
        started = time.monotonic()
        client.send_message("hello")
        elapsed = time.monotonic() - started

    assert account.counts()["503"] >= 1
    retries = counter.retries()
    assert retries.get("throttled", 0) >= 1, counter.snapshot()
    # It waited the ServerBusy pause (1.5 s ± 20 %), not the policy's first 3 s ± 1 ... nor 0.
    assert elapsed >= 1.5 * 0.8, elapsed
    assert counter.backoff_seconds() >= 1.2
    assert counter.failures().get("queue PutMessage 503", 0) >= 1
    peeked = direct.peek_messages(max_messages=32)
    assert [m.content for m in peeked] == ["hello"]  # sent once: the 503s never reached storage
    direct.delete_queue()


@pytest.mark.parametrize("resets", [1, 2])
def test_a_dropped_connection_is_retried_at_once_then_with_back_off(
    azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch, resets: int
) -> None:
    monkeypatch.setenv(RETRY_SCALE_ENV, "0.05")
    name = f"reset{uuid.uuid4().hex[:10]}"
    direct = StorageClients(azurite_connection_string, profile="probe").queue_service.get_queue_client(name)
    direct.create_queue()
    direct.send_message("hello")
    with faulty_account(azurite_connection_string, faults={"reset": 1.0}, max_faults=resets) as account:
        counter = TransactionCounter()
        queue = StorageClients(account.connection_string, profile="worker", response_hook=counter)
        account.set_active(True)
        peeked = queue.queue_service.get_queue_client(name).peek_messages()

    assert [m.content for m in peeked] == ["hello"]
    assert account.counts()["reset"] == resets
    assert counter.retries() == {"connection": resets}, counter.snapshot()
    if resets == 1:  # a fresh connection at once: no back-off at all
        assert counter.backoff_seconds() == 0
    else:  # the second failure in a row waits the profile's back-off (3 s ± 1, scaled)
        assert counter.backoff_seconds() >= 2 * 0.05
    direct.delete_queue()


def _one_read(clients: StorageClients, service: str, name: str) -> object:
    if service == "queue":
        return clients.queue_service.get_queue_client(name).get_queue_properties()
    if service == "blob":
        return clients.blob_service.get_container_client(name).get_container_properties()
    return clients.table_service.get_table_client(name).query_entities("PartitionKey eq 'none'").by_page().next()


@pytest.mark.parametrize("service", ["queue", "blob", "table"])
def test_a_worker_rides_out_as_many_server_busy_answers_in_a_row_as_its_profile_says(
    azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch, service: str
) -> None:
    # The SDKs stop after 3 retries of a 5xx whatever retry_total says; the worker profile's 5
    # must hold for throttling too, or a role dies at start-up in a burst of ServerBusy.
    monkeypatch.setenv(RETRY_SCALE_ENV, "0.01")
    monkeypatch.setenv(SERVER_BUSY_ENV, "1")
    name = f"busy{uuid.uuid4().hex[:10]}"
    direct = StorageClients(azurite_connection_string, profile="probe")
    {"queue": direct.queue_service.create_queue, "blob": direct.blob_service.create_container}.get(
        service, direct.table_service.create_table
    )(name)
    with faulty_account(azurite_connection_string, faults={"503": 1.0}, max_faults=5) as account:
        counter = TransactionCounter()
        worker = StorageClients(account.connection_string, profile="worker", response_hook=counter)
        account.set_active(True)
        _one_read(worker, service, name)  # raises HttpResponseError ServerBusy after 3 retries unless fixed

    assert account.counts()["503"] == 5
    assert counter.failures() and sum(counter.failures().values()) == 5, counter.snapshot()


@pytest.mark.parametrize("role", ["controller", "processor", "responder"])
def test_a_role_starts_through_throttling_that_outlasts_its_retries(pipe: Pipeline, role: str) -> None:
    # 14 ServerBusy answers in a row on every service: two calls' worth of the worker profile's
    # six attempts, and more. The role waits them out at start-up instead of dying before it
    # holds a single message.
    env = {RETRY_SCALE_ENV: "0.01", SERVER_BUSY_ENV: "1"}
    with faulty_account(pipe.connection_string, faults={"503": 1.0}, max_faults=14) as account:
        proxied, _ = _roles_through(account, pipe, env, roles=(role,))
        started = proxied.roles[0]
        try:

            def up() -> bool:
                assert started.alive(), started.log_tail()  # it gave up: say why at once
                return "role.start" in started.log_path.read_text(errors="replace")

            wait_for(up, seconds=90, step=0.2, what=f"the {role} started", details=started.log_tail)
            log = started.log_path.read_text(errors="replace")
            assert started.alive(), started.log_tail()
            assert "role.storage_busy" in log, started.log_tail()  # it did outlast a call's retries
            assert account.proxies[1].counts["503"] == 14  # the queue service's burst, all of it
        finally:
            proxied.stop_all()


PIPELINE_ROLES = ("controller", "processor", "processor", "responder")


def _roles_through(
    account: FaultyAccount, pipe: Pipeline, env: dict[str, str], roles: Iterable[str] = PIPELINE_ROLES
) -> tuple[Pipeline, str]:
    """The same pipeline (prefix) seen through the proxy, its faults on and its ``roles``
    started: the roles and the submitter use it. Returns it and the library's URL through it."""
    proxied = Pipeline(account.connection_string, pipe.tmp_path, prefix=pipe.prefix)
    proxied.services = RoleServices(
        StorageClients(account.connection_string, profile="worker"), proxied.settings, "tests"
    )
    account.set_active(True)
    pipe.roles = proxied.roles  # their logs show up in pipe.wait's timeout message
    for role in roles:
        proxied.start(role, env=env)
    return proxied, account.through(pipe.library_uri)


def _submit_three(proxied: Pipeline, library_uri: str, seed: int) -> dict[str, Any]:
    """Three small 3-slice jobs through the proxy: ``{request_id: photo}``."""
    images = {}
    for n in range(3):
        image = plain_photo(3, seed=seed + n)
        images[proxied.submit(image, library_uri=library_uri, tile_size=PLAIN_TILE, slices=3)] = image
    return images


def _assert_logged_once(pipe: Pipeline, request_ids: Iterable[str]) -> None:
    for rid in request_ids:
        kinds = [event.kind for event in pipe.services.jobs.events(rid)]
        assert kinds.count("stitched") == 1 and kinds.count("done") == 1, (rid, kinds)


def test_jobs_complete_pixel_identical_under_injected_throttling(pipe: Pipeline) -> None:
    counts_dir = pipe.tmp_path / "counts"
    faults = {"503": 0.2, "500": 0.03, "reset": 0.02}
    with faulty_account(pipe.connection_string, faults=faults) as account:
        env = {RETRY_SCALE_ENV: "0.05", SERVER_BUSY_ENV: "4", COUNT_ENV: str(counts_dir)}
        proxied, library_uri = _roles_through(account, pipe, env)
        try:
            images = _submit_three(proxied, library_uri, seed=300)
            finished = pipe.wait(images, timeout=180)
            # A retried send may deliver twice (at-least-once); the roles drain the duplicates.
            wait_for(
                lambda: not any(pipe.queue_depths().values()),
                seconds=60,
                step=0.5,
                what="every queue drained",
                details=lambda: str(pipe.queue_depths()),
            )
            injected = account.counts()
            blob_queue = sum(p.counts["503"] + p.counts["500"] for p in account.proxies[:2])
        finally:
            proxied.stop_all()

    assert_jobs_pixel_identical(pipe, finished, images, tile=PLAIN_TILE, slices=3)
    # Stitched once each, in the controller's log and in the job's events: an event write that
    # lost its connection is repeated under its own key, so it is neither lost nor doubled.
    controller_log = "".join(r.log_path.read_text() for r in proxied.roles if r.role == "controller")
    for rid in images:
        assert controller_log.count(f"job {rid}: stitched in") == 1, rid
    _assert_logged_once(pipe, images)
    depths = pipe.queue_depths()
    assert all(depth == 0 for depth in depths.values()), str(depths)  # nothing poisoned, nothing left
    assert injected["503"] >= 10, injected
    snapshots = [json.loads(p.read_text()) for p in counts_dir.glob("*.json")]
    assert len(snapshots) == 4, [p.name for p in counts_dir.iterdir()]
    throttled = sum(s.get("retries", {}).get("throttled", 0) for s in snapshots)
    connection = sum(s.get("retries", {}).get("connection", 0) for s in snapshots)
    # Each blob/queue 503/500 was retried by ThrottleAwareRetry (tables retry on their own SDK's policy).
    assert throttled >= blob_queue * 0.9, (throttled, blob_queue, injected, snapshots)
    assert connection >= 1, snapshots
    assert sum(s.get("backoff_seconds", 0) for s in snapshots) > 0


def test_jobs_complete_and_log_once_when_answers_are_lost(pipe: Pipeline) -> None:
    # "lost": the server ran the request and the answer never came back. The SDK repeats it;
    # a repeated write must not fail, double or be mistaken for someone else's (the job's
    # "done" line hangs on that), and a lost receive only hides its messages for a while.
    faults = {"lost": 0.08, "reset": 0.02}
    with faulty_account(pipe.connection_string, faults=faults) as account:
        proxied, library_uri = _roles_through(account, pipe, {RETRY_SCALE_ENV: "0.05"})
        try:
            images = _submit_three(proxied, library_uri, seed=400)
            finished = pipe.wait(images, timeout=180)
            lost = account.counts()["lost"]
        finally:
            proxied.stop_all()

    assert lost >= 10, lost
    assert_jobs_pixel_identical(pipe, finished, images, tile=PLAIN_TILE, slices=3)
    _assert_logged_once(pipe, images)
    poisoned = {name: depth for name, depth in pipe.queue_depths().items() if name.endswith("-poison")}
    assert not any(poisoned.values()), poisoned
