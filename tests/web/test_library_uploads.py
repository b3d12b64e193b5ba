"""Direct uploads into a library (the valet key): write-only SAS URLs, skips, refusals, quotas, CORS."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobClient, ContainerClient
from flask import Flask

from dal.blobs.cors import set_upload_cors
from dal.blobs.staging import safe_photo_name
from dal.config import Settings, StorageClients
from tests.web.conftest import SECRET, ApiClient, png_bytes
from webapp import create_app


def _name() -> str:
    return f"up-{uuid.uuid4().hex[:10]}"


def _ask(client: Any, library: str, files: list[dict[str, Any]], **extra: Any) -> Any:
    return client.post(f"/api/libraries/{library}/uploads", json={"files": files, **extra})


def test_a_grant_creates_the_library_and_its_urls_write_one_staged_blob_only(client: Any, other_client: Any) -> None:
    library = _name()
    photo = png_bytes(80, 60)
    answer = _ask(client, library, [{"name": "Holiday/IMG 0001.PNG", "size": len(photo)}], description="Trip")
    assert answer.status_code == 201, answer.get_json()
    body = answer.get_json()
    assert body["created"] is True and body["refused"] == [] and body["expires_at"].endswith("Z")
    (grant,) = body["uploads"]
    assert grant["blob"] == "staging/" + safe_photo_name("Holiday/IMG 0001.PNG") and grant["uploaded"] is False
    assert "sp=cw" in grant["url"] and "sig=" in grant["url"]

    blob = BlobClient.from_blob_url(grant["url"])
    blob.upload_blob(photo)  # the client writes straight to storage
    with pytest.raises(HttpResponseError) as read:
        blob.download_blob().readall()  # write-only: no read
    assert read.value.status_code == 403
    with pytest.raises(HttpResponseError):
        blob.delete_blob()  # no delete
    container_url = grant["url"].split("/staging/", 1)[0] + "?" + grant["url"].split("?", 1)[1]
    with pytest.raises(HttpResponseError):
        list(ContainerClient.from_container_url(container_url).list_blobs())  # no list
    other = grant["url"].replace(grant["blob"], "staging/other.png")
    with pytest.raises(HttpResponseError) as elsewhere:
        BlobClient.from_blob_url(other).upload_blob(photo)  # the SAS names one blob
    assert elsewhere.value.status_code == 403

    again = _ask(client, library, [{"name": "Holiday/IMG 0001.PNG", "size": len(photo)}, {"name": "b.jpg", "size": 9}])
    assert again.status_code == 200 and again.get_json()["created"] is False
    assert [g["uploaded"] for g in again.get_json()["uploads"]] == [True, False]  # the client skips the first

    listed = client.get(f"/api/libraries/{library}").get_json()
    assert listed["owned"] is True and listed["tile_count"] == 0 and listed["uploads"] is True  # "Add photos"
    assert _ask(other_client, library, [{"name": "x.jpg", "size": 5}]).status_code == 404  # not yours


def test_bad_files_are_refused_one_by_one_and_bad_requests_whole(client: Any, tile_library: str) -> None:
    library = _name()
    answer = _ask(
        client,
        library,
        [
            {"name": "empty.jpg", "size": 0},
            {"name": "huge.jpg", "size": 60 * 2**20},
            {"name": "a.jpg", "size": 10},
            {"name": "a.jpg", "size": 10},
        ],
    )
    assert answer.status_code == 201
    reasons = {r["name"]: r["reason"] for r in answer.get_json()["refused"]}
    assert "zero bytes" in reasons["empty.jpg"] and "50 MiB" in reasons["huge.jpg"] and "twice" in reasons["a.jpg"]
    assert [g["name"] for g in answer.get_json()["uploads"]] == ["a.jpg"]
    too_many = [{"name": f"p{i}.jpg", "size": 1} for i in range(501)]
    assert _ask(client, library, too_many).get_json()["error"] == "invalid_field"
    assert _ask(client, library, [{"name": "a.jpg", "size": "10"}]).status_code == 400
    assert client.post(f"/api/libraries/{library}/uploads", data="nope").status_code == 400
    assert _ask(client, "Bad_Name", [{"name": "a.jpg", "size": 1}]).status_code == 400
    taken = _ask(client, tile_library, [{"name": "a.jpg", "size": 1}])  # shared, not ours, not uploadable
    assert taken.status_code == 403
    assert client.get(f"/api/libraries/{tile_library}").get_json()["uploads"] is False


def test_declared_bytes_have_an_hourly_quota_per_client(web_settings: Settings, azurite_connection_string: str) -> None:
    app: Flask = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": replace(web_settings, upload_bytes_per_hour=1000),
            "CONNECTION_STRING": azurite_connection_string,
        }
    )
    app.test_client_class = ApiClient
    client = app.test_client()
    library = _name()
    assert _ask(client, library, [{"name": "a.jpg", "size": 600}]).status_code == 201
    refused = _ask(client, library, [{"name": "b.jpg", "size": 600}])
    assert refused.status_code == 429 and refused.get_json()["error"] == "quota_exceeded"
    assert "bytes of uploads" in refused.get_json()["detail"] and int(refused.headers["Retry-After"]) >= 1
    assert _ask(app.test_client(), _name(), [{"name": "c.jpg", "size": 600}]).status_code == 201  # another client


def test_the_cors_rule_lets_exactly_one_origin_preflight_a_put(web_storage: StorageClients) -> None:
    """The account-wide rule is this test's for its duration only: the browser tests on the same
    Azurite (``live_app``) need their own origin's rule back afterwards."""
    saved = web_storage.blob_service.get_service_properties()["cors"]
    try:
        origin = "http://127.0.0.1:8765"
        set_upload_cors(web_storage, origin)
        url = web_storage.blob_service.url.rstrip("/") + "/anycontainer/staging/a.jpg"
        headers = {
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "x-ms-blob-type,x-ms-version",
        }
        allowed = requests.options(url, headers={"Origin": origin, **headers}, timeout=10)
        assert allowed.status_code == 200 and allowed.headers.get("Access-Control-Allow-Origin") == origin
        other = requests.options(url, headers={"Origin": "http://evil.example", **headers}, timeout=10)
        assert other.status_code == 403 and "Access-Control-Allow-Origin" not in other.headers
        delete = requests.options(
            url, headers={"Origin": origin, "Access-Control-Request-Method": "DELETE"}, timeout=10
        )
        assert delete.status_code == 403
        with pytest.raises(ValueError):
            set_upload_cors(web_storage, "*")

    finally:
        web_storage.blob_service.set_service_properties(cors=saved)
