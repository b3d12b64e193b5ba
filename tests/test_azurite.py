"""The embedded Azurite: clean stop, on-disk persistence, no orphan node after SIGKILL or Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from dal.blobs.store import split_blob_url
from dal.config import CONNECTION_STRING_ENV, StorageClients
from dal.connection_strings import DEVSTORE_ACCOUNT, expand_connection_string, service_endpoint
from photomosaics.local import azurite as azurite_module
from photomosaics.local.accounts import storage_account
from photomosaics.local.azurite import Azurite, AzuriteError, embedded_or_configured, find_azurite_script
from tests.support.prereqs import require
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def azurite_installed() -> None:
    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _live_processes() -> Iterator[tuple[int, list[str]]]:
    """``(pid, stat fields after the command name)`` of every live, non-zombie process."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if fields[0] != "Z":
                yield int(entry.name), fields


def _group_members(pgid: int) -> list[int]:
    """Live processes in the process group ``pgid`` (Azurite runs in its own session)."""
    return [pid for pid, fields in _live_processes() if int(fields[2]) == pgid]


def _children(pid: int) -> set[int]:
    return {child for child, fields in _live_processes() if int(fields[1]) == pid}


@pytest.mark.usefixtures("azurite_installed")
def test_start_serves_then_stop_leaves_no_process() -> None:
    azurite = Azurite()
    connection_string = azurite.start()
    pid = azurite.pid
    assert pid is not None and _alive(pid)
    storage = StorageClients(connection_string, profile="probe")
    storage.blob_service.create_container("alive")
    storage.queue_service.create_queue("alive")
    storage.table_service.create_table("alive")
    assert [c.name for c in storage.blob_service.list_containers()] == ["alive"]
    azurite.stop()
    assert not _alive(pid)
    assert _group_members(pid) == []
    azurite.stop()  # a second stop is harmless
    with pytest.raises(AzuriteError):
        _ = azurite.connection_string


@pytest.mark.usefixtures("azurite_installed")
def test_on_disk_persistence_keeps_a_blob_across_restart(tmp_path: Path) -> None:
    with Azurite(location=tmp_path) as first:
        container = StorageClients(first.connection_string, profile="probe").blob_service.create_container("keep")
        container.upload_blob("b.txt", b"still here")
    with Azurite(location=tmp_path) as second:
        blob = StorageClients(second.connection_string, profile="probe").blob_service.get_blob_client("keep", "b.txt")
        assert blob.download_blob().readall() == b"still here"
    with Azurite() as in_memory:  # and memory is not disk
        assert (
            not StorageClients(in_memory.connection_string, profile="probe")
            .blob_service.get_container_client("keep")
            .exists()
        )


def test_a_running_azurite_on_a_data_folder_is_reused_not_started_twice(tmp_path: Path) -> None:
    """`photomosaics library` while `make run` is up must not start a second Azurite on its files."""
    with Azurite(location=tmp_path) as running:
        before = _children(os.getpid())
        with embedded_or_configured(location=tmp_path, environ={}) as cs:
            assert cs == running.connection_string
            assert _children(os.getpid()) == before
    stale = tmp_path / "photomosaics-connection.txt"
    assert not stale.exists()  # stop removes the announcement
    stale.write_text("BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;")  # nothing listens on port 9
    with embedded_or_configured(location=tmp_path, environ={}) as cs:  # a stale file: start a new one
        assert "127.0.0.1:9/" not in cs
        assert StorageClients(cs, profile="probe").blob_service.get_container_client("nothere").exists() is False


@pytest.mark.usefixtures("azurite_installed")
def test_an_azurite_on_a_data_folder_comes_back_on_its_ports_so_queued_addresses_stay_its_own(tmp_path: Path) -> None:
    """Messages name blobs by URL, address included (a job's photo and library, an index
    request's library): after a restart on the same data folder they must still be this
    account's, or the work queued before it fails as another account's."""
    with Azurite(location=tmp_path) as first:
        storage = StorageClients(first.connection_string, profile="probe")
        url = storage.blob_service.create_container("photos").upload_blob("p.jpg", b"queued before").url
        storage.queue_service.create_queue("work").send_message(url)
        kept = (first.ports["Blob"], first.ports["Queue"], first.ports["Table"])
    with Azurite(location=tmp_path) as second:
        storage = StorageClients(second.connection_string, profile="probe")
        (message,) = storage.queue_service.get_queue_client("work").receive_messages()
        assert split_blob_url(storage.blob_service.url, message.content) == ("photos", "p.jpg")
        assert (
            second.moved_from is None and (second.ports["Blob"], second.ports["Queue"], second.ports["Table"]) == kept
        )
        assert storage.blob_service.get_blob_client("photos", "p.jpg").download_blob().readall() == b"queued before"


@pytest.mark.usefixtures("azurite_installed")
def test_when_its_last_ports_are_taken_run_starts_on_others_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(CONNECTION_STRING_ENV, raising=False)
    with Azurite(location=tmp_path / "azurite") as first:
        kept = (first.ports["Blob"], first.ports["Queue"], first.ports["Table"])
        old_url = first.connection_string
    with _listening_on(kept[1]), storage_account(tmp_path) as (connection_string, holder):
        moved = holder[0]
        assert moved.moved_from == kept and moved.ports["Queue"] != kept[1]
        assert StorageClients(connection_string, profile="probe").queue_service.create_queue("answers")
    assert connection_string != old_url
    warning = capsys.readouterr().err
    assert f"({kept[0]}, {kept[1]}, {kept[2]}) are in use" in warning and "queued before this run" in warning
    # The next run keeps the ports this one had: it is the account's address now.
    with Azurite(location=tmp_path / "azurite") as again:
        assert again.moved_from is None and again.ports == moved_ports(connection_string)


@pytest.mark.usefixtures("azurite_installed")
def test_a_port_taken_between_the_check_and_azurites_listen_starts_it_on_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a real run cannot be made to lose on demand: the check is faked to pass while
    the port is held, and Azurite's own EADDRINUSE sends it to free ports."""
    with Azurite(location=tmp_path) as first:
        kept = (first.ports["Blob"], first.ports["Queue"], first.ports["Table"])
    monkeypatch.setattr(azurite_module, "_bindable", lambda host, port: True)
    with _listening_on(kept[2]), Azurite(location=tmp_path) as second:
        assert second.moved_from == kept and second.ports["Table"] != kept[2]
        assert StorageClients(second.connection_string, profile="probe").table_service.create_table("answers")


@contextlib.contextmanager
def _listening_on(port: int) -> Iterator[None]:
    """Another program's listener on ``port`` (SO_REUSEADDR, as Node's: its TIME_WAIT is no obstacle)."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))
        other.listen()
        yield


def moved_ports(connection_string: str) -> dict[str, int]:
    """The blob, queue and table ports a connection string names."""
    return {
        service: int(urlsplit(service_endpoint(connection_string, service.lower())).port or 0)
        for service in ("Blob", "Queue", "Table")
    }


_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    # The child sets up the signal the test sends: under `nohup` or `make test &` it would
    # inherit SIGINT ignored and never see the Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {root!r})
    from photomosaics.local.azurite import Azurite
    with Azurite() as azurite:
        print(azurite.pid, flush=True)
        time.sleep(120)
    """
)


def _start_child() -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT))],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line.strip().isdigit():
        child.kill()
        child.wait()
        pytest.fail(f"the child did not start Azurite: {line!r}")
    node = int(line)
    assert _alive(node)
    return child, node


@pytest.mark.usefixtures("azurite_installed")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_death_of_the_python_parent_leaves_no_orphan_node(how: signal.Signals) -> None:
    child, node = _start_child()
    try:
        child.send_signal(how)
        child.wait(timeout=30)
        wait_for(
            lambda: not _alive(node) and not _group_members(node),
            seconds=20,
            what=f"node {node} gone with its parent ({how.name})",
        )
    finally:
        if _alive(node):
            os.kill(node, signal.SIGKILL)
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_configured_account_starts_nothing() -> None:
    configured = "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=a2V5;EndpointSuffix=core.windows.net"
    before = _children(os.getpid())
    with embedded_or_configured(environ={CONNECTION_STRING_ENV: configured}, location="/nonexistent/never") as cs:
        assert cs == configured
        assert _children(os.getpid()) == before
    assert not Path("/nonexistent/never").exists()


def test_use_development_storage_expands_to_the_emulator() -> None:
    expanded = expand_connection_string("UseDevelopmentStorage=true")
    assert f"AccountName={DEVSTORE_ACCOUNT};" in expanded
    assert f"BlobEndpoint=http://127.0.0.1:10000/{DEVSTORE_ACCOUNT};" in expanded
    assert f"QueueEndpoint=http://127.0.0.1:10001/{DEVSTORE_ACCOUNT};" in expanded
    assert f"TableEndpoint=http://127.0.0.1:10002/{DEVSTORE_ACCOUNT};" in expanded
    proxied = expand_connection_string("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite")
    assert f"BlobEndpoint=http://azurite:10000/{DEVSTORE_ACCOUNT};" in proxied
    with embedded_or_configured(environ={CONNECTION_STRING_ENV: "UseDevelopmentStorage=true"}) as cs:
        assert cs == expanded
    storage = StorageClients("UseDevelopmentStorage=true", profile="probe")
    assert storage.account_name == DEVSTORE_ACCOUNT
    assert storage.blob_service.url.startswith(f"http://127.0.0.1:10000/{DEVSTORE_ACCOUNT}")
