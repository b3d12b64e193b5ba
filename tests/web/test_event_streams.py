"""Event streams are bounded (webapp.streams): a few per client, a cap per process (429 beyond,
with Retry-After), each ends after SSE_MAX_SECONDS with a reconnect hint; under gunicorn, 40
streams held on one job leave /healthz answering."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask

from dal.config import CONNECTION_STRING_ENV, Settings
from tests.support.waiting import wait_for
from tests.web.conftest import SECRET, ApiClient, png_bytes, submit
from tests.web.test_web_command import free_port
from webapp import create_app
from webapp.csrf import CSRF_HEADER, CSRF_VALUE


def _app(settings: Settings, connection_string: str, **config: Any) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": settings,
            "CONNECTION_STRING": connection_string,
            "SSE_POLL_SECONDS": 0.05,
            **config,
        }
    )
    app.test_client_class = ApiClient
    return app


def _events_url(client: Any) -> str:
    created = submit(client)
    assert created.status_code == 202, created.get_json()
    return f"{created.get_json()['status_url']}/events"


def test_a_client_gets_a_few_streams_and_a_429_beyond(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    app = _app(web_settings, azurite_connection_string)
    client = app.test_client()
    url = _events_url(client)
    held = [client.get(url) for _ in range(web_settings.event_streams_per_client)]
    assert [r.status_code for r in held] == [200] * len(held)
    refused = client.get(url)
    assert refused.status_code == 429
    assert refused.get_json()["error"] == "too_many_streams"
    assert int(refused.headers["Retry-After"]) >= 1
    held.pop().close()  # a closed stream gives its slot back
    again = client.get(url)
    assert again.status_code == 200
    for response in reversed((*held, again)):  # one thread holds every context here: close in LIFO order
        response.close()


def test_the_process_cap_holds_across_clients(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    from dataclasses import replace

    app = _app(
        replace(web_settings, event_streams_per_process=4, event_streams_per_client=2), azurite_connection_string
    )
    clients = [app.test_client() for _ in range(3)]
    urls = [_events_url(c) for c in clients]
    answers = [c.get(u) for c, u in zip(clients, urls) for _ in range(2)]
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 429, 429]
    assert "event streams at once" in answers[-1].get_json()["detail"]
    for response in reversed(answers):
        response.close()


def test_three_clients_do_not_lock_out_a_fourth(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    """With the default caps each of three clients opens all the streams it may (one more is 429
    for that client alone), and a fourth still gets its own."""
    from dataclasses import replace

    defaults = Settings()
    app = _app(
        replace(
            web_settings,
            event_streams_per_client=defaults.event_streams_per_client,
            event_streams_per_process=defaults.event_streams_per_process,
        ),
        azurite_connection_string,
    )
    clients = [app.test_client() for _ in range(4)]
    urls = [_events_url(c) for c in clients]
    held = []
    for client, url in zip(clients[:3], urls):
        held += [client.get(url) for _ in range(defaults.event_streams_per_client)]
        extra = client.get(url)
        assert extra.status_code == 429 and "per client" in extra.get_json()["detail"]
        assert int(extra.headers["Retry-After"]) >= 1
    assert {r.status_code for r in held} == {200}
    fourth = [clients[3].get(urls[3]) for _ in range(defaults.event_streams_per_client)]
    assert [r.status_code for r in fourth] == [200] * defaults.event_streams_per_client
    for response in reversed((*held, *fourth)):
        response.close()


def test_a_stream_ends_in_time_with_a_reconnect_hint(
    web_settings: Settings, azurite_connection_string: str, tile_library: str
) -> None:
    app = _app(web_settings, azurite_connection_string, SSE_MAX_SECONDS=0.3)
    client = app.test_client()
    response = client.get(_events_url(client))
    text = response.get_data(as_text=True)  # ends by itself: no worker runs, the job stays queued
    assert text.startswith("retry: 2000\n\n")
    assert "event: job\n" in text
    assert text.rstrip().endswith('event: reconnect\ndata: {"after_ms": 2000}')
    assert app.extensions["photomosaics.streams"].total == 0


@pytest.mark.slow
def test_healthz_answers_while_40_streams_are_held_and_a_stop_ends_them_with_a_reconnect(
    azurite_connection_string: str, tmp_path: Path
) -> None:
    """The real server (gunicorn, 2 workers of 16 threads): one client asks for 40 streams of its job
    (its own cap raised to 40, so the process cap is what stops them); /healthz still answers.
    Then SIGTERM: each held stream ends with ``event: reconnect`` and the server exits 0."""
    from dal.blobs.libraries import LibraryStore
    from dal.config import StorageClients

    prefix = "s" + uuid.uuid4().hex[:8]
    tiles = [(f"t{i}.png", png_bytes(64, 64, colour=(i * 40, 255 - i * 40, 90))) for i in range(6)]
    LibraryStore(StorageClients(azurite_connection_string, profile="probe"), prefix=prefix).create_from(
        "streamtiles", "tiles", tiles, shared=True
    )
    port = free_port()
    env = {
        **os.environ,
        CONNECTION_STRING_ENV: azurite_connection_string,
        "PHOTOMOSAICS_SECRET_KEY": SECRET,
        "PHOTOMOSAICS_NAME_PREFIX": prefix,
        "PHOTOMOSAICS_EVENT_STREAMS_PER_CLIENT": "40",
    }
    log_path = tmp_path / "web.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", "from photomosaics.cli import main; main()", "web", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    session = requests.Session()
    session.headers[CSRF_HEADER] = CSRF_VALUE
    streams: list[Any] = []
    try:
        _wait_until_up(base, process, log_path)
        created = session.post(
            f"{base}/api/jobs",
            data={"library": "streamtiles", "tile_size": "8", "slices": "1"},
            files={"image": ("p.png", png_bytes())},
            timeout=30,
        )
        assert created.status_code == 202, created.text
        url = f"{base}{created.json()['status_url']}/events"
        with ThreadPoolExecutor(max_workers=40) as pool:
            streams = list(pool.map(lambda _: session.get(url, stream=True, timeout=30), range(40)))
        codes = sorted(r.status_code for r in streams)
        per_process = Settings().event_streams_per_process
        assert set(codes) <= {200, 429}
        assert 1 <= codes.count(200) <= 2 * per_process, codes  # two worker processes
        assert all(int(r.headers["Retry-After"]) >= 1 for r in streams if r.status_code == 429)
        for _ in range(5):
            health = requests.get(f"{base}/healthz", timeout=10)
            assert health.status_code == 200, health.text
        # A stop (a deploy, a scale-in) ends every held stream at once with a reconnect hint:
        # the client follows the job from another process, and no stream holds the worker.
        process.send_signal(signal.SIGTERM)
        for response in streams:
            if response.status_code == 200:
                text = b"".join(response.iter_content(chunk_size=None)).decode()
                assert text.rstrip().endswith('event: reconnect\ndata: {"after_ms": 2000}'), text[-300:]
        assert process.wait(timeout=60) == 0, log_path.read_text()[-2000:]
    finally:
        for response in streams:
            response.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def _wait_until_up(base: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    def up() -> bool:
        assert process.poll() is None, log_path.read_text()  # it ended: say why at once, not after a minute
        try:
            return requests.get(f"{base}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_for(up, seconds=60, step=0.2, what=f"{base}/healthz", details=log_path.read_text)
