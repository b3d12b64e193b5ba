"""Direct uploads into a library (the valet key): write-only SAS URLs, skips, refusals, quotas, CORS."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import replace
from typing import Any

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobClient, ContainerClient
from flask import Flask

from dal.blobs.cors import local_origins, parse_origins, set_upload_cors
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
            {"name": os.fsdecode(b"bad\xffname.jpg"), "size": 10},  # a name that is not UTF-8 on disk
        ],
    )
    assert answer.status_code == 201
    reasons = {r["name"]: r["reason"] for r in answer.get_json()["refused"]}
    assert "zero bytes" in reasons["empty.jpg"] and "50 MiB" in reasons["huge.jpg"] and "twice" in reasons["a.jpg"]
    assert "not valid UTF-8: rename the file" in reasons[os.fsdecode(b"bad\xffname.jpg")]
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


def test_the_cors_rule_lets_exactly_the_app_origins_preflight_a_put(web_storage: StorageClients) -> None:
    """``photomosaics run``'s rule: the app typed as 127.0.0.1 or as localhost, and nothing else.
    The account-wide rule is this test's for its duration only: the browser tests on the same
    Azurite (``live_app``) need their own origins' rule back afterwards."""
    saved = web_storage.blob_service.get_service_properties()["cors"]
    try:
        origins = local_origins("0.0.0.0", 8765)
        assert origins == ["http://127.0.0.1:8765", "http://localhost:8765"]
        set_upload_cors(web_storage, origins)
        url = web_storage.blob_service.url.rstrip("/") + "/anycontainer/staging/a.jpg"
        headers = {
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "x-ms-blob-type,x-ms-version",
        }
        for origin in origins:
            allowed = requests.options(url, headers={"Origin": origin, **headers}, timeout=10)
            assert allowed.status_code == 200 and allowed.headers.get("Access-Control-Allow-Origin") == origin
        for origin in ("http://evil.example", "http://localhost:8766", "https://localhost:8765"):
            other = requests.options(url, headers={"Origin": origin, **headers}, timeout=10)
            assert other.status_code == 403 and "Access-Control-Allow-Origin" not in other.headers, origin
        delete = requests.options(
            url, headers={"Origin": origins[0], "Access-Control-Request-Method": "DELETE"}, timeout=10
        )
        assert delete.status_code == 403
        with pytest.raises(ValueError):
            set_upload_cors(web_storage, "*")
    finally:
        web_storage.blob_service.set_service_properties(cors=saved)


def test_the_origins_a_person_may_type_and_the_setting_that_names_them() -> None:
    assert local_origins("127.0.0.1", 8080) == ["http://127.0.0.1:8080", "http://localhost:8080"]
    assert local_origins("mosaics.lan", 80)[-1] == "http://mosaics.lan:80"
    assert local_origins("::1", 8080)[-1] == "http://[::1]:8080"
    assert parse_origins(" http://localhost:8080,http://127.0.0.1:8080  https://m.example ") == [
        "http://localhost:8080",
        "http://127.0.0.1:8080",
        "https://m.example",
    ]
    for bad in ("*", "localhost:8080", "http://localhost:8080/libraries", ""):
        with pytest.raises(ValueError):
            parse_origins(bad)


def test_upload_urls_name_the_public_blob_endpoint_and_work_there(
    web_settings: Settings, azurite_connection_string: str, web_storage: StorageClients
) -> None:
    """docker compose: the roles reach Azurite as ``azurite:10000``, a browser as the host's
    published port. Here the roles use 127.0.0.1 and the browser's name is ``localhost``: the
    granted URL names it, the page may connect there (CSP), and a PUT to it stores the photo."""
    inside = web_storage.blob_service.url.rstrip("/")
    public = inside.replace("://127.0.0.1:", "://localhost:")
    assert public != inside
    app: Flask = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": replace(web_settings, public_blob_endpoint=public + "/"),
            "CONNECTION_STRING": azurite_connection_string,
        }
    )
    app.test_client_class = ApiClient
    client = app.test_client()
    library, photo = _name(), png_bytes(40, 30)
    answer = _ask(client, library, [{"name": "a.png", "size": len(photo)}])
    assert answer.status_code == 201, answer.get_json()
    (grant,) = answer.get_json()["uploads"]
    assert grant["url"].startswith(public + "/") and "sig=" in grant["url"]
    BlobClient.from_blob_url(grant["url"]).upload_blob(photo)  # the same signature, at the public host
    assert client.get(f"/api/libraries/{library}/photos").get_json()["progress"]["uploaded"] == 1
    policy = client.get("/libraries").headers["Content-Security-Policy"]
    connect = next(d for d in policy.split("; ") if d.startswith("connect-src"))
    assert public.rsplit("/", 1)[0] in connect.split() and inside.rsplit("/", 1)[0] in connect.split()


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("localhost:10000/devstoreaccount1", "http(s)://host"),
        ("http://localhost:10000/otheraccount", "names another account"),
        ("http://localhost:10000", "path-style: name the account"),
        ("http://localhost:10000/devstoreaccount1?sv=1", "http(s)://host"),
    ],
)
def test_a_wrong_public_blob_endpoint_is_a_configuration_error(
    web_storage: StorageClients, endpoint: str, why: str
) -> None:
    from dal.blobs.libraries import LibraryStore
    from dal.blobs.staging import LibraryStaging
    from dal.errors import StorageConfigurationError

    with pytest.raises(StorageConfigurationError, match=re.escape(why)):
        LibraryStaging(LibraryStore(web_storage), public_endpoint=endpoint)


def test_the_web_app_sets_the_upload_origins_at_start_and_refuses_bad_settings(
    azurite_connection_string: str, web_storage: StorageClients, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``photomosaics web`` (docker compose): ``PHOTOMOSAICS_UPLOAD_ORIGINS`` becomes the account's
    CORS rule at start-up; a public endpoint of another account, or a bad origin, stops the start
    with the reason. The rule is given back afterwards (the browser tests share this Azurite)."""
    import secrets

    from click.testing import CliRunner

    from dal.config import CONNECTION_STRING_ENV
    from photomosaics.cli import main
    from photomosaics.commands.web import _prepare_uploads

    saved = web_storage.blob_service.get_service_properties()["cors"]
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_SECRET_KEY", secrets.token_urlsafe(32))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # the command would make one for this process
    try:
        monkeypatch.setenv("PHOTOMOSAICS_UPLOAD_ORIGINS", "http://localhost:8080 http://127.0.0.1:8080")
        _prepare_uploads(azurite_connection_string)
        (rule,) = web_storage.blob_service.get_service_properties()["cors"]
        assert rule.allowed_origins == "http://localhost:8080,http://127.0.0.1:8080"
        for variable, value, why in (
            ("PHOTOMOSAICS_UPLOAD_ORIGINS", "http://localhost:8080/libraries", "without a path"),
            ("PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT", "http://127.0.0.1:10000/otheraccount", "names another account"),
        ):
            monkeypatch.setenv(variable, value)
            result = CliRunner().invoke(main, ["web", "--port", "0"])
            assert result.exit_code == 1 and why in result.output, result.output
            monkeypatch.delenv(variable)
    finally:
        web_storage.blob_service.set_service_properties(cors=saved)
