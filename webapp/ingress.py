"""Behind an ingress: who the client is and which scheme it used, and what follows from HTTPS.

``PHOTOMOSAICS_TRUSTED_PROXIES`` (``Settings.trusted_proxies``, 0 by default) is the number of
proxies in front of the app (a Kubernetes ingress is one; a CDN in front of it makes two).
With N > 0, werkzeug's ``ProxyFix`` takes the client address, scheme, host and port from the
last N entries of ``X-Forwarded-For`` / ``-Proto`` / ``-Host`` / ``-Port``; entries further left
were written by the client and are ignored. With 0, those headers are ignored altogether:
the peer address is the client (as with ``make run``).

What follows from the client's scheme, per request:

- the session cookie is ``Secure`` when the request came over HTTPS (or always, with
  ``PHOTOMOSAICS_SECURE_COOKIES=1``), so it is never sent back over plain HTTP;
- HTTPS answers carry ``Strict-Transport-Security`` (one year), so a browser does not try
  plain HTTP again;
- ``request.host_url`` has the client's scheme, so the CSRF origin check (``webapp.csrf``)
  accepts the browser's ``Origin: https://...``.

The secret key that signs the cookie must be at least ``MIN_SECRET_KEY_LENGTH`` characters;
``photomosaics web`` refuses to start without one when more than one replica serves
(``required_secret_key``), since each would otherwise make its own and clients would lose
their jobs between them.
"""

from __future__ import annotations

from flask import Flask, Response, request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix

__all__ = ["HSTS", "MIN_SECRET_KEY_LENGTH", "check_secret_key", "client_address", "init_app", "required_secret_key"]

MIN_SECRET_KEY_LENGTH = 32
HSTS = "max-age=31536000"


class _SchemeAwareSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, ``Secure`` whenever this request came over HTTPS."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"]) or request.is_secure


def client_address() -> str:
    """The client's address: the peer, or what the trusted proxies say (ProxyFix set it)."""
    return request.remote_addr or ""


def check_secret_key(key: object) -> None:
    """Refuse a missing or short key with a message that says how to make a good one."""
    hint = "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if not isinstance(key, (str, bytes)) or not key:
        raise RuntimeError(f"PHOTOMOSAICS_SECRET_KEY is not set: the app needs it to sign the client-id cookie; {hint}")
    if len(key) < MIN_SECRET_KEY_LENGTH:
        raise RuntimeError(
            f"PHOTOMOSAICS_SECRET_KEY has {len(key)} characters; at least {MIN_SECRET_KEY_LENGTH} are needed; {hint}"
        )


def required_secret_key(*, replicas: int, preload: bool) -> bool:
    """True when the web processes cannot share a key made at start-up.

    gunicorn workers forked from a master that built the app (``preload_app``) share the key
    that master made; separate replicas (pods, containers, hosts) and workers that build their
    own app cannot.
    """
    return replicas > 1 or not preload


def _strict_transport(response: Response) -> Response:
    if request.is_secure:
        response.headers.setdefault("Strict-Transport-Security", HSTS)
    return response


def init_app(app: Flask, *, trusted_proxies: int) -> None:
    if trusted_proxies < 0:
        raise RuntimeError(f"PHOTOMOSAICS_TRUSTED_PROXIES must be 0 or more, got {trusted_proxies}")
    if trusted_proxies:
        n = trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n, x_port=n)  # type: ignore[method-assign]  # Flask's documented way to wrap its WSGI app
    app.session_interface = _SchemeAwareSessions()
    app.after_request(_strict_transport)
