"""Client isolation: a client sees, downloads and deletes only its own jobs; the cookie that
carries the client id is signed, HttpOnly and SameSite; no key ever leaves the app."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from dal.blobs.store import BlobStore
from dal.config import IMAGE_OUTPUT_CONTAINER, StorageClients
from dal.connection_strings import DEVSTORE_KEY
from dal.jobs.store import JobStore
from tests.web.conftest import png_bytes, submit


def finished_job(client: Any, web_storage: StorageClients, prefix: str) -> str:
    request_id = submit(client, slices="1").json["request_id"]
    jobs = JobStore(web_storage, prefix=prefix)
    owner = next(j.client_id for j in _all_jobs(jobs) if j.request_id == request_id)
    BlobStore(web_storage, prefix=prefix).upload(
        IMAGE_OUTPUT_CONTAINER, f"{request_id}.jpg", png_bytes(fmt="JPEG"), content_type="image/jpeg"
    )
    jobs.update(
        owner,
        request_id,
        lambda j: replace(j, status="done", slices_done=frozenset({0}), output_name=f"{request_id}.jpg"),
    )
    return request_id


def _all_jobs(jobs: JobStore) -> list[Any]:
    table = jobs.storage.table_service.get_table_client(jobs.jobs_table)
    return [jobs.get(e["PartitionKey"], e["RowKey"]) for e in table.list_entities() if not e["RowKey"].startswith("~")]


def test_another_client_cannot_list_read_download_or_delete(
    client: Any, other_client: Any, web_storage: StorageClients, web_settings: Any
) -> None:
    request_id = finished_job(client, web_storage, web_settings.name_prefix)
    base = f"/api/jobs/{request_id}"
    assert client.get(f"{base}/result").status_code == 200

    assert other_client.get("/api/jobs").json == {"jobs": [], "continuation": None}
    for path in ["", "/events", "/result", "/result?download=1", "/slices/0", "/preview"]:
        response = other_client.get(f"{base}{path}")
        assert response.status_code == 404, path
        assert response.json["error"] == "job_not_found"
    assert other_client.delete(base).status_code == 404

    assert client.get(base).json["status"] == "done"  # untouched
    assert [j["request_id"] for j in client.get("/api/jobs").json["jobs"]] == [request_id]


def test_cookie_is_signed_httponly_and_samesite(client: Any, other_client: Any) -> None:
    response = client.get("/api/jobs")
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("pm_client=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    request_id = submit(client, slices="1").json["request_id"]

    # A forged cookie (a valid-looking value, wrong signature) is a new client, not the owner.
    value = cookie.split(";", 1)[0].split("=", 1)[1]
    forged = value[:-4] + ("AAAA" if not value.endswith("AAAA") else "BBBB")
    other_client.set_cookie("pm_client", forged)
    assert other_client.get(f"/api/jobs/{request_id}").status_code == 404
    assert other_client.get("/api/jobs").json["jobs"] == []


def test_no_key_in_any_response_or_log_line(
    client: Any,
    web_storage: StorageClients,
    web_settings: Any,
    caplog: pytest.LogCaptureFixture,
    operator: dict[str, str],
) -> None:
    caplog.set_level(logging.DEBUG)
    key = web_storage.account_key or DEVSTORE_KEY
    bodies: list[str] = []
    request_id = finished_job(client, web_storage, web_settings.name_prefix)
    for path in [
        "/api/jobs",
        f"/api/jobs/{request_id}",
        f"/api/jobs/{request_id}/events",
        "/api/libraries",
        "/api/queues",
        "/healthz",
        "/api/plan?width=100&height=80&tile_size=8",
        "/",
        "/queues",
    ]:
        response = client.get(path, headers=operator)  # operators read /api/queues
        assert response.status_code == 200, path
        bodies.append(response.get_data(as_text=True) + str(response.headers))
    bodies.append(submit(client, image=b"junk").get_data(as_text=True))
    bodies.append(client.delete(f"/api/jobs/{request_id}").get_data(as_text=True))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged  # the SDK and the app did log at DEBUG: the check below looked at something
    for text in [*bodies, logged]:
        assert key not in text
        assert "AccountKey" not in text


def test_storage_outage_is_503_without_the_key(web_settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    from dataclasses import replace as replace_settings

    from dal.connection_strings import azurite_connection_string
    from tests.web.conftest import SECRET, ApiClient
    from webapp import create_app

    dead = azurite_connection_string("127.0.0.1", 9, 9, 9)  # the discard port: nothing listens
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "STORAGE_PROFILE": "probe",
            "SETTINGS": replace_settings(web_settings, connection_string=dead),
        }
    )
    app.test_client_class = ApiClient
    client = app.test_client()
    for response in [client.get("/api/jobs"), submit(client, slices="1")]:
        assert response.status_code == 503
        assert response.json == {
            "error": "storage_unavailable",
            "detail": "the storage service did not answer; try again shortly",
        }
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "storage request failed" in logged
    assert DEVSTORE_KEY not in logged and "AccountKey" not in logged
