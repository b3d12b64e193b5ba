"""The HTTP environment of a storage client (proxies, CA bundle), read once, not per request.

With its default ``trust_env``, requests reads the environment again for every request it
sends: it walks ``os.environ`` for proxy variables, checks ``NO_PROXY`` against the URL and
looks for a CA bundle and a ``.netrc``. The cost grows with the environment, and a role polls
its queues all day. An empty queue receive took 1.32 ms of client CPU with 36 environment
variables, and 1.14 ms with them read once. With 196 variables (a Kubernetes pod gets several
for every service in its namespace) it took 1.79 ms against 1.21 ms (``python -m benchmarks
client_cpu``).

So each client reads the environment once, for its own endpoint, with requests' own
functions, and sends without reading it again. A proxy, ``NO_PROXY`` and
``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` mean what they meant before. What changes is
that the environment is read when a client is made, not while it runs.
"""

from __future__ import annotations

import os
from typing import Any

from dal.connection_strings import service_endpoint


def read_once(endpoint: str) -> dict[str, Any]:
    """Azure SDK client keywords that send to ``endpoint`` as the environment says now."""
    from requests.utils import get_environ_proxies

    settings: dict[str, Any] = {"use_env_settings": False}
    proxies = get_environ_proxies(endpoint)  # {} where NO_PROXY covers the endpoint's host
    if proxies:
        settings["proxies"] = proxies
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        settings["connection_verify"] = bundle
    return settings


def for_service(connection_string: str, service: str) -> dict[str, Any]:
    """``read_once`` for the ``service`` endpoint (blob, queue, table) of a connection string."""
    return read_once(service_endpoint(connection_string, service))
