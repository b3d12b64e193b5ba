"""Each storage client reads the HTTP environment once, when it is made (``dal.http_environment``).

A real forward proxy on loopback stands between the clients and the session's Azurite. It
forwards every request it is sent and records which service port it was meant for. That is
how a person behind a corporate proxy reaches Azure Storage: ``HTTP_PROXY`` and
``HTTPS_PROXY``, with ``NO_PROXY`` for the hosts reached directly.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from dal.config import StorageClients
from dal.connection_strings import service_endpoint
from dal.http_environment import read_once

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "content-length"}


class ForwardProxy(ThreadingHTTPServer):
    """An HTTP forward proxy (absolute-form request lines), loopback only: ``ports`` lists the
    port each request it forwarded was meant for."""

    daemon_threads = True

    def __init__(self) -> None:
        self.ports: list[int] = []
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ForwardProxy

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        target = urlsplit(self.path)
        assert target.hostname == "127.0.0.1" and target.port, f"not a proxy request: {self.path}"
        self.server.ports.append(target.port)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream.request(self.command, path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        self.send_response(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_MERGE = do_OPTIONS = _forward


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ForwardProxy]:
    for name in (
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "no_proxy",
        "NO_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    server = ForwardProxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _use_every_service(clients: StorageClients, name: str) -> None:
    """A queue message, a blob and a table entity written and read back."""
    queue = clients.queue_service.get_queue_client(name)
    queue.create_queue()
    queue.send_message("hello")
    assert [m.content for m in queue.receive_messages()] == ["hello"]
    container = clients.blob_service.get_container_client(name)
    container.create_container()
    container.upload_blob("b", b"bytes")
    assert container.download_blob("b").readall() == b"bytes"
    table = clients.table_service.create_table_if_not_exists(name)
    table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "value": 1})
    assert table.get_entity("p", "r")["value"] == 1


def _ports(connection_string: str) -> set[int]:
    return {urlsplit(service_endpoint(connection_string, s)).port or 0 for s in ("blob", "queue", "table")}


def test_every_service_goes_through_the_proxy_the_environment_names(
    azurite_connection_string: str, proxy: ForwardProxy, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    _use_every_service(StorageClients(azurite_connection_string, profile="probe"), f"px{unique}")
    assert set(proxy.ports) == _ports(azurite_connection_string)


def test_no_proxy_reaches_its_hosts_directly(
    azurite_connection_string: str, proxy: ForwardProxy, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    _use_every_service(StorageClients(azurite_connection_string, profile="probe"), f"np{unique}")
    assert proxy.ports == []


def test_the_environment_is_read_when_a_client_is_made_not_on_each_request(
    azurite_connection_string: str, proxy: ForwardProxy, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = StorageClients(azurite_connection_string, profile="probe")
    queue = before.queue_service.get_queue_client(f"rd{unique}")
    queue.create_queue()
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    queue.send_message("sent directly")  # this client read an environment without a proxy
    assert proxy.ports == []
    after = StorageClients(azurite_connection_string, profile="probe")
    assert [m.content for m in after.queue_service.get_queue_client(f"rd{unique}").receive_messages()] == [
        "sent directly"
    ]
    assert set(proxy.ports) == {urlsplit(service_endpoint(azurite_connection_string, "queue")).port}


def test_a_ca_bundle_in_the_environment_verifies_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    endpoint = "https://account.blob.core.windows.net"
    assert read_once(endpoint) == {"use_env_settings": False}
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/curl-bundle.pem")
    assert read_once(endpoint)["connection_verify"] == "/etc/curl-bundle.pem"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/requests-bundle.pem")  # requests prefers it, so do we
    assert read_once(endpoint)["connection_verify"] == "/etc/requests-bundle.pem"


@pytest.mark.parametrize(
    ("connection_string", "service", "endpoint"),
    [
        (
            "AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
            "queue",
            "https://acct.queue.core.windows.net",
        ),
        (
            "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
            "table",
            "http://acct.table.core.chinacloudapi.cn",
        ),
        ("AccountName=acct;AccountKey=a2V5;BlobEndpoint=https://cdn.example/acct", "blob", "https://cdn.example/acct"),
        ("UseDevelopmentStorage=true", "queue", "http://127.0.0.1:10001/devstoreaccount1"),
    ],
)
def test_each_service_endpoint_is_the_one_the_connection_string_names(
    connection_string: str, service: str, endpoint: str
) -> None:
    assert service_endpoint(connection_string, service) == endpoint
