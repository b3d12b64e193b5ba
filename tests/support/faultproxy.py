"""A fault-injecting HTTP proxy between the app and Azurite (a test part, loopback only).

A real storage account cannot be made to throttle on demand, so this proxy stands in for
the throttled front end: it forwards requests to one upstream (one proxy per service port),
and for a share of them (``rate``) while ``active`` answers instead, as Azure does:

- ``503``: 503 ServerBusy ("Operations per second is over the account limit.")
- ``500``: 500 OperationTimedOut
- ``reset``: closes the connection without an answer (RST), before forwarding
- ``lost``: forwards, then closes the connection without passing the answer on (RST): the
  server ran the request, the client cannot know it
- ``slow``: waits ``slow_seconds``, then forwards

``max_faults`` stops injecting after that many (one reset, then a healthy server).
``paths`` narrows the faults to requests whose path holds one of its texts (the one blob an
upload failure should hit: ``.dzi.zip``); every other request is forwarded untouched.
Injected faults other than ``lost`` never reach Azurite, so a faulted request changed
nothing: what the app then does is all its retry policy's doing. ``counts`` says what was injected.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from dal.connection_strings import azurite_connection_string, expand_connection_string

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
}

_BODIES = {
    "503": (503, "ServerBusy", "Operations per second is over the account limit."),
    "500": (500, "OperationTimedOut", "The operation could not be completed within the permitted time."),
}


class FaultProxy:
    """One listening port forwarding to ``upstream_port``; faults chosen per request."""

    def __init__(
        self,
        upstream_port: int,
        *,
        faults: dict[str, float] | None = None,
        slow_seconds: float = 2.0,
        seed: int = 1,
        paths: tuple[str, ...] = (),
        max_faults: int | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.max_faults = max_faults  # after this many faults, forward everything
        self.faults = dict(faults or {})  # kind -> share of requests, e.g. {"503": 0.2}
        self.paths = paths
        self.slow_seconds = slow_seconds
        self.active = threading.Event()
        self.counts: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._choose(self.path)
                if fault in _BODIES:
                    status, code, message = _BODIES[fault]
                    payload = (
                        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
                        f"<Message>{message}</Message></Error>"
                    ).encode()
                    self.send_response(status, message)
                    self.send_header("x-ms-error-code", code)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if fault == "slow":
                    time.sleep(proxy.slow_seconds)
                if fault in ("reset", "lost"):
                    if fault == "lost":
                        self._forward(body, answer=False)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                self._forward(body)

            def _forward(self, body: bytes, *, answer: bool = True) -> None:
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    if not answer:
                        return
                    self.send_response(response.status, response.reason)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_MERGE = do_PATCH = do_OPTIONS = _any

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # clients drop connections (and we reset some): not worth a traceback

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _choose(self, path: str) -> str | None:
        with self._lock:
            self.counts["requests"] += 1
            if not self.active.is_set() or (self.paths and not any(part in path for part in self.paths)):
                return None
            injected = sum(self.counts[kind] for kind in self.faults)
            if self.max_faults is not None and injected >= self.max_faults:
                return None
            roll = self._random.random()
            for kind, share in self.faults.items():
                if roll < share:
                    self.counts[kind] += 1
                    return kind
                roll -= share
            return None

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FaultyAccount:
    """Three proxies (blob, queue, table) in front of an Azurite; ``connection_string`` goes through them."""

    def __init__(self, connection_string: str, **kwargs: object) -> None:
        parts = dict(p.split("=", 1) for p in expand_connection_string(connection_string).strip(";").split(";"))
        ports = [urlsplit(parts[f"{s}Endpoint"]).port for s in ("Blob", "Queue", "Table")]
        self.proxies = [
            FaultProxy(int(port or 0), seed=n, **kwargs).start()  # type: ignore[arg-type]
            for n, port in enumerate(ports)
        ]
        self.connection_string = azurite_connection_string("127.0.0.1", *(p.port for p in self.proxies))
        self._upstream_blob = f"127.0.0.1:{ports[0]}"

    def through(self, url: str) -> str:
        """A blob URL of the upstream account, as seen through the proxy."""
        return url.replace(self._upstream_blob, f"127.0.0.1:{self.proxies[0].port}", 1)

    def upstream(self, url: str) -> str:
        """A blob URL seen through the proxy, as the upstream account names it (``through``'s inverse)."""
        return url.replace(f"127.0.0.1:{self.proxies[0].port}", self._upstream_blob, 1)

    def set_active(self, active: bool) -> None:
        for proxy in self.proxies:
            (proxy.active.set if active else proxy.active.clear)()

    def counts(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for proxy in self.proxies:
            total.update(proxy.counts)
        return total

    def stop(self) -> None:
        for proxy in self.proxies:
            proxy.stop()


@contextmanager
def faulty_account(connection_string: str, **kwargs: object) -> Iterator[FaultyAccount]:
    account = FaultyAccount(connection_string, **kwargs)
    try:
        yield account
    finally:
        account.stop()
