"""CSRF protection for every state-changing request (POST, PUT, PATCH, DELETE).

Two independent checks, both required:

1. A custom header, ``X-Requested-With: photomosaics``. An HTML form cannot set headers,
   and a cross-origin ``fetch`` that sets one must first pass a CORS preflight, which this
   app never grants. So a request carrying the header was sent by our own page (or by a
   non-browser client such as ``photomosaics submit``, which is not a CSRF vector: it has no
   victim's cookies).
2. Same origin: when the browser sends ``Origin`` (all current browsers do on POST and
   DELETE), it must be this app's own origin; when it sends only ``Referer``, that must
   start with this origin. A request with neither comes from a non-browser client.

The cookie itself is ``SameSite=Lax``, a third layer: browsers do not attach it to
cross-site POSTs at all. Failing a check is 403 with the usual JSON error body.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Flask, request

from webapp.errors import ApiError

CSRF_HEADER = "X-Requested-With"
CSRF_VALUE = "photomosaics"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def check_request() -> None:
    """Raise 403 unless a state-changing request is provably from this origin or a non-browser."""
    if request.method in _SAFE_METHODS:
        return
    if request.headers.get(CSRF_HEADER, "") != CSRF_VALUE:
        raise ApiError(403, "csrf", f"state-changing requests need the header {CSRF_HEADER}: {CSRF_VALUE}")
    own = _origin_of(request.host_url)
    origin = request.headers.get("Origin")
    referer = request.headers.get("Referer")
    if origin is not None and origin != "null":
        if origin.lower() != own:
            raise ApiError(403, "csrf", "cross-origin request refused (Origin does not match this site)")
    elif origin == "null":
        raise ApiError(403, "csrf", "requests from an opaque origin are refused")
    elif referer and _origin_of(referer) != own:
        raise ApiError(403, "csrf", "cross-origin request refused (Referer does not match this site)")


def init_app(app: Flask) -> None:
    app.before_request(check_request)
