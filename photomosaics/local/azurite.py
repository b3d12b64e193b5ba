"""The embedded Azurite: the storage emulator from the repo's own ``node_modules``.

``Azurite`` starts it on free loopback ports (port 0: the kernel picks), waits until blob,
queue and table all answer HTTP, and hands back the connection string. An Azurite on a data
folder starts again on the ports it had there last time (``PORTS_FILE``), while they are free:
the messages in its queues name blobs by their URL, address included, so a job or an index
request queued before a restart is still this account's after it. ``stop`` ends it
with SIGTERM, then SIGKILL after a grace period. It runs in its own session, so the
terminal's Ctrl-C reaches the Python parent first (which stops the workers, then Azurite,
in that order), and it has a parent-death signal, so even a SIGKILLed parent leaves no
orphan ``node`` behind.

``embedded_or_configured`` is what the roles use: when ``AZURE_STORAGE_CONNECTION_STRING``
is set, nothing is started and that account is used.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from dal.config import CONNECTION_STRING_ENV, Settings
from dal.connection_strings import azurite_connection_string, expand_connection_string
from dal.errors import PhotoMosaicsError
from photomosaics.local import node_runtime

_LISTENING = re.compile(r"Azurite (Blob|Queue|Table) service is successfully listening at https?://[^:]+:(\d+)")
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Written into the data folder of a running on-disk Azurite: its connection string.
ANNOUNCEMENT_FILE = "photomosaics-connection.txt"
# Kept in the data folder: the blob, queue and table ports its Azurite last listened on.
PORTS_FILE = "photomosaics-ports.json"
_SERVICES = ("Blob", "Queue", "Table")


class AzuriteError(PhotoMosaicsError, RuntimeError):
    """Azurite is missing, did not start, or stopped answering."""


def find_azurite_script() -> Path:
    """The Azurite entry point installed by ``npm ci`` in the project (or the cwd)."""
    candidates = [_PROJECT_ROOT, Path.cwd()]
    for root in candidates:
        script = root / "node_modules" / "azurite" / "dist" / "src" / "azurite.js"
        if script.is_file():
            return script
    raise AzuriteError(
        "Azurite is not installed: run `make install` (npm ci) in the project folder, "
        f"or set {CONNECTION_STRING_ENV} to use another storage account"
    )


def _bindable(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (with SO_REUSEADDR, as Node's does: a
    port whose old connections linger in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _die_with_parent_of(parent: int) -> Callable[[], None]:
    """A preexec_fn: SIGTERM the child when the thread that forked it dies (PR_SET_PDEATHSIG).

    The death signal follows the forking *thread*, so start Azurite from a thread that lives
    as long as the process (the main thread). If the parent died before prctl ran, the
    signal would never come: exit at once instead.
    """

    def arm() -> None:  # runs in the child between fork and exec
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return arm


class Azurite:
    """One Azurite process serving blob, queue and table on loopback.

    Parameters are keyword-only. ``location`` is a folder for on-disk persistence; None
    keeps everything in memory (the tests' choice: nothing to clean up).
    """

    def __init__(
        self,
        *,
        location: str | Path | None = None,
        host: str = "127.0.0.1",
        ports: tuple[int, int, int] = (0, 0, 0),
        startup_timeout: float = 30.0,
    ) -> None:
        self.location = Path(location) if location is not None else None
        self.host = host
        self.requested_ports = ports
        self.startup_timeout = startup_timeout
        self.ports: dict[str, int] = {}
        self._process: subprocess.Popen[str] | None = None
        self._output: list[str] = []
        self._reader: threading.Thread | None = None
        self.runtime: node_runtime.NodeRuntime | None = None  # the Node.js it runs on, once started
        # The data folder's last ports, when they were taken and it started on others: work
        # queued before naming them is then another address's (the caller says so).
        self.moved_from: tuple[int, int, int] | None = None

    @property
    def connection_string(self) -> str:
        if len(self.ports) != 3:
            raise AzuriteError("Azurite is not running")
        return azurite_connection_string(self.host, self.ports["Blob"], self.ports["Queue"], self.ports["Table"])

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def exit_code(self) -> int | None:
        """None while it runs (or was never started); its exit code once it died by itself."""
        return self._process.poll() if self._process is not None else None

    def command(self) -> list[str]:
        runtime = node_runtime.find()
        if runtime is None:
            raise AzuriteError(
                f"no Node.js {node_runtime.required_major()}+ for Azurite: run `make install` "
                "(it installs one from PyPI into .venv when the system has none)"
            )
        self.runtime = runtime
        blob, queue, table = self.requested_ports
        cmd = [
            str(runtime.node),
            str(find_azurite_script()),
            "--silent",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--blobHost",
            self.host,
            "--blobPort",
            str(blob),
            "--queueHost",
            self.host,
            "--queuePort",
            str(queue),
            "--tableHost",
            self.host,
            "--tablePort",
            str(table),
        ]
        if self.location is None:
            cmd.append("--inMemoryPersistence")
        else:
            self.location.mkdir(parents=True, exist_ok=True)
            cmd += ["--location", str(self.location)]
        return cmd

    def start(self) -> str:
        """Start Azurite and return its connection string once all three services answer.

        On a data folder with no ports asked for, it asks for the folder's last ones
        (``PORTS_FILE``); if one of them is taken, it starts on free ones and says so in
        ``moved_from``."""
        if self._process is not None:
            return self.connection_string
        kept = self._kept_ports() if self.requested_ports == (0, 0, 0) else None
        if kept is None:
            return self._start()
        if not all(_bindable(self.host, port) for port in kept):
            self.moved_from = kept
            return self._start()
        self.requested_ports = kept
        try:
            return self._start()
        except AzuriteError:
            if not any("EADDRINUSE" in line for line in self._output):
                raise
            self.requested_ports, self.moved_from, self._output = (0, 0, 0), kept, []
            return self._start()  # taken between the check and Azurite's listen

    def _kept_ports(self) -> tuple[int, int, int] | None:
        """The data folder's last ports, or None (in memory, a first run, or an unreadable file)."""
        if self.location is None:
            return None
        try:
            known = json.loads((self.location / PORTS_FILE).read_text())
            ports = tuple(int(known[service.lower()]) for service in _SERVICES)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not all(0 < port < 65536 for port in ports):
            return None
        return ports[0], ports[1], ports[2]

    def _start(self) -> str:
        self._process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent_of(os.getpid()),
        )
        self._reader = threading.Thread(target=self._read_output, name="azurite-output", daemon=True)
        self._reader.start()
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        if self.location is not None:
            # Other commands on the same data folder (`library`, `queues`) connect to this
            # Azurite instead of starting a second one on files it is using.
            self._announcement().write_text(self.connection_string)
            ports = {service.lower(): self.ports[service] for service in _SERVICES}
            (self.location / PORTS_FILE).write_text(json.dumps(ports) + "\n")
        return self.connection_string

    def _announcement(self) -> Path:
        assert self.location is not None
        return self.location / ANNOUNCEMENT_FILE

    def _read_output(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._output.append(line.rstrip())
            if match := _LISTENING.search(line):
                self.ports[match.group(1)] = int(match.group(2))

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while len(self.ports) < 3:
            if self._process is not None and self._process.poll() is not None:
                raise AzuriteError(f"Azurite exited with code {self._process.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AzuriteError(f"Azurite did not start within {self.startup_timeout:.0f} s:\n{self.output()}")
            time.sleep(0.05)
        for service, port in self.ports.items():
            self._wait_for_http(service, port, deadline)

    def _wait_for_http(self, service: str, port: int, deadline: float) -> None:
        url = f"http://{self.host}:{port}/devstoreaccount1?comp=list"
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # any HTTP answer (403 without a signature) means it is serving
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise AzuriteError(f"Azurite {service} on port {port} does not answer: {exc}") from exc
                time.sleep(0.05)

    def output(self) -> str:
        return "\n".join(self._output[-40:])

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the Azurite process group, SIGKILL it after ``grace`` seconds."""
        process, self._process = self._process, None
        self.ports = {}
        if process is None:
            return
        if self.location is not None:
            self._announcement().unlink(missing_ok=True)
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=grace)
        if self._reader is not None:
            self._reader.join(timeout=grace)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> Azurite:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def embedded_or_configured(
    *, location: str | Path | None = None, environ: dict[str, str] | None = None
) -> Iterator[str]:
    """Yield the storage to use for a block: configured, already running, or started here.

    In order: ``AZURE_STORAGE_CONNECTION_STRING``; the Azurite that another process (say
    ``photomosaics run``) is running on ``location``, if it answers; a new embedded Azurite.
    """
    configured = Settings.from_env(environ).connection_string
    if configured:
        yield expand_connection_string(configured)
        return
    running = _running_on(Path(location)) if location is not None else None
    if running is not None:
        yield running
        return
    with Azurite(location=location) as azurite:
        yield azurite.connection_string


def _running_on(location: Path) -> str | None:
    """The connection string of a live Azurite announced in ``location``, else None."""
    try:
        connection_string = (location / ANNOUNCEMENT_FILE).read_text().strip()
        blob_endpoint = dict(part.split("=", 1) for part in connection_string.split(";") if "=" in part)["BlobEndpoint"]
        urllib.request.urlopen(f"{blob_endpoint}?comp=list", timeout=2).close()
    except urllib.error.HTTPError:
        return connection_string  # it answered (403 without a signature): it is serving
    except (OSError, KeyError, ValueError):
        return None  # no file, or a stale one left by a killed run
    return connection_string
