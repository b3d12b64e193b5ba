"""``photomosaics run``: the whole application on one machine (what ``make run`` calls).

In order: the data folder (``.data/``, held by one run at a time: ``data_folder_held``), the embedded Azurite with on-disk persistence in
``.data/azurite`` (skipped when ``AZURE_STORAGE_CONNECTION_STRING`` is set), queues with their
metadata, containers and tables, the demo tile library, the Flask secret key (made once, kept
in ``.data/secret_key``), then the web app, one controller, one responder and N processors as
supervised child processes, and a syphon when a paired secondary account is configured
(``PHOTOMOSAICS_SECONDARY_CONNECTION_STRING``, or ``--secondary-azurite``: a second embedded
Azurite in ``.data/azurite-secondary``; see ``dal.availability.failover``). Ctrl-C (or SIGTERM) stops the children (SIGTERM, grace, SIGKILL),
then Azurite, and exits 0; a second Ctrl-C hurries the children. Everything in ``.data/``
survives to the next run.

Self-healing on one machine: the children share a hint folder (``dal.hints.channel``: a send wakes
the listeners of that queue at once) and a lease folder (``workers.runtime.leases``: when a child
dies, the messages it held are handed back and announced at once, not after their lease),
and the embedded Azurite is restarted on the same ports and data if it dies
(``photomosaics.local.storage_keeper``), with ``/healthz`` told what happened. The accounts are
``photomosaics.local.accounts``', the children ``photomosaics.local.children``'.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import click

from photomosaics.commands.counts import PROCESSES_PER_CPU, process_count, usable_cpus

SECRET_KEY_FILE = "secret_key"
RUN_LOCK_FILE = "run.lock"  # held by the run using the folder (``data_folder_held``)
# The operator token of a local run (the Queues page, poison actions) when none is configured.
OPERATOR_TOKEN_FILE = "operator_token"


def read_or_create_secret_key(data_dir: Path, name: str = SECRET_KEY_FILE) -> str:
    """The app's cookie-signing key (or another secret ``name``): made once, then read, so
    sessions survive restarts."""
    path = data_dir / name
    if path.exists():
        key = path.read_text().strip()
        if key:
            return key
    key = secrets.token_urlsafe(48)
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


@contextlib.contextmanager
def data_folder_held(data_dir: Path) -> Iterator[None]:
    """Hold ``data_dir`` for this run (an exclusive lock on ``RUN_LOCK_FILE``), or refuse: two runs
    on one folder would start two Azurites on the same files (the last to save its metadata wins)
    and hand back each other's leased messages. The kernel drops the lock when the process dies."""
    with open(data_dir / RUN_LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise click.ClickException(
                f"another `photomosaics run` (pid {holder}) is using {data_dir}: stop it first, "
                "or give this one a folder of its own with --data-dir"
            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


def choose_port(host: str, wanted: int) -> int:
    """``wanted`` if it is free on ``host``, else one the kernel picks (0 always picks)."""
    bind_host = "127.0.0.1" if host in ("", "0.0.0.0", "localhost") else host
    for port in (wanted, 0) if wanted else (0,):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((bind_host, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise click.ClickException(f"no free TCP port on {host}")


def metrics_ports(names: list[str], base: int) -> dict[str, int]:
    """A port per role: ``base``, ``base + 1``... or free ones the kernel picks when ``base`` is 0."""
    return {name: (base + i if base else choose_port("127.0.0.1", 0)) for i, name in enumerate(names)}


def _operator_access(data_dir: Path, port: int) -> dict[str, str]:
    """The web app's metrics port on loopback, and an operator token unless one is configured
    (printed: the person at this terminal is the operator)."""
    from webapp.admin import ADMIN_TOKEN_ENV

    extra = {"PHOTOMOSAICS_METRICS_PORT": str(port)}
    if not os.environ.get(ADMIN_TOKEN_ENV):
        extra[ADMIN_TOKEN_ENV] = read_or_create_secret_key(data_dir, OPERATOR_TOKEN_FILE)
        click.echo(f"operator token (the Queues page): {extra[ADMIN_TOKEN_ENV]}  (in {data_dir / OPERATOR_TOKEN_FILE})")
    return extra


def _announce_when_up(url: str, stop: threading.Event, *, timeout: float = 120.0) -> None:
    """Print the URL once the web app answers (any HTTP status counts)."""
    deadline = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
        except urllib.error.HTTPError:
            pass
        except OSError:
            stop.wait(0.3)
            continue
        click.echo(f"\n  Photo Mosaics is running at {url}   (Ctrl-C stops everything)\n")
        return
    if not stop.is_set():
        click.echo(f"the web app did not answer at {url} within {timeout:.0f} s; see its log above", err=True)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface for the web app.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Web port; a free one is picked if it is busy (0: always pick).",
)
@click.option(
    "--processors",
    type=click.IntRange(min=1),
    default=None,
    callback=process_count,
    help=f"ImageProcessor processes, at most {PROCESSES_PER_CPU} per CPU [default: one per CPU].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Local data folder (Azurite's files, the secret key) [default: .data].",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds children get to finish in-flight work on Ctrl-C.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="First port of the roles' Prometheus endpoints on 127.0.0.1 (0: free ports).",
)
@click.option(
    "--secondary-azurite",
    is_flag=True,
    help="Start a second embedded Azurite as the paired secondary account (failover demo).",
)
def run(
    *,
    host: str,
    port: int,
    processors: int | None,
    data_dir: Path | None,
    grace: float,
    metrics_port: int,
    secondary_azurite: bool,
) -> None:
    """Run everything: Azurite, web app, controller, responder and processors."""
    from dal.blobs.cors import local_origins
    from dal.config import Settings
    from dal.errors import StorageConfigurationError
    from photomosaics.local.accounts import prepare_storage, secondary_account, storage_account
    from photomosaics.local.children import children, hand_back_on_exit, local_channels
    from photomosaics.local.supervisor import Supervisor, supervise
    from workers.runtime.logfmt import configure_logging

    configure_logging(role="run")
    data = (data_dir or Path(Settings.from_env().data_dir)).resolve()
    data.mkdir(parents=True, exist_ok=True)
    count = processors or usable_cpus()
    secret_key = read_or_create_secret_key(data)
    chosen = choose_port(host, port)
    if port and chosen != port:
        click.echo(f"port {port} is busy; using {chosen}")
    with (
        data_folder_held(data),
        storage_account(data) as (connection_string, embedded),
        secondary_account(data, embedded=secondary_azurite) as secondary,
    ):
        # The embedded Azurite lets the app's own page upload library photos to it (CORS); on a
        # real account the operator sets that rule (docs/operations.md, "Direct uploads").
        shown_host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        origins = local_origins(host, chosen) if embedded is not None else None
        try:
            prepare_storage(connection_string, upload_origins=origins)
        except StorageConfigurationError as exc:
            raise click.ClickException(str(exc)) from None
        channels = local_channels(data)
        if secondary:
            from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV

            channels[SECONDARY_CONNECTION_STRING_ENV] = secondary  # every child; the syphon starts too
        web_extra, on_tick = {}, None
        if embedded is not None:
            from dal.availability.storage_status import STATUS_FILE_ENV
            from photomosaics.local.storage_keeper import AzuriteKeeper

            keeper = AzuriteKeeper(
                embedded[0],
                data / "storage-status.json",
                on_restart=functools.partial(prepare_storage, upload_origins=origins),
            )
            web_extra[STATUS_FILE_ENV] = str(keeper.status_file)

            def on_tick() -> None:
                keeper.check()
                embedded[0] = keeper.azurite

        roles = ["controller", "responder", "indexer", *(f"processor-{i + 1}" for i in range(count))]
        ports = metrics_ports([*roles, "web"], metrics_port)
        web_extra.update(_operator_access(data, ports["web"]))
        specs = children(
            connection_string=connection_string,
            secret_key=secret_key,
            host=host,
            port=chosen,
            processors=count,
            shared=channels,
            web_extra=web_extra,
            metrics_ports=ports,
        )
        supervisor = Supervisor(
            specs, grace=grace, on_exit=hand_back_on_exit(connection_string, channels), on_tick=on_tick
        )
        click.echo("metrics: " + ", ".join(f"{name} http://127.0.0.1:{p}/metrics" for name, p in ports.items()))
        stop_announcer = threading.Event()
        announcer = threading.Thread(
            target=_announce_when_up, args=(f"http://{shown_host}:{chosen}/", stop_announcer), daemon=True
        )
        click.echo(f"starting web, controller, responder, indexer and {count} processor(s)")
        try:
            supervise(supervisor, on_ready=announcer.start)
        finally:
            stop_announcer.set()
        click.echo("all processes stopped")
