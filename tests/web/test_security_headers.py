"""Browser security headers and caching on pages, the API, errors, results and tiles (real Azurite)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.web.conftest import LIBRARY, submit
from tests.web.test_api_jobs import client_id_of, finish, stores  # noqa: F401 (fixture)
from webapp.security import CONTENT_SECURITY_POLICY, blob_origin


def assert_secure(response: Any) -> None:
    headers = response.headers
    # The one difference from the base policy: the page may PUT photos to the storage account.
    policy = re.sub(
        r"connect-src 'self' http://127\.0\.0\.1:\d+;", "connect-src 'self';", headers["Content-Security-Policy"]
    )
    assert policy == CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY and "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"


@pytest.mark.parametrize("path", ["/", "/jobs", "/libraries", "/queues"])
def test_pages_are_contained_and_revalidated(client: FlaskClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200 and response.mimetype == "text/html"
    assert_secure(response)
    assert response.headers["Cache-Control"] == "no-cache"
    assert "<script>" not in response.text and " style=" not in response.text  # nothing inline


def test_api_answers_and_errors_are_never_stored_by_caches(client: FlaskClient) -> None:
    for response in [client.get("/api/jobs"), client.get("/api/jobs/not-a-job"), client.get("/healthz")]:
        assert_secure(response)
        assert response.headers["Cache-Control"] == "no-store"
        assert response.mimetype == "application/json"


def test_405_names_the_allowed_methods_and_options_answers(client: FlaskClient) -> None:
    response = client.open("/api/jobs", method="TRACE")
    assert response.status_code == 405
    assert response.get_json()["error"] == "method_not_allowed"
    assert set(response.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "POST"}
    assert_secure(response)
    options = client.options("/api/libraries")
    assert options.status_code == 200
    assert set(options.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "POST"}


def test_results_previews_and_tiles_have_exact_types_and_dispositions(
    client: FlaskClient,
    stores: dict[str, Any],
) -> None:
    request_id = submit(client).get_json()["request_id"]
    owner = client_id_of(client, stores, request_id)
    finish(stores, owner, request_id)

    inline = client.get(f"/api/jobs/{request_id}/result")
    assert inline.status_code == 200 and inline.mimetype == "image/jpeg"
    assert inline.headers["Content-Disposition"] == f'inline; filename="mosaic-{request_id[:8]}.jpg"'
    assert inline.headers["Cache-Control"] == "private, max-age=86400"
    assert_secure(inline)
    download = client.get(f"/api/jobs/{request_id}/result?download=1")
    assert download.headers["Content-Disposition"] == f'attachment; filename="mosaic-{request_id[:8]}.jpg"'

    preview = client.get(f"/api/jobs/{request_id}/preview")
    assert preview.mimetype == "image/jpeg" and preview.headers["Content-Disposition"].startswith("inline;")
    assert preview.headers["Cache-Control"].startswith("private")
    assert_secure(preview)

    tile = client.get(f"/api/libraries/{LIBRARY}").get_json()["samples"][0]
    tile_response = client.get(tile)
    assert tile_response.status_code == 200 and tile_response.mimetype == "image/jpeg"
    assert tile_response.headers["Content-Disposition"] == f'inline; filename="{tile.rsplit("/", 1)[-1]}"'
    assert tile_response.headers["Cache-Control"] == "public, max-age=86400"
    assert_secure(tile_response)


def test_the_page_may_connect_to_the_storage_blob_endpoint_only(
    client: FlaskClient, azurite_connection_string: str
) -> None:
    """The libraries page uploads photos straight to Blob Storage (valet key): connect-src names
    this app's Blob endpoint, and nothing else beyond the app itself."""
    origin = blob_origin(azurite_connection_string)
    assert origin is not None and origin.startswith("http://127.0.0.1:")
    policy = client.get("/libraries").headers["Content-Security-Policy"]
    assert f"connect-src 'self' {origin};" in policy
    assert blob_origin(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net"
    ) == ("https://acct.blob.core.windows.net")
    assert blob_origin("") is None and blob_origin("not a connection string") is None
