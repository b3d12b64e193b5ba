"""Per-client quotas on POST /api/jobs, against the session's Azurite (dal.admission.quotas).

The app here has small limits (2 unfinished jobs, 3 submissions a minute); the shared web
fixture raises them on purpose, since its tests never finish their jobs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from flask import Flask

from dal.config import IMAGE_INPUT_CONTAINER, Settings, StorageClients
from dal.jobs.model import JobStatus
from dal.jobs.store import JobStore
from dal.queues.work_queue import QueueAccessor
from dal.errors import QuotaExceeded
from dal.admission.quotas import QuotaStore
from tests.web.conftest import SECRET, ApiClient, submit
from webapp import create_app


def _app(settings: Settings, connection_string: str, **limits: int) -> Flask:
    app = create_app(
        {"TESTING": True, "SECRET_KEY": SECRET, "SETTINGS": replace(settings, **limits),
         "CONNECTION_STRING": connection_string}  # fmt: skip
    )
    app.test_client_class = ApiClient
    return app


def _stored_inputs(storage: StorageClients, prefix: str) -> set[str]:
    container = storage.blob_service.get_container_client(f"{prefix}{IMAGE_INPUT_CONTAINER}")
    return {blob.name for blob in container.list_blobs()}


def test_the_unfinished_limit_answers_429_and_stores_nothing(
    web_settings: Settings, azurite_connection_string: str, tile_library: str, web_storage: StorageClients
) -> None:
    app = _app(web_settings, azurite_connection_string, max_unfinished_jobs=2, submissions_per_minute=100)
    client = app.test_client()
    accepted = [submit(client) for _ in range(2)]
    assert [r.status_code for r in accepted] == [202, 202]
    prefix = web_settings.name_prefix
    queue = QueueAccessor(web_storage, settings=web_settings, prefix=prefix).image_request
    inputs_before = _stored_inputs(web_storage, prefix)
    depth_before = queue.approximate_depth()

    refused = submit(client)

    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.get_json()["error"] == "quota_exceeded"
    assert "unfinished" in refused.get_json()["detail"]
    assert _stored_inputs(web_storage, prefix) == inputs_before
    assert queue.approximate_depth() == depth_before
    assert len(client.get("/api/jobs").get_json()["jobs"]) == 2

    # Another client is not affected by this one's quota.
    assert submit(app.test_client()).status_code == 202

    # A job that finishes frees its slot (the counter heals by recounting the jobs table).
    jobs = JobStore(web_storage, prefix=prefix)
    request_id = accepted[0].get_json()["request_id"]
    client_id = _client_of(jobs, client, request_id)
    jobs.update(client_id, request_id, lambda job: replace(job, status=JobStatus.DONE))
    assert submit(client).status_code == 202
    assert submit(client).status_code == 429


def _client_of(jobs: JobStore, client: ApiClient, request_id: str) -> str:
    """The client id behind the test client's cookie, read from its signed session."""
    with client.session_transaction() as session:
        found: str = session["cid"]
    assert jobs.get(found, request_id) is not None
    return found


def test_the_rate_limit_answers_429_until_the_minute_is_over(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    app = _app(web_settings, azurite_connection_string, max_unfinished_jobs=100, submissions_per_minute=3)
    client = app.test_client()
    assert [submit(client).status_code for _ in range(3)] == [202, 202, 202]
    refused = submit(client)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "per minute" in refused.get_json()["detail"]


def test_the_rate_window_moves_on_and_a_lost_etag_race_is_retried(
    web_settings: Settings, web_storage: StorageClients
) -> None:
    store = QuotaStore(web_storage, max_unfinished=100, per_minute=2, prefix=web_settings.name_prefix)
    store.ensure_table()
    client_id = "quota-window-client-0001"
    minute = 1_000_000 * 60.0
    store.admit(client_id, now=minute)
    store.admit(client_id, now=minute + 1)
    with pytest.raises(QuotaExceeded) as refused:
        store.admit(client_id, now=minute + 50)
    assert refused.value.retry_after == 10
    store.admit(client_id, now=minute + 60)  # next minute: a fresh window

    # Two stores (two web processes) racing for the last slots never both win one.
    other = QuotaStore(web_storage, max_unfinished=100, per_minute=2, prefix=web_settings.name_prefix)
    from concurrent.futures import ThreadPoolExecutor

    def attempt(store_: QuotaStore) -> bool:
        try:
            store_.admit(client_id, now=minute + 61)
            return True
        except QuotaExceeded:
            return False

    with ThreadPoolExecutor(4) as pool:
        wins = list(pool.map(attempt, [store, other, store, other]))
    assert sum(wins) == 1  # one slot was left in this minute
