"""``photomosaics web``: the Job Broker web app under gunicorn (settings in webapp/gunicorn_conf.py).

The Flask development server is only used by the tests. Start-up checks the storage
account once and fails loudly when it is unusable. Without ``PHOTOMOSAICS_SECRET_KEY`` a
random key is made for this run, shared by the gunicorn workers (the app is built once in the
master); cookies then do not survive a restart (``photomosaics run`` keeps one in the data
folder). With ``PHOTOMOSAICS_WEB_REPLICAS`` above 1 the key is required: replicas cannot share
a key made at start-up.
"""

from __future__ import annotations

import logging
import os
import secrets
from typing import Any

import click

from photomosaics.commands.counts import PROCESSES_PER_CPU, process_count

log = logging.getLogger(__name__)


def gunicorn_options(
    *, host: str, port: int, workers: int | None, metrics: tuple[str, int] | None = None
) -> dict[str, Any]:
    """The settings of ``webapp.gunicorn_conf`` with the command line's bind and workers."""
    from webapp import gunicorn_conf

    options = {k: v for k, v in vars(gunicorn_conf).items() if not k.startswith("_") and k != "annotations"}
    options["bind"] = [f"{host}:{port}"]
    if metrics is not None:  # operations endpoints without a token (webapp.operator_gate)
        options["bind"].append(f"{metrics[0]}:{metrics[1]}")
    if workers is not None:
        options["workers"] = workers
    return options


def _ensure_demo_library(connection_string: str) -> None:
    from dal.config import Settings, StorageClients
    from photomosaics.render_library import demo_library
    from workers.demo_library import DemoPhotosMissing, ensure_demo_library

    try:
        ensure_demo_library(
            StorageClients(connection_string),
            prefix=Settings.from_env().name_prefix,
            built=lambda: demo_library()[0],
        )
    except DemoPhotosMissing as exc:
        click.echo(f"warning: no demo library: {exc}", err=True)


def _prepare_uploads(connection_string: str) -> None:
    """Check the public Blob endpoint the upload URLs name, and set the account's CORS rule for
    ``PHOTOMOSAICS_UPLOAD_ORIGINS`` (docker compose: the origins a person types); loudly wrong at start."""
    from dal.blobs.cors import parse_origins, set_upload_cors
    from dal.blobs.staging import public_blob_endpoint
    from dal.config import Settings, StorageClients

    settings = Settings.from_env()
    storage = StorageClients(connection_string)
    try:
        if settings.public_blob_endpoint:
            public = public_blob_endpoint(settings.public_blob_endpoint, storage)
            click.echo(f"upload URLs name the Blob endpoint {public}", err=True)
        origins = parse_origins(settings.upload_origins) if settings.upload_origins else []
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if origins:
        set_upload_cors(storage, origins)
        click.echo(f"Blob CORS rule set for uploads from {', '.join(origins)}", err=True)


def _multiprocess_metrics() -> None:
    """Several gunicorn workers share /metrics through files in PROMETHEUS_MULTIPROC_DIR.

    prometheus_client picks its value store when it is first imported, so the folder must be
    set before that (here, before the app is built); a fresh one per run, emptied at exit.
    """
    import atexit
    import shutil
    import sys
    import tempfile

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    if "prometheus_client" in sys.modules:  # too late to switch: each worker reports alone
        click.echo("warning: prometheus_client imported early; /metrics covers one worker", err=True)
        return
    folder = tempfile.mkdtemp(prefix="photomosaics-metrics-")
    master = os.getpid()

    # Forked workers inherit atexit hooks: only the master (the last to exit) removes it.
    def remove_folder() -> None:
        if os.getpid() == master:
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove_folder)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0 in a container).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="TCP port.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    callback=process_count,
    help=f"Worker processes, at most {PROCESSES_PER_CPU} per CPU [default: from gunicorn_conf].",
)
@click.option(
    "--demo-library/--no-demo-library",
    default=False,
    show_default=True,
    help="Create the demo tile library at start-up if it is missing (needs scikit-image).",
)
def web(*, host: str, port: int, workers: int | None, demo_library: bool) -> None:
    """Serve the web app and its JSON API with gunicorn."""
    _multiprocess_metrics()
    from gunicorn.app.base import BaseApplication

    from dal.availability.health import check_storage
    from dal.config import CONNECTION_STRING_ENV, Settings, StorageClients
    from dal.connection_strings import describe_connection_string
    from dal.errors import StorageConfigurationError
    from webapp import SECRET_KEY_ENV, create_app
    from webapp.ingress import check_secret_key, required_secret_key

    connection_string = Settings.from_env().connection_string
    if not connection_string:
        raise click.ClickException(
            f"{CONNECTION_STRING_ENV} is not set: start everything with `photomosaics run`, "
            "or point the web app at a storage account"
        )
    from workers.runtime.observability import metrics_address

    try:
        metrics = metrics_address()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    options = gunicorn_options(host=host, port=port, workers=workers, metrics=metrics)
    replicas = Settings.from_env().web_replicas
    if not os.environ.get(SECRET_KEY_ENV):
        if required_secret_key(replicas=replicas, preload=bool(options.get("preload_app"))):
            raise click.ClickException(
                f"{SECRET_KEY_ENV} is required: {replicas} web replicas serve this deployment "
                "(PHOTOMOSAICS_WEB_REPLICAS), and a key made at start-up would differ in each, so clients "
                "would lose their jobs between them; make one with "
                "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        click.echo(f"warning: {SECRET_KEY_ENV} is not set; using a random key for this run", err=True)
        os.environ[SECRET_KEY_ENV] = secrets.token_urlsafe(32)
    try:
        check_secret_key(os.environ[SECRET_KEY_ENV])
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        # A throttled account (5xx) is there: the app starts and answers 503 while it lasts.
        check_storage(StorageClients(connection_string, profile="probe"), throttled_ok=True)
    except StorageConfigurationError as exc:
        raise click.ClickException(str(exc)) from None
    _prepare_uploads(connection_string)
    if demo_library:
        _ensure_demo_library(connection_string)
    app = create_app()

    class _Server(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                if key in self.cfg.settings:
                    self.cfg.set(key, value)

        def load(self) -> Any:
            return app

    click.echo(f"web app on http://{host}:{port} ({describe_connection_string(connection_string)})", err=True)
    _Server().run()
