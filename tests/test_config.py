"""Settings from the environment, lazy clients with retry profiles, and the start-up check."""

from __future__ import annotations

import ast
import base64
import dataclasses
import http.server
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from azure.core.exceptions import HttpResponseError
from click.testing import CliRunner
from PIL import Image

from dal.availability.health import check_storage
from dal.config import CONNECTION_STRING_ENV, Settings, SettingsError, StorageClients
from dal.connection_strings import DEVSTORE_KEY, azurite_connection_string, describe_connection_string
from dal.errors import StorageConfigurationError
from photomosaics.cli import main
from tests.support.faultproxy import faulty_account


def test_settings_read_the_environment() -> None:
    env = {
        CONNECTION_STRING_ENV: "UseDevelopmentStorage=true",
        "PHOTOMOSAICS_POISON_THRESHOLD": "7",
        "PHOTOMOSAICS_POLL_MAX_SECONDS": "2.5",
    }
    settings = Settings.from_env(env)
    assert settings.connection_string == "UseDevelopmentStorage=true"
    assert (settings.poison_threshold, settings.poll_max_interval) == (7, 2.5)
    assert Settings.from_env({}) == Settings()
    with pytest.raises(ValueError, match="PHOTOMOSAICS_BATCH_SIZE must be an integer"):
        Settings.from_env({"PHOTOMOSAICS_BATCH_SIZE": "many"})
    with pytest.raises(ValueError, match="PHOTOMOSAICS_STITCH_TIMEOUT must be a number"):
        Settings.from_env({"PHOTOMOSAICS_STITCH_TIMEOUT": "soon"})


def test_every_setting_has_one_variable_and_round_trips() -> None:
    """Each field is read from its own variable, typed like its default (written once)."""
    names = [f.name for f in dataclasses.fields(Settings)]
    assert sorted(Settings.ENV) == sorted(names)
    assert len(set(Settings.ENV.values())) == len(names)
    defaults = Settings()
    highs = {f.name: f.metadata.get("range", (0, None))[1] for f in dataclasses.fields(Settings)}
    changed = {
        name: (
            "x1"
            if isinstance(value, str) or value is None
            else value - 2
            if highs[name] is not None and value + 2 > highs[name]  # at its largest already
            else value + 2
        )
        for name, value in dataclasses.asdict(defaults).items()
    }
    env = {Settings.ENV[name]: str(value) for name, value in changed.items()}
    assert dataclasses.asdict(Settings.from_env(env)) == changed
    assert Settings.from_env({name: "" for name in env}) == defaults  # empty means unset


@pytest.mark.parametrize(
    ("variable", "raw", "said"),
    [
        ("PHOTOMOSAICS_MAX_SLICES", "-1", "max_slices (PHOTOMOSAICS_MAX_SLICES) must be at least 1, got -1"),
        ("PHOTOMOSAICS_BATCH_SIZE", "33", "batch_size (PHOTOMOSAICS_BATCH_SIZE) must be from 1 to 32, got 33"),
        (
            "PHOTOMOSAICS_RETRY_DELAY_SECONDS",
            "nan",
            "retry_delay (PHOTOMOSAICS_RETRY_DELAY_SECONDS) must be at least 0",
        ),
        ("PHOTOMOSAICS_HEDGE_FACTOR", "inf", "hedge_factor (PHOTOMOSAICS_HEDGE_FACTOR) must be at least 0, got inf"),
        ("PHOTOMOSAICS_POLL_MIN_SECONDS", "5", "poll_min_interval (5.0) exceeds poll_max_interval"),
        ("PHOTOMOSAICS_MAX_UPLOAD_BYTES", "lots", "PHOTOMOSAICS_MAX_UPLOAD_BYTES must be an integer, got 'lots'"),
    ],
)
def test_a_setting_out_of_its_range_is_one_clear_line_in_every_command(
    variable: str, raw: str, said: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(SettingsError, match=re.escape(said)):
        Settings.from_env({variable: raw})
    monkeypatch.setenv(variable, raw)
    photo = tmp_path / "photo.png"
    Image.new("RGB", (8, 8)).save(photo)
    for command in (["web"], ["queues"], ["render", str(photo), "-l", "demo", "-o", str(tmp_path / "out.jpg")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1 and said in result.output and "Traceback" not in result.output, result.output


def _settings_reads_outside_config() -> list[str]:
    """``<module>:<line>`` of every read of a Settings variable by any module but ``dal.config``.

    A read is ``os.environ.get(X)``, ``os.getenv(X)``, ``environ[X]`` (``X`` the variable's name
    as a literal, or ``CONNECTION_STRING_ENV``); setting one for a child process is no read.
    """
    variables = set(Settings.ENV.values())
    root = Path(__file__).resolve().parent.parent
    found = []
    for package in ("dal", "workers", "webapp", "photomosaics", "mosaic"):
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "dal" / "config.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                key = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                    if node.func.attr in ("get", "getenv", "pop"):
                        key = node.args[0]
                elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                    key = node.slice
                named = (isinstance(key, ast.Constant) and key.value in variables) or (
                    isinstance(key, ast.Name) and key.id == "CONNECTION_STRING_ENV"
                )
                if named:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_only_dal_config_reads_the_settings_variables() -> None:
    """One env parser: roles, web app and CLI take ``Settings.from_env()``, never ``os.environ``."""
    assert _settings_reads_outside_config() == []


def test_clients_are_created_lazily_and_never_show_the_key(azurite_connection_string: str) -> None:
    storage = StorageClients(azurite_connection_string, profile="interactive")
    assert not {"blob_service", "queue_service", "table_service"} & set(vars(storage))
    assert storage.blob_service is storage.blob_service  # created once, on first use
    assert "queue_service" not in vars(storage)
    assert DEVSTORE_KEY not in repr(storage)
    assert DEVSTORE_KEY not in describe_connection_string(azurite_connection_string)


@pytest.mark.parametrize("profile", ["worker", "interactive", "probe"])
def test_every_profile_talks_to_storage(azurite_connection_string: str, profile: str) -> None:
    answers: list[int] = []
    storage = StorageClients(
        azurite_connection_string,
        profile=profile,  # type: ignore[arg-type]
        response_hook=lambda response: answers.append(response.http_response.status_code),
    )
    check_storage(storage)
    assert answers == [200, 200, 200]  # one cheap call per service, each answered, none retried


def test_wrong_account_key_is_a_clear_configuration_error(azurite_connection_string: str) -> None:
    wrong_key = base64.b64encode(b"not the key of this account at all, sorry!!!").decode()
    wrong = azurite_connection_string.replace(DEVSTORE_KEY, wrong_key)
    assert wrong != azurite_connection_string
    storage = StorageClients(wrong, profile="probe")
    with pytest.raises(StorageConfigurationError) as caught:
        check_storage(storage)
    message = str(caught.value)
    assert "refused the credentials" in message
    assert storage.account_name in message and storage.blob_service.url.split("?")[0] in message
    assert wrong_key not in message and DEVSTORE_KEY not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_dead_endpoint_fails_within_the_probe_profile() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    storage = StorageClients(azurite_connection_string("127.0.0.1", port, port, port), profile="probe")
    with pytest.raises(StorageConfigurationError, match=f"127.0.0.1:{port}.*unreachable") as caught:
        check_storage(storage)
    assert DEVSTORE_KEY not in str(caught.value)


def test_a_role_starts_on_an_account_that_drops_connections(azurite_connection_string: str) -> None:
    # The account takes each request and drops the connection (a flaky path, not a wrong
    # endpoint): a long-running role starts and lets its retries see it through; a one-shot
    # check still says it could not get through.
    with faulty_account(azurite_connection_string, faults={"reset": 1.0}) as account:
        account.set_active(True)
        storage = StorageClients(account.connection_string, profile="probe")
        check_storage(storage, throttled_ok=True)
        with pytest.raises(StorageConfigurationError, match="unreachable"):
            check_storage(storage)
        assert account.counts()["reset"] >= 6  # blob, queue and table, each tried twice


def test_unknown_account_is_a_configuration_error(azurite_connection_string: str) -> None:
    other = azurite_connection_string.replace("devstoreaccount1", "nosuchaccount")
    with pytest.raises(StorageConfigurationError, match="nosuchaccount"):
        check_storage(StorageClients(other, profile="probe"))


class _AlwaysBusy(http.server.BaseHTTPRequestHandler):
    """A fake endpoint for a fault Azurite cannot produce on demand: 503 Server Busy, always."""

    requests_seen: ClassVar[list[str]] = []

    def _busy(self) -> None:
        self.requests_seen.append(self.path)
        body = b"<?xml version='1.0'?><Error><Code>ServerBusy</Code><Message>busy</Message></Error>"
        self.send_response(503, "Server Busy")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _busy

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def busy_endpoint() -> Iterator[tuple[int, list[str]]]:
    seen: list[str] = []
    handler = type("Busy", (_AlwaysBusy,), {"requests_seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(("profile", "attempts"), [("probe", 2), ("interactive", 3)])
def test_server_busy_is_retried_per_profile_then_surfaces(
    busy_endpoint: tuple[int, list[str]], profile: str, attempts: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOTOMOSAICS_SERVER_BUSY_SECONDS", "0.2")  # the ServerBusy pause (10 s by default)
    port, seen = busy_endpoint
    busy = azurite_connection_string("127.0.0.1", port, port, port)
    storage = StorageClients(busy, profile=profile)  # type: ignore[arg-type]
    with pytest.raises(HttpResponseError) as caught:
        check_storage(storage)  # a transient 5xx is not a configuration error
    assert not isinstance(caught.value, StorageConfigurationError)
    assert caught.value.status_code == 503
    assert len(seen) == attempts


def test_a_throttled_account_lets_a_role_start(busy_endpoint: tuple[int, list[str]]) -> None:
    port, seen = busy_endpoint
    busy = azurite_connection_string("127.0.0.1", port, port, port)
    check_storage(StorageClients(busy, profile="probe"), throttled_ok=True)  # no raise: 503 is no config error
    assert len(seen) >= 6  # blob, queue and table were each asked (and retried)
