"""This machine's client id per web app, kept between commands in a file of the user's own.

The web app knows a client by its ``pm_client`` cookie (as it knows a browser). ``library add``,
``library remove`` and ``rename``, and ``submit`` load the cookies the app gave this machine before
and keep the ones it gives now, so that a library made with ``library add`` is the same client's
when ``submit --library`` asks for it. ``PHOTOMOSAICS_CLIENT_FILE`` names another file (tests, or
two identities on one machine); by default it is ``clients.json`` in click's app directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

__all__ = ["load_client", "save_client"]


def _client_file() -> Path:
    explicit = os.environ.get("PHOTOMOSAICS_CLIENT_FILE")
    return Path(explicit) if explicit else Path(click.get_app_dir("photomosaics")) / "clients.json"


def load_client(session: Any, base: str) -> None:
    """The cookies this machine was given by the web app at ``base`` before: the same client id.

    Each is put in the jar where the app's own ``Set-Cookie`` lands (the request's effective host,
    path ``/``), so that a new one replaces it. Loaded without a domain, it stayed beside the new
    one and both were sent, the stale first: once the app's secret changed (its data folder
    made anew), every request was a new client, and ``submit`` lost its job ("no such job")."""
    from urllib.parse import urlsplit

    from requests.cookies import create_cookie

    try:
        known = json.loads(_client_file().read_text())
        host = (urlsplit(base).hostname or "").lower()
        host = host if "." in host else f"{host}.local"  # http.cookiejar's effective host: localhost.local
        for name, value in dict(known.get(base, {})).items():
            session.cookies.set_cookie(create_cookie(str(name), str(value), domain=host, path="/"))
    except (OSError, ValueError, AttributeError, TypeError):
        pass


def save_client(session: Any, base: str) -> None:
    import requests

    path = _client_file()
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(known, dict):
            known = {}
        known[base] = requests.utils.dict_from_cookiejar(session.cookies)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a client id is a credential
        with os.fdopen(fd, "w") as out:
            json.dump(known, out, indent=1)
        partial.replace(path)
    except (OSError, ValueError) as exc:
        click.echo(f"note: cannot keep the client id in {path} ({exc}); a later command is another client", err=True)
