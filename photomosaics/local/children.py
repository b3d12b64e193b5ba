"""The child processes of a local run: each role's command line and environment, the hint and
lease folders they share, and what the supervisor does when one dies (``hand_back_on_exit``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV
from dal.config import CONNECTION_STRING_ENV, Settings, StorageClients
from dal.hints.channel import HINT_DIR_ENV, HINTS_URL_ENV, make_channel, short_hint_dir
from dal.queues.accessor import QueueAccessor
from photomosaics.local.supervisor import ChildSpec
from workers.runtime.leases import LEASE_DIR_ENV, hand_back

log = logging.getLogger(__name__)


def photomosaics_argv() -> list[str]:
    """How to start our own console script from a child process (same interpreter, same venv)."""
    script = Path(sys.executable).with_name("photomosaics")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from photomosaics.cli import main; main()"]


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


def hint_folder(data: Path) -> Path:
    """The hint folder of a run on the data folder ``data`` (resolved, as ``run`` resolves it)."""
    return short_hint_dir(data / "hints")


def local_channels(data: Path) -> dict[str, str]:
    """The hint folder and the lease folder every child of this machine shares."""
    hint_dir = hint_folder(data)
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
