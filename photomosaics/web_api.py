"""The web app's HTTP API as the CLI's commands call it (``submit``, ``library add``): a session
against one base URL whose every failure is one clear line (a ``ClickException``), and which,
once the app has answered, waits out its restarts instead of failing mid-upload."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["DEFAULT_URL", "WebApi", "check_base_url", "describe_error", "restart_retry"]

DEFAULT_URL = "http://127.0.0.1:8080"
_CSRF = {"X-Requested-With": "photomosaics"}


def restart_retry() -> Any:
    """urllib3's Retry for an app that has answered once: a refused connection (nothing was sent)
    is tried again 8 times over about 45 s (backoff 0, 1, 2, 4, 8, then 10 s), saying so, and a
    connection dropped mid-answer twice for a GET. A deploy or a crashed web process that its
    supervisor brings back is then a pause, not the end of an upload or of a job's progress."""
    import logging

    from urllib3.util.retry import Retry

    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # its retry warnings: ours says it in one line

    class Patient(Retry):
        def sleep(self, response: Any = None) -> None:
            wait = self.get_backoff_time()
            if wait:
                click.echo(f"the web app is not answering (restarting?): trying again in {wait:.0f} s", err=True)
            super().sleep(response)

    return Patient(total=None, connect=8, read=2, status=0, other=0, backoff_factor=0.5, backoff_max=10)


class WebApi:
    """A requests session against one base URL; every failure becomes a ClickException.

    An app that never answered fails at once (a wrong URL, or nothing running); once it has
    answered, its restarts are waited for (``restart_retry``)."""

    def __init__(self, base: str, *, timeout: float) -> None:
        import requests

        self.base = base.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(_CSRF)
        self._reached = False

    def call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kwargs: Any) -> Any:
        import requests

        url = path if path.startswith("http") else f"{self.base}{path}"
        try:
            response = self.session.request(method, url, timeout=kwargs.pop("timeout", self.timeout), **kwargs)
            if not self._reached:
                self._reached = True
                self.session.mount(f"{self.base}/", requests.adapters.HTTPAdapter(max_retries=restart_retry()))
        except requests.ConnectionError:
            raise click.ClickException(
                f"cannot reach the web app at {self.base}: is `photomosaics web` (or `make run`) running?"
            ) from None
        except requests.Timeout:
            raise click.ClickException(f"the web app at {self.base} did not answer in {self.timeout:.0f} s") from None
        if response.status_code not in ok:
            raise click.ClickException(describe_error(response))
        return response


def check_base_url(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """An http(s) URL with a host and a valid port, or a usage error (requests raised its own
    exceptions for these, a traceback instead of a line)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{value!r} is not an http(s) URL with a host, such as {DEFAULT_URL}")
    return value


def describe_error(response: Any) -> str:
    try:
        body = response.json()
        return f"{body['detail']} (HTTP {response.status_code} {body['error']})"
    except (ValueError, KeyError, TypeError):
        return f"the web app answered HTTP {response.status_code} {response.reason}"
