"""Per-client quotas on POST /api/jobs, against the session's Azurite (dal.admission.quotas).

The app here has small limits (2 unfinished jobs, 3 submissions a minute); the shared web
fixture raises them on purpose, since its tests never finish their jobs. The bucket per network
address (dal.admission.address_quotas) is tested with its defaults, from addresses of the documentation
ranges (each test its own), through the trusted-proxy rule of webapp.ingress.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import replace
from typing import Any

import pytest
from flask import Flask

from dal.admission.quotas import QuotaStore
from dal.config import IMAGE_INPUT_CONTAINER, Settings, StorageClients
from dal.errors import QuotaExceeded
from dal.jobs.model import JobStatus
from dal.jobs.store import JobStore
from dal.queues.accessor import QueueAccessor
from tests.web.conftest import LIBRARY, SECRET, ApiClient, png_bytes, submit
from webapp import create_app
from webapp.decode_budget import DECODES


def _app(settings: Settings, connection_string: str, **limits: int) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": replace(settings, **limits),
            "CONNECTION_STRING": connection_string,
        }
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


def _post_from(client: Any, address: str, **headers: str) -> Any:
    form = {"library": LIBRARY, "tile_size": "8", "slices": "1", "image": (io.BytesIO(png_bytes()), "p.png")}
    return client.post(
        "/api/jobs",
        data=form,
        content_type="multipart/form-data",
        headers=headers,
        environ_base={"REMOTE_ADDR": address},
    )


def test_cookieless_submissions_from_one_address_stop_at_the_address_quota(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    """Every cookieless request is a new client, so only the address's bucket can stop them."""
    defaults = Settings()
    app = _app(
        web_settings,
        azurite_connection_string,
        address_burst=defaults.address_burst,
        address_submissions_per_hour=defaults.address_submissions_per_hour,
    )
    address = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    answers = [_post_from(app.test_client(use_cookies=False), address) for _ in range(30)]

    accepted = [r for r in answers if r.status_code == 202]
    refused = [r for r in answers if r.status_code == 429]
    assert len(accepted) + len(refused) == 30, sorted({r.status_code for r in answers})
    assert 1 <= len(accepted) <= defaults.address_burst <= 10
    assert all(
        r.get_json()["error"] == "quota_exceeded" and "network address" in r.get_json()["detail"] for r in refused
    )
    assert all(1 <= int(r.headers["Retry-After"]) <= 3600 // defaults.address_submissions_per_hour + 1 for r in refused)
    # Another address has its own bucket; the same /64 of IPv6 shares one.
    other = f"198.51.100.{(uuid.uuid4().int % 250) + 1}"
    if other != address:
        assert _post_from(app.test_client(use_cookies=False), other).status_code == 202


def test_ipv6_addresses_share_their_64_and_ipv4_mapped_count_as_ipv4() -> None:
    from dal.admission.address_quotas import network_key

    assert network_key("2001:db8:1:2:aaaa::1") == network_key("2001:db8:1:2:ffff:ffff:ffff:ffff")
    assert network_key("2001:db8:1:2::1") != network_key("2001:db8:1:3::1")
    assert network_key("::ffff:203.0.113.9") == network_key("203.0.113.9") == "net4-203.0.113.9"
    assert network_key("203.0.113.9") != network_key("203.0.113.10")
    assert network_key("not an address") == network_key("") == "net-unknown"


def test_the_address_bucket_refills_and_a_refusal_takes_nothing(web_storage: StorageClients, web_prefix: str) -> None:
    from dal.admission.address_quotas import AddressBuckets

    QuotaStore(web_storage, max_unfinished=1, per_minute=1, prefix=web_prefix).ensure_table()
    buckets = AddressBuckets(web_storage, burst=2, per_hour=60, prefix=web_prefix)  # one token a minute
    address, now = f"203.0.113.{uuid.uuid4().int % 250 + 1}", 1_000_000.0
    buckets.admit(address, now=now)
    buckets.admit(address, now=now)
    with pytest.raises(QuotaExceeded) as refused:
        buckets.admit(address, now=now + 30)
    assert refused.value.retry_after == 30
    with pytest.raises(QuotaExceeded):
        buckets.admit(address, now=now + 59)  # the refusals took nothing: 59 s of refill is still < 1
    buckets.admit(address, now=now + 61)


def test_forwarded_for_counts_only_through_trusted_proxies(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    """Without trusted proxies a client cannot dodge its bucket with X-Forwarded-For; with one,
    the proxy's last entry is the client (entries further left are the client's own words)."""
    untrusted = _app(web_settings, azurite_connection_string, address_burst=1, address_submissions_per_hour=1)
    proxy = f"192.0.2.{uuid.uuid4().int % 250 + 1}"
    first = _post_from(untrusted.test_client(use_cookies=False), proxy, **{"X-Forwarded-For": "203.0.113.1"})
    spoofed = _post_from(untrusted.test_client(use_cookies=False), proxy, **{"X-Forwarded-For": "203.0.113.2"})
    assert (first.status_code, spoofed.status_code) == (202, 429)

    behind = _app(
        web_settings, azurite_connection_string, address_burst=1, address_submissions_per_hour=1, trusted_proxies=1
    )
    base = uuid.uuid4().int % 200 + 1
    clients = [f"10.{base}.0.1", f"10.{base}.0.2"]
    answers = [
        _post_from(behind.test_client(use_cookies=False), proxy, **{"X-Forwarded-For": f"6.6.6.6, {c}"})
        for c in (*clients, clients[0])
    ]
    assert [r.status_code for r in answers] == [202, 202, 429]


def test_a_client_over_its_quota_gets_429_before_its_photo_is_decoded(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    """Identity and quotas come first: an over-quota client spends none of the decoding budget
    the other clients share, and its photo is not even opened (a hostile one is 429, not 400)."""
    from tests.support.hostile_images import padded_jpeg
    from webapp.decode_budget import DECODES

    app = _app(web_settings, azurite_connection_string, max_unfinished_jobs=1, submissions_per_minute=100)
    client = app.test_client()
    assert submit(client).status_code == 202
    granted = DECODES.granted
    refused = submit(client, image=png_bytes(200, 150))
    hostile = submit(client, image=padded_jpeg(1024 * 1024), filename="padded.jpg")
    assert (refused.status_code, hostile.status_code) == (429, 429), (refused.get_json(), hostile.get_json())
    assert DECODES.granted == granted  # no decode was reserved, let alone made


def test_a_submission_refused_after_its_quotas_were_counted_gives_them_back(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    app = _app(
        web_settings,
        azurite_connection_string,
        max_unfinished_jobs=1,
        submissions_per_minute=100,
        address_burst=1,
        address_submissions_per_hour=1,
    )
    client = app.test_client()
    address = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    broken = client.post(
        "/api/jobs",
        data={"library": LIBRARY, "tile_size": "8", "slices": "1", "image": (io.BytesIO(b"not an image"), "p.png")},
        content_type="multipart/form-data",
        environ_base={"REMOTE_ADDR": address},
    )
    missing = client.post(
        "/api/jobs",
        data={
            "library": "no-such-library",
            "tile_size": "8",
            "slices": "1",
            "image": (io.BytesIO(png_bytes()), "p.png"),
        },
        content_type="multipart/form-data",
        environ_base={"REMOTE_ADDR": address},
    )
    assert (broken.status_code, missing.status_code) == (415, 404), (broken.get_json(), missing.get_json())
    assert _post_from(client, address).status_code == 202  # the client's one slot and the address's one token


def _create_library(client: Any, address: str, name: str) -> Any:
    return client.post(
        "/api/libraries",
        data={"name": name, "files": [(io.BytesIO(png_bytes(64, 64)), "one.png")]},
        environ_base={"REMOTE_ADDR": address},
    )


def test_library_creation_has_quotas_per_address_and_per_client(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    """40 cookieless creations from one address: at most the address's burst (10) are accepted;
    one client moving between addresses is held by its own bucket (5)."""
    defaults = Settings()
    library_defaults = {
        "library_address_burst": defaults.library_address_burst,
        "library_client_burst": defaults.library_client_burst,
        "libraries_per_hour": defaults.libraries_per_hour,
    }
    app = _app(web_settings, azurite_connection_string, **library_defaults)
    tag = uuid.uuid4().hex[:8]
    address = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    granted = DECODES.granted
    answers = [_create_library(app.test_client(use_cookies=False), address, f"lq-{tag}-{i}") for i in range(40)]
    accepted = [r for r in answers if r.status_code == 201]
    refused = [r for r in answers if r.status_code == 429]
    assert len(accepted) + len(refused) == 40, sorted({r.status_code for r in answers})
    assert 1 <= len(accepted) <= defaults.library_address_burst <= 10
    assert all("libraries" in r.get_json()["detail"] and int(r.headers["Retry-After"]) >= 1 for r in refused)
    assert DECODES.granted - granted == len(accepted)  # a refused creation decoded nothing

    client = app.test_client()
    roaming = [
        _create_library(client, f"203.0.113.{(uuid.uuid4().int + i) % 250 + 1}", f"lc-{tag}-{i}") for i in range(8)
    ]
    codes = [r.status_code for r in roaming]
    assert codes.count(201) <= defaults.library_client_burst and codes.count(429) >= 8 - defaults.library_client_burst
    assert "one client" in roaming[-1].get_json()["detail"]


def test_a_library_name_taken_gives_the_creation_tokens_back(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    app = _app(
        web_settings, azurite_connection_string, library_address_burst=1, library_client_burst=1, libraries_per_hour=1
    )
    client, address = app.test_client(), f"192.0.2.{uuid.uuid4().int % 250 + 1}"
    assert _create_library(client, address, LIBRARY).status_code in (404, 409)  # taken (shared or not): refused
    assert _create_library(client, address, f"lt-{uuid.uuid4().hex[:8]}").status_code == 201


def test_a_cancelled_job_frees_its_unfinished_slot_at_once(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    app = _app(web_settings, azurite_connection_string, max_unfinished_jobs=1, submissions_per_minute=100)
    client = app.test_client()
    first = submit(client)
    assert first.status_code == 202
    assert submit(client).status_code == 429
    assert client.post(f"/api/jobs/{first.get_json()['request_id']}/cancel").status_code == 200
    assert submit(client).status_code == 202
