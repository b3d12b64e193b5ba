"""Every gunicorn setting of ``photomosaics web`` in one place (``--host``, ``--port`` and
``--workers`` on the command line override ``bind`` and ``workers``).

Threaded workers (``gthread``): a Server-Sent Events stream holds one thread while it is
open, not a whole worker process, and blob uploads and downloads wait on I/O, where threads
are enough. Each worker process has its own storage clients and preview cache.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from dal.queues.tracing import configure_tracing
from webapp.streams import stop_streams

bind = "127.0.0.1:8080"
workers = 2
worker_class = "gthread"
threads = 16
# A slow upload or a large download may take a while; SSE streams send a comment every 15 s,
# which keeps gthread's worker heartbeat (not the request) alive.
timeout = 120
graceful_timeout = 20
keepalive = 5
# Build the app once in the master: a configuration error stops start-up instead of every worker.
preload_app = True
# The largest upload plus form fields is enforced by the app (413); gunicorn's own limits are on
# the request line and headers only.
limit_request_line = 8190
accesslog = "-"
errorlog = "-"
loglevel = "info"
# Request line and status, never a cookie or a header that could carry a secret.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
# gunicorn's own trust of X-Forwarded-Proto (wsgi.url_scheme) from a local proxy; the client's
# address and scheme behind an ingress come from PHOTOMOSAICS_TRUSTED_PROXIES (webapp.ingress).
forwarded_allow_ips = "127.0.0.1"
# gunicorn >= 25 opens a control socket in ~/.gunicorn by default; several instances on one
# machine (tests, `make run`) would fight over it, and the supervisor or compose manages us.
control_socket_disable = True


def child_exit(server: Any, worker: Any) -> None:
    """A worker's Prometheus files stay (its counters still count); its live gauges go."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker: Any) -> None:
    """SIGTERM ends the worker's event streams at once with a reconnect hint (``webapp.streams``),
    then stops the worker as gunicorn does: open streams no longer hold it until the graceful
    timeout. gunicorn registered its handler before this hook, so ours replaces it and calls it."""
    graceful = worker.handle_exit

    def on_term(signum: int, frame: Any) -> None:
        stop_streams()
        graceful(signum, frame)

    signal.signal(signal.SIGTERM, on_term)
    signal.siginterrupt(signal.SIGTERM, False)  # as gunicorn had it: a SIGTERM does not interrupt a system call


def post_fork(server: Any, worker: Any) -> None:
    """Tracing starts in each worker: the span exporter's thread does not survive a fork."""

    configure_tracing("photomosaics-web")
