"""Browser security headers on every response, and the right caching for each kind of answer.

A mosaic service serves files its users uploaded, so the browser must be told to contain
them: a strict ``Content-Security-Policy`` that the UI satisfies as shipped (scripts and
styles only from our own ``/static`` and ``/vendor`` files, never inline, except the one
fixed style element OpenSeadragon injects, allowed by its hash; images from this origin, plus
``blob:`` for the local preview of a photo before it is uploaded; ``connect-src 'self'``
for fetch and Server-Sent Events, plus the storage account's Blob endpoint, where the libraries
page writes photos with the SAS URLs the app grants: ``dal.blobs.staging``),
``X-Content-Type-Options: nosniff`` (a JPEG is never run as a script or page),
``frame-ancestors 'none'`` with ``X-Frame-Options: DENY`` for older browsers (no
clickjacking), and ``Referrer-Policy: same-origin`` (job ids in URLs never leak to other
sites).

Caching, unless a view set its own ``Cache-Control``:

- HTML pages: ``no-cache`` (always revalidated: a deploy shows at once);
- API JSON and errors: ``no-store`` (per-client data; a shared cache must never keep it);
- static files: Flask's default (``no-cache`` with ETag / Last-Modified revalidation).

Views that stream images set ``private`` (a client's results) or ``public`` (library tiles)
themselves, with their exact ``Content-Type`` and ``Content-Disposition``.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from flask import Flask, Response, current_app, request

# OpenSeadragon (the job page's viewer, served from npm) injects one fixed <style>, its mobile
# focus rule; this hash allows exactly that text and nothing else (tests/web/test_vendor.py
# recomputes it from the installed OpenSeadragon, so an upgrade that changes it fails there).
OPENSEADRAGON_STYLE_HASH = "sha256-9xTiqzfwFaL2SGb1rmr8gysEwVVjIvqWAgmZgqFqpEE="


def content_security_policy(upload_origins: Iterable[str] = ()) -> str:
    """The policy; ``upload_origins``: the Blob endpoints the page may PUT photos to (connect-src)."""
    connect = " ".join(["'self'", *upload_origins])
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            f"style-src 'self' '{OPENSEADRAGON_STYLE_HASH}'",
            "img-src 'self' blob:",
            f"connect-src {connect}",
            "font-src 'self'",
            "manifest-src 'self'",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ]
    )


CONTENT_SECURITY_POLICY = content_security_policy()


def blob_origin(connection_string: str | None) -> str | None:
    """The scheme://host[:port] of the account's Blob endpoint (no network), None when unknown."""
    if not connection_string:
        return None
    from azure.storage.blob import BlobServiceClient

    try:
        url = urlsplit(BlobServiceClient.from_connection_string(connection_string).url)
    except ValueError:
        return None
    return f"{url.scheme}://{url.netloc}" if url.scheme in ("http", "https") and url.netloc else None


SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def add_headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", current_app.config["CONTENT_SECURITY_POLICY"])
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if "Cache-Control" not in response.headers and not request.path.startswith("/static/"):
        if response.mimetype == "text/html":
            response.headers["Cache-Control"] = "no-cache"
        else:
            response.headers["Cache-Control"] = "no-store"
    return response


def init_app(app: Flask) -> None:
    """The policy is made once, with the Blob endpoints of the app's storage (and its paired
    secondary), and the public one the upload URLs name (``PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT``)."""
    origins = {blob_origin(app.config.get(key)) for key in ("CONNECTION_STRING", "SECONDARY_CONNECTION_STRING")}
    public = urlsplit(app.config["SETTINGS"].public_blob_endpoint)  # where the browser reaches the Blob service
    if public.scheme in ("http", "https") and public.netloc:
        origins.add(f"{public.scheme}://{public.netloc}")
    app.config["CONTENT_SECURITY_POLICY"] = content_security_policy(sorted(o for o in origins if o))
    app.after_request(add_headers)
