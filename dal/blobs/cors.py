"""The Blob service's CORS rule that lets a browser upload photos straight to storage.

A page served by the web app (its origin, say ``https://mosaics.example``) PUTs photos to
``https://<account>.blob.core.windows.net/...`` with the SAS URLs the app grants
(``dal.blobs.staging``). That is a cross-origin request with custom headers, so the browser
first sends a preflight (OPTIONS) and the Blob service must answer it from its CORS rules.
``set_upload_cors`` sets exactly one rule: the app's origins (one site may be typed two ways,
``http://127.0.0.1:8080`` and ``http://localhost:8080``), the methods PUT and OPTIONS, and the
request headers a block-blob upload sends; every other rule of the account is replaced. The
SAS, not CORS, is what protects the data: CORS only lets a browser on those origins use it.
On Azure, an operator sets the same rule with ``az storage cors add`` (docs/operations.md), or
the web app at start-up with ``PHOTOMOSAICS_UPLOAD_ORIGINS`` (``parse_origins``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from azure.storage.blob import CorsRule

from dal.config import StorageClients

__all__ = ["UPLOAD_HEADERS", "local_origins", "parse_origins", "set_upload_cors", "upload_cors_rule"]

# What a browser's block-blob upload sends: the blob type on Put Blob, the API version, the
# content type of the request and of the blob, and the content MD5 the SDKs may add.
UPLOAD_HEADERS = (
    "content-type",
    "content-length",
    "content-md5",
    "x-ms-blob-type",
    "x-ms-blob-content-type",
    "x-ms-blob-content-md5",
    "x-ms-client-request-id",
    "x-ms-content-crc64",
    "x-ms-date",
    "x-ms-version",
)
EXPOSED_HEADERS = ("etag", "x-ms-request-id", "x-ms-version", "x-ms-content-crc64", "content-md5")
MAX_AGE_SECONDS = 3600


def upload_cors_rule(origins: str | Sequence[str]) -> CorsRule:
    """The rule for ``origins``, each scheme, host and port, no path: ``http://127.0.0.1:8000``."""
    wanted = [origins] if isinstance(origins, str) else list(origins)
    if not wanted:
        raise ValueError("a CORS rule needs at least one origin")
    for origin in wanted:
        if not origin or "*" in origin or origin.count("/") != 2 or not origin.startswith(("http://", "https://")):
            raise ValueError(f"a CORS origin is scheme://host[:port] without a path or wildcard, got {origin!r}")
    return CorsRule(
        allowed_origins=list(dict.fromkeys(o.rstrip("/") for o in wanted)),
        allowed_methods=["PUT", "OPTIONS"],
        allowed_headers=list(UPLOAD_HEADERS),
        exposed_headers=list(EXPOSED_HEADERS),
        max_age_in_seconds=MAX_AGE_SECONDS,
    )


def set_upload_cors(storage: StorageClients, origins: str | Sequence[str]) -> None:
    """Make the account's Blob service allow uploads from ``origins`` and nothing else (one
    Set Blob Service Properties; other service properties are left as they are)."""
    storage.blob_service.set_service_properties(cors=[upload_cors_rule(origins)])


def parse_origins(text: str) -> list[str]:
    """The origins of a setting: separated by spaces or commas; ValueError for a bad one."""
    origins = [o for o in re.split(r"[\s,]+", text.strip()) if o]
    upload_cors_rule(origins)  # the same checks
    return origins


def local_origins(host: str, port: int) -> list[str]:
    """The origins a person may type for an app served on ``host``:``port`` (``photomosaics run``):
    ``127.0.0.1`` and ``localhost``, which both reach a loopback server, and the host itself when
    it is another name."""
    hosts = ["127.0.0.1", "localhost"]
    if host not in ("", "0.0.0.0", "::", *hosts):
        hosts.append(f"[{host}]" if ":" in host else host)
    return [f"http://{name}:{port}" for name in hosts]
