"""``photomosaics controller|processor|responder|syphon``: the worker roles, one process each.

Every role reads its settings from the environment (``AZURE_STORAGE_CONNECTION_STRING``,
``PHOTOMOSAICS_*``), runs one ``QueueListener`` per queue it consumes and exits 0 after
SIGTERM/SIGINT once in-flight work is finished. ``--burst`` (stop when the queues are empty)
and ``--max-messages`` make a run end by itself, for tests and one-off draining.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import click

if TYPE_CHECKING:
    from workers.runtime.bindings import BoundHandler
    from workers.services import RoleServices


class Companion(Protocol):
    """A role's background part besides its listeners (``workers.controller.hedging.Hedger``)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


_burst = click.option("--burst", is_flag=True, help="Stop once the queues are empty (tests, draining).")
_max_messages = click.option(
    "--max-messages", type=click.IntRange(min=1), default=None, help="Stop after this many messages per queue."
)
_grace = click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to finish in-flight work after SIGTERM before releasing it.",
)


MAX_CONCURRENCY = 64  # messages at once per queue: threads, each holding its message's work


def _concurrency(default: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--concurrency`` (the most handlers at once per queue) and ``--min-concurrency``.

    Between the two the listener is elastic (``workers.runtime.elastic``): it grows with the queue's
    depth and shrinks back when the queue is empty. I/O-bound roles get room to grow; the
    processor renders on a core, so it stays at one (``photomosaics run`` starts one per core).
    """

    def decorate(f: Callable[..., None]) -> Callable[..., None]:
        f = click.option(
            "--min-concurrency",
            type=click.IntRange(1, MAX_CONCURRENCY),
            default=1,
            show_default=True,
            help="Messages handled at once per queue when it is quiet (elastic lower bound).",
        )(f)
        return click.option(
            "--concurrency",
            type=click.IntRange(1, MAX_CONCURRENCY),
            default=default,
            show_default=True,
            help="Most messages handled at once per queue (elastic upper bound).",
        )(f)

    return decorate


def _services_for(role: str) -> RoleServices:
    from dal.availability.failover import secondary_from_env
    from dal.availability.health import check_storage
    from dal.config import Settings, StorageClients
    from dal.errors import StorageConfigurationError
    from photomosaics.local.standby import wait_if_standby
    from workers.runtime.role import configure_role_logging, patiently, storage_from_env
    from workers.services import RoleServices, worker_name

    wait_if_standby()  # a warm standby: imports done, nothing touched yet; start when told
    configure_role_logging(role)
    try:
        settings = Settings.from_env()
        # The paired secondary (PHOTOMOSAICS_SECONDARY_CONNECTION_STRING): sends and uploads fail over to it.
        services = RoleServices(
            storage_from_env(role=role), settings, worker_name(role), secondary=secondary_from_env()
        )
        # A wrong key or account fails here in seconds, not after the worker profile's retries.
        # A throttled account (5xx) is no configuration error: the role starts and its retries wait.
        check_storage(StorageClients(services.storage.connection_string, profile="probe"), throttled_ok=True)
    except (ValueError, StorageConfigurationError) as exc:
        raise click.ClickException(str(exc)) from None
    patiently(services.ensure, role=role, what="creating queues, containers and tables")
    return services


@click.command()
@_burst
@_max_messages
@_concurrency(4)
@_grace
def controller(*, burst: bool, max_messages: int | None, concurrency: int, min_concurrency: int, grace: float) -> None:
    """Run a JobController: slices jobs from imagerequest, stitches from sliceresponse."""
    from workers.controller.controller import JobController
    from workers.controller.hedging import Hedger
    from workers.runtime.bindings import bindings_of

    services = _services_for("controller")
    # Hedged slices (workers.controller.hedging): a thread that sends late slices again; PHOTOMOSAICS_HEDGES_PER_SLICE=0: none.
    try:
        watcher = Hedger(services) if services.settings.hedges_per_slice > 0 else None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    ctl = JobController(services, hedger=watcher)
    _run(
        services,
        "controller",
        bindings_of(ctl),
        concurrency=concurrency,
        min_concurrency=min_concurrency,
        grace=grace,
        burst=burst,
        max_messages=max_messages,
        companions=[watcher] if watcher is not None else [],
    )


@click.command()
@_burst
@_max_messages
@_concurrency(1)
@_grace
def processor(*, burst: bool, max_messages: int | None, concurrency: int, min_concurrency: int, grace: float) -> None:
    """Run an ImageProcessor: renders the slices of slicerequest into mosaics."""
    from dal.admission.render_rates import RateMeter
    from workers.processor.processor import ImageProcessor, limit_blas_threads
    from workers.runtime.bindings import bindings_of

    limit_blas_threads()  # one core's worth per processor: no BLAS threads fighting the others
    services = _services_for("processor")
    meter = RateMeter(services.render_rates, services.name)  # backpressure's measured capacity
    worker = ImageProcessor(services, rate_meter=meter)
    _run(
        services,
        "processor",
        bindings_of(worker),
        concurrency=concurrency,
        min_concurrency=min_concurrency,
        grace=grace,
        burst=burst,
        max_messages=max_messages,
    )


@click.command()
@_burst
@_max_messages
@_concurrency(8)
@_grace
def responder(*, burst: bool, max_messages: int | None, concurrency: int, min_concurrency: int, grace: float) -> None:
    """Run the responder: marks jobs done from imageresponse, deletes jobs from jobcleanup."""
    from workers.responder.cleaner import JobCleaner
    from workers.responder.responder import Responder
    from workers.runtime.bindings import bindings_of

    services = _services_for("responder")
    worker = Responder(services)
    cleaner = JobCleaner(services)
    _run(
        services,
        "responder",
        [*bindings_of(worker), *bindings_of(cleaner)],
        concurrency=concurrency,
        min_concurrency=min_concurrency,
        grace=grace,
        burst=burst,
        max_messages=max_messages,
    )


@click.command()
@_burst
@_max_messages
@_concurrency(2)
@_grace
def indexer(*, burst: bool, max_messages: int | None, concurrency: int, min_concurrency: int, grace: float) -> None:
    """Run an indexer: makes tiles of the photos uploaded into libraries (indexrequest)."""
    from workers.indexer.indexer import Indexer
    from workers.runtime.bindings import bindings_of

    services = _services_for("indexer")
    _run(
        services,
        "indexer",
        bindings_of(Indexer(services)),
        concurrency=concurrency,
        min_concurrency=min_concurrency,
        grace=grace,
        burst=burst,
        max_messages=max_messages,
    )


@click.command()
@click.option("--once", is_flag=True, help="One pass (ping, drain), then exit: tests and manual draining.")
def syphon(*, once: bool) -> None:
    """Run the syphon: pings the primary, moves the secondary's backlog back.

    Needs PHOTOMOSAICS_SECONDARY_CONNECTION_STRING; one instance is enough (two are safe).
    The interval between passes is PHOTOMOSAICS_SYPHON_INTERVAL seconds (60).
    """
    import signal
    import threading

    from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV
    from dal.operations.syphon import Syphon, run_syphon

    services = _services_for("syphon")
    if services.secondary is None:
        raise click.ClickException(f"{SECONDARY_CONNECTION_STRING_ENV} is not set: there is nothing to syphon")
    interval = services.settings.syphon_interval
    if interval <= 0:
        raise click.ClickException(f"PHOTOMOSAICS_SYPHON_INTERVAL must be > 0 seconds, got {interval}")
    worker = Syphon(services, services.secondary)
    if once:
        click.echo(f"moved {worker.run_once()} message(s)")
        return
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # a pass is short: stop after it
        signal.signal(signum, lambda *_: stopping.set())
    run_syphon(worker, interval=interval, stop=stopping.wait)


def _run(
    services: RoleServices,
    role: str,
    bindings: Sequence[BoundHandler],
    *,
    concurrency: int,
    min_concurrency: int,
    grace: float,
    burst: bool,
    max_messages: int | None,
    companions: Sequence[Companion] = (),
) -> None:
    """One ``QueueListener`` per bound handler (``workers.runtime.bindings``); run them as a role.

    ``companions`` (the controller's hedger) start before the listeners and stop
    after they ended, before the process exits.

    Hints (``PHOTOMOSAICS_HINT_DIR``) and the lease journal (``PHOTOMOSAICS_LEASE_DIR``) are
    on when ``photomosaics run`` (or another supervisor) sets them; the lease is the shorter
    of ``PHOTOMOSAICS_LEASE_SECONDS`` (60) and the queue's own default timeout.
    """
    from dal.hints.channel import channel_from_env
    from dal.queues.tracing import configure_tracing
    from workers.failures import poison_hook
    from workers.runtime.leases import LeaseJournal
    from workers.runtime.listener import QueueListener
    from workers.runtime.listener_options import ListenerOptions
    from workers.runtime.observability import metrics_address, serve_role_metrics, timed, traced
    from workers.runtime.role import Role, exit_role, patiently, run_role

    settings = services.settings
    paced = ListenerOptions.from_settings(settings)
    hints, journal = channel_from_env(), LeaseJournal.from_env()
    configure_tracing(f"photomosaics-{role}")  # only when OTEL_* variables ask for it
    queues = [bound.queue(services.queues) for bound in bindings]
    timeouts = patiently(lambda: [queue.timeout for queue in queues], role=role, what="reading queue settings")
    listeners = [
        QueueListener(
            queue,
            traced(timed(bound.handler, role=role, queue=queue.logical_name), queue=queue.logical_name),
            name=f"{role}-{queue.logical_name}",
            options=replace(
                paced,
                concurrency=max(concurrency, min_concurrency),
                min_concurrency=min_concurrency,
                visibility_timeout=min(settings.lease_seconds, timeout),
                grace=grace,
            ),
            hints=hints,
            journal=journal,
            on_poison=None if bound.what is None else poison_hook(services.jobs, actor=services.name, what=bound.what),
        )
        for bound, queue, timeout in zip(bindings, queues, timeouts, strict=True)
    ]
    try:
        serve_role_metrics(role, listeners, address=metrics_address())
    except (ValueError, OSError) as exc:  # a bad or busy port is a start-up error, not a crash later
        raise click.ClickException(f"metrics server: {exc}") from None
    for companion in companions:
        companion.start()
    try:
        code = run_role(Role(role, listeners), burst=burst, max_messages=max_messages)
    finally:
        for companion in companions:
            companion.stop()
    exit_role(code)
