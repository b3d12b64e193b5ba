"""The operator token: what guards the API calls that change queues.

``PHOTOMOSAICS_ADMIN_TOKEN`` (or ``ADMIN_TOKEN`` in the app config) enables operator actions.
Unset: they are off, the Queues page shows no buttons and the API answers 403. Set: a
request must carry ``Authorization: Bearer <token>``, else 401 with ``WWW-Authenticate:
Bearer`` (RFC 9110 and RFC 6750: missing or wrong credentials are 401, 403 is for a request
no credentials can allow); the comparison is constant-time (``hmac.compare_digest``) and the
token is never logged nor echoed. Reading depths stays public. A token shorter than
``MIN_ADMIN_TOKEN_LENGTH`` characters stops the app at start-up (``check_admin_token``).
"""

from __future__ import annotations

import hmac

from flask import current_app, request

from webapp.errors import ApiError

ADMIN_TOKEN_ENV = "PHOTOMOSAICS_ADMIN_TOKEN"
MIN_ADMIN_TOKEN_LENGTH = 24  # secrets.token_urlsafe(18): 144 random bits


def check_admin_token(token: object) -> None:
    """Refuse to start with an operator token short enough to guess (unset is fine: actions are off)."""
    if token and len(str(token)) < MIN_ADMIN_TOKEN_LENGTH:
        raise RuntimeError(
            f"{ADMIN_TOKEN_ENV} has {len(str(token))} characters; at least {MIN_ADMIN_TOKEN_LENGTH} are needed; "
            "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )


def admin_enabled() -> bool:
    return bool(current_app.config.get("ADMIN_TOKEN"))


def require_admin() -> None:
    """Raise 403 when operator actions are off, 401 unless the request carries the token."""
    expected = current_app.config.get("ADMIN_TOKEN") or ""
    if not expected:
        raise ApiError(403, "forbidden", f"operator actions are disabled: set {ADMIN_TOKEN_ENV} on the web app")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise ApiError(
            401,
            "unauthorized",
            "this operation needs the operator token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": 'Bearer realm="photomosaics operator"'},
        )
