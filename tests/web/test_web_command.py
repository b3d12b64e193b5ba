"""``photomosaics web``: gunicorn with the settings of webapp/gunicorn_conf.py, a clear refusal
without storage, and a real start that serves the health check and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from dal.config import CONNECTION_STRING_ENV
from photomosaics.cli import main
from photomosaics.commands.web import gunicorn_options
from tests.support.faultproxy import faulty_account
from tests.support.waiting import wait_for


def _healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> bool:
    """``url`` answers 200; an AssertionError with the log at once if ``process`` ended."""
    assert process.poll() is None, log_path.read_text()
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


def test_gunicorn_settings_live_in_one_place() -> None:
    options = gunicorn_options(host="0.0.0.0", port=9000, workers=3)
    assert options["bind"] == ["0.0.0.0:9000"] and options["workers"] == 3
    with_metrics = gunicorn_options(host="0.0.0.0", port=9000, workers=None, metrics=("0.0.0.0", 9100))
    assert with_metrics["bind"] == ["0.0.0.0:9000", "0.0.0.0:9100"]
    assert options["worker_class"] == "gthread" and options["threads"] >= 4
    assert gunicorn_options(host="127.0.0.1", port=1, workers=None)["workers"] == 2


def test_refuses_to_start_without_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONNECTION_STRING_ENV, raising=False)
    result = CliRunner().invoke(main, ["web", "--port", "1"])
    assert result.exit_code == 1
    assert f"{CONNECTION_STRING_ENV} is not set" in result.output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_serves_under_gunicorn_and_stops_on_sigterm(azurite_connection_string: str, tmp_path: Path) -> None:
    _serve_and_stop(azurite_connection_string, tmp_path)


@pytest.mark.slow
def test_starts_on_a_throttled_account(azurite_connection_string: str, tmp_path: Path) -> None:
    # Two ServerBusy answers in a row on each service outlast the start-up check's one retry.
    # A throttled account is there: the web app starts, and answers 503 only while it lasts.
    with faulty_account(azurite_connection_string, faults={"503": 1.0}, max_faults=2) as account:
        account.set_active(True)
        _serve_and_stop(account.connection_string, tmp_path)
        assert account.counts()["503"] >= 2


def _serve_and_stop(connection_string: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        CONNECTION_STRING_ENV: connection_string,
        "PHOTOMOSAICS_SECRET_KEY": "k" * 32,
        "PHOTOMOSAICS_NAME_PREFIX": "g" + os.urandom(4).hex(),
    }
    log = (tmp_path / "web.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from photomosaics.cli import main; main()",
            "web",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: _healthy(f"http://127.0.0.1:{port}/healthz", process, tmp_path / "web.log"),
            seconds=30,
            step=0.2,
            what="the web app's /healthz",
            details=(tmp_path / "web.log").read_text,
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
            assert b"Photo Mosaics" in page.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs", timeout=5) as jobs:
            assert jobs.read() == b'{"continuation":null,"jobs":[]}\n'
            assert "HttpOnly" in jobs.headers["Set-Cookie"]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        log.close()
    assert code == 0
    text = (tmp_path / "web.log").read_text()
    assert "gthread" in text  # gunicorn said which worker class it uses
    assert "AccountKey" not in text
    assert "control socket" not in text.lower()  # disabled: instances must not share ~/.gunicorn
