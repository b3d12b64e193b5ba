"""Browser security headers on every response, and the right caching for each kind of answer.

A mosaic service serves files its users uploaded, so the browser must be told to contain
them: a strict ``Content-Security-Policy`` that the UI satisfies as shipped (scripts and
styles only from our own ``/static`` and ``/vendor`` files, never inline, except the one
fixed style element OpenSeadragon injects, allowed by its hash; images from this origin, plus
``blob:`` for the local preview of a photo before it is uploaded; ``connect-src 'self'``
for fetch and Server-Sent Events),
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

from flask import Flask, Response, request

# OpenSeadragon (the job page's viewer, served from npm) injects one fixed <style>, its mobile
# focus rule; this hash allows exactly that text and nothing else (tests/web/test_vendor.py
# recomputes it from the installed OpenSeadragon, so an upgrade that changes it fails there).
OPENSEADRAGON_STYLE_HASH = "sha256-9xTiqzfwFaL2SGb1rmr8gysEwVVjIvqWAgmZgqFqpEE="

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        f"style-src 'self' '{OPENSEADRAGON_STYLE_HASH}'",
        "img-src 'self' blob:",
        "connect-src 'self'",
        "font-src 'self'",
        "manifest-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def add_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if "Cache-Control" not in response.headers and not request.path.startswith("/static/"):
        if response.mimetype == "text/html":
            response.headers["Cache-Control"] = "no-cache"
        else:
            response.headers["Cache-Control"] = "no-store"
    return response


def init_app(app: Flask) -> None:
    app.after_request(add_headers)
