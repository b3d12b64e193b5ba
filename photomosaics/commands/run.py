"""``photomosaics run``: the whole application on one machine (what ``make run`` calls).

In order: the data folder (``.data/``), the embedded Azurite with on-disk persistence in
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
(``photomosaics.local.storage_keeper``), with ``/healthz`` told what happened.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from photomosaics.local.supervisor import ChildSpec

log = logging.getLogger(__name__)

SECRET_KEY_FILE = "secret_key"
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


def photomosaics_argv() -> list[str]:
    """How to start our own console script from a child process (same interpreter, same venv)."""
    script = Path(sys.executable).with_name("photomosaics")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from photomosaics.cli import main; main()"]


@contextlib.contextmanager
def storage_account(data_dir: Path) -> Iterator[tuple[str, Any]]:
    """The configured account (and None), or an embedded Azurite persisting in ``<data_dir>/azurite``."""
    from dal.config import CONNECTION_STRING_ENV, Settings, expand_connection_string
    from photomosaics.local.azurite import Azurite, AzuriteError

    configured = Settings.from_env().connection_string
    if configured:
        click.echo(f"using the storage account from {CONNECTION_STRING_ENV}")
        yield expand_connection_string(configured), None
        return
    azurite = Azurite(location=data_dir / "azurite")
    try:
        connection_string = azurite.start()
    except AzuriteError as exc:
        raise click.ClickException(str(exc)) from None
    node = azurite.runtime.describe() if azurite.runtime else "Node.js"
    click.echo(f"storage: embedded Azurite (pid {azurite.pid}) on {node}, data in {data_dir / 'azurite'}")
    holder = [azurite]  # the keeper may replace it with a restarted one
    try:
        yield connection_string, holder
    finally:
        holder[0].stop()
        click.echo("Azurite stopped")


@contextlib.contextmanager
def secondary_account(data_dir: Path, *, embedded: bool) -> Iterator[str | None]:
    """The paired secondary account (dal.availability.failover): configured, a second embedded Azurite, or none."""
    from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV
    from photomosaics.local.azurite import Azurite, AzuriteError

    configured = os.environ.get(SECONDARY_CONNECTION_STRING_ENV, "").strip()
    if configured or not embedded:
        yield configured or None
        return
    azurite = Azurite(location=data_dir / "azurite-secondary")
    try:
        connection_string = azurite.start()
    except AzuriteError as exc:
        raise click.ClickException(f"secondary account: {exc}") from None
    click.echo(f"secondary storage: embedded Azurite (pid {azurite.pid}), data in {data_dir / 'azurite-secondary'}")
    try:
        yield connection_string
    finally:
        azurite.stop()


def prepare_storage(connection_string: str, *, upload_origin: str | None = None) -> None:
    """Queues (with metadata), containers, tables and the demo library, where missing; with
    ``upload_origin`` (the embedded Azurite), the Blob service's CORS rule that lets the web
    page at that origin upload photos straight to storage (``dal.blobs.cors``).

    Runs at start-up and again after the embedded Azurite restarts (``AzuriteKeeper``), so
    ``Stores.ensure`` is the one list of what the app needs to exist."""
    from dal.availability.health import check_storage
    from dal.blobs.cors import set_upload_cors
    from dal.config import Settings, StorageClients
    from dal.stores import Stores
    from workers.demo_library import ensure_demo_library

    settings = Settings.from_env()
    prefix = settings.name_prefix
    check_storage(StorageClients(connection_string, profile="probe"))
    storage = StorageClients(connection_string, profile="worker")
    Stores(storage, settings).ensure()
    if upload_origin is not None:
        set_upload_cors(storage, upload_origin)
    started = time.monotonic()
    ensure_demo_library(storage, prefix=prefix)
    if time.monotonic() - started > 1:
        click.echo(f"demo tile library created in {time.monotonic() - started:.0f} s")


def children(
    *,
    connection_string: str,
    secret_key: str,
    host: str,
    port: int,
    processors: int,
    shared: dict[str, str] | None = None,
    web_extra: dict[str, str] | None = None,
    metrics_ports: dict[str, int] | None = None,
) -> list[ChildSpec]:
    from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV
    from dal.config import CONNECTION_STRING_ENV
    from photomosaics.local.supervisor import ChildSpec

    base = photomosaics_argv()
    env = {CONNECTION_STRING_ENV: connection_string, **(shared or {})}
    web_env = {**env, "PHOTOMOSAICS_SECRET_KEY": secret_key, "FLASK_SECRET_KEY": secret_key, **(web_extra or {})}
    ports = metrics_ports or {}

    def role_env(name: str) -> dict[str, str]:  # each role serves /metrics and /healthz on a loopback port
        return {**env, "PHOTOMOSAICS_METRICS_PORT": str(ports[name])} if name in ports else env

    specs = [
        ChildSpec(name="web", argv=[*base, "web", "--host", host, "--port", str(port)], env=web_env),
        # One of each: a warm standby takes over at once when it dies (photomosaics.local.standby).
        ChildSpec(name="controller", argv=[*base, "controller"], env=role_env("controller"), standby=True),
        ChildSpec(name="responder", argv=[*base, "responder"], env=role_env("responder"), standby=True),
        # Library photos uploaded straight to storage: decoded, cropped and hashed here (workers.indexer).
        ChildSpec(name="indexer", argv=[*base, "indexer"], env=role_env("indexer")),
    ]
    specs += [
        ChildSpec(name=f"processor-{i + 1}", argv=[*base, "processor"], env=role_env(f"processor-{i + 1}"))
        for i in range(processors)
    ]
    if env.get(SECONDARY_CONNECTION_STRING_ENV) or os.environ.get(SECONDARY_CONNECTION_STRING_ENV):
        # A paired secondary account (dal.availability.failover): one syphon moves its backlog back (dal.operations.syphon).
        specs.append(ChildSpec(name="syphon", argv=[*base, "syphon"], env=env))
    return specs


def local_channels(data: Path) -> dict[str, str]:
    """The hint folder and the lease folder every child of this machine shares."""
    from dal.hints.channel import HINT_DIR_ENV, short_hint_dir
    from workers.runtime.leases import LEASE_DIR_ENV

    hint_dir = short_hint_dir(data / "hints")
    lease_dir = data / "leases"
    hint_dir.mkdir(parents=True, exist_ok=True)
    lease_dir.mkdir(parents=True, exist_ok=True)
    return {HINT_DIR_ENV: str(hint_dir), LEASE_DIR_ENV: str(lease_dir)}


def hand_back_on_exit(
    connection_string: str,
    channels: dict[str, str],
    *,
    hints_url: str | None = None,
    lease_seconds: float | None = None,
) -> Callable[[str, int, int | None], None]:
    """The supervisor's ``on_exit``: hand back what a dead child held, and announce it.

    A child killed between a receive and its lease journal's write (a few milliseconds) held
    messages nobody can hand back: they come back by themselves when their lease runs out,
    unannounced, and hint-covered listeners would find them only at their safety-net poll
    (60 s). So once the lease (``lease_seconds``, else ``PHOTOMOSAICS_LEASE_SECONDS``) has run
    out, every work queue is announced once more ("poll now": one receive per listener).

    Also hands back what the children of an earlier, killed ``photomosaics run`` left in the
    lease folder (their pids are gone): at start-up, before any child runs. ``hints_url``: the
    shared hint server (None: ``PHOTOMOSAICS_HINTS_URL``).
    """
    from dal.config import Settings, StorageClients
    from dal.hints.channel import HINT_DIR_ENV, HINTS_URL_ENV, make_channel
    from dal.queues.accessor import QueueAccessor
    from workers.runtime.leases import LEASE_DIR_ENV, hand_back

    lease_dir = Path(channels[LEASE_DIR_ENV])
    storage = StorageClients(connection_string, profile="probe")
    settings = Settings.from_env()
    lease = settings.lease_seconds if lease_seconds is None else lease_seconds
    # This machine's folder, and the shared server when PHOTOMOSAICS_HINTS_URL names one.
    url = os.environ.get(HINTS_URL_ENV, "") if hints_url is None else hints_url
    channel = make_channel(folder=channels[HINT_DIR_ENV], url=url.strip(), namespace=storage.account_name)
    assert channel is not None  # the folder alone makes one
    queue_service = storage.queue_service
    queues = QueueAccessor(storage, settings=settings, prefix=settings.name_prefix)
    names = sorted({queue.hint_name for queue in queues.monitored()})

    def announce_all() -> None:
        for name in names:
            with contextlib.suppress(Exception):  # a hint is an optimisation: the safety net stays
                channel.publish(name)

    def on_exit(name: str, pid: int, code: int | None) -> None:
        handed = hand_back(lease_dir, pid, queue_service, announce=channel.publish)
        if handed:
            log.warning("%s (pid %s) died holding %d message(s): handed back at once", name, pid, handed)
        timer = threading.Timer(lease + 1.0, announce_all)
        timer.daemon = True
        timer.start()

    for leftover in lease_dir.glob("*.json"):
        with contextlib.suppress(ValueError):
            pid = int(leftover.stem)
            if not Path(f"/proc/{pid}").exists():
                on_exit("an earlier run's child", pid, None)
    return on_exit


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
    "--processors", type=click.IntRange(min=1), default=None, help="ImageProcessor processes [default: CPU count]."
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
    from dal.config import Settings
    from dal.errors import StorageConfigurationError
    from photomosaics.local.supervisor import Supervisor, supervise
    from workers.runtime.logfmt import configure_logging

    configure_logging(role="run")
    data = (data_dir or Path(Settings.from_env().data_dir)).resolve()
    data.mkdir(parents=True, exist_ok=True)
    count = processors or os.cpu_count() or 1
    secret_key = read_or_create_secret_key(data)
    chosen = choose_port(host, port)
    if port and chosen != port:
        click.echo(f"port {port} is busy; using {chosen}")
    with (
        storage_account(data) as (connection_string, embedded),
        secondary_account(data, embedded=secondary_azurite) as secondary,
    ):
        # The embedded Azurite lets the app's own page upload library photos to it (CORS); on a
        # real account the operator sets that rule (docs/operations.md, "Direct uploads").
        shown_host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        upload_origin = f"http://{shown_host}:{chosen}" if embedded is not None else None
        try:
            prepare_storage(connection_string, upload_origin=upload_origin)
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
                on_restart=functools.partial(prepare_storage, upload_origin=upload_origin),
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
