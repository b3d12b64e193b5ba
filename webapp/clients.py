"""Who is asking: a client id per browser (or CLI session) in a signed, HttpOnly cookie.

The id is random (``secrets.token_urlsafe``), kept in Flask's session cookie, which
itsdangerous signs with the app's secret key: a client cannot forge another client's id,
and JavaScript cannot read it (HttpOnly). SameSite=Lax keeps it off cross-site
sub-requests (see ``webapp.csrf`` for the rest of the CSRF story). Jobs are stored in the
partition of their client id, so isolation is a property of every lookup, not a filter.
"""

from __future__ import annotations

import re
import secrets

from flask import Flask, session

from dal.queues.message_fields import ID_CHARS, MAX_ID_LENGTH

_SESSION_KEY = "cid"
_VALID = re.compile(rf"^{ID_CHARS}{{16,{MAX_ID_LENGTH}}}$")


def client_id() -> str:
    """This request's client id; a new one (and a new cookie) when the request has none."""
    value = session.get(_SESSION_KEY)
    if not isinstance(value, str) or not _VALID.match(value):
        value = secrets.token_urlsafe(18)
        session[_SESSION_KEY] = value
        session.permanent = True
    return value


def init_app(app: Flask) -> None:
    """Nothing to set up: Flask's session does the signing; kept for symmetry with the others."""
    del app
