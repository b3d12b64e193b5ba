"""One connected trace per job: upload (web app) -> controller -> processors -> stitch -> responder.

The web app runs in this process with an in-memory span exporter; the controller, processor
and responder are real role processes exporting over OTLP/HTTP (the standard ``OTEL_*``
variables) to a small OTLP receiver in this test, which decodes the protobuf requests with
the OpenTelemetry protocol package. All spans of the job must share one trace id, and every
span but the upload's send must have its parent among them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dal.queues import tracing
from tests.support.pipelines import Pipeline
from tests.support.waiting import wait_for
from tests.web.conftest import SECRET, png_bytes
from webapp import create_app
from webapp.csrf import CSRF_HEADER, CSRF_VALUE

Span = dict[str, Any]


class _Receiver(ThreadingHTTPServer):
    spans: list[Span]


class _OtlpHandler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource_spans in request.resource_spans:
            service = next(a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                    self.server.spans.append(
                        {
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex() or None,
                            "name": span.name,
                            "service": service,
                            "attributes": attributes,
                        }
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver(("127.0.0.1", 0), _OtlpHandler)
    server.spans = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture
def in_memory() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure_tracing("photomosaics-web", exporter=exporter)
    yield exporter
    tracing.disable_tracing()


def test_a_job_is_one_connected_trace_across_the_roles(
    pipe: Pipeline, receiver: _Receiver, in_memory: InMemorySpanExporter
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    for role in ("controller", "processor", "responder"):
        pipe.start(role, env=env)
    app = create_app(
        {"TESTING": True, "SECRET_KEY": SECRET, "SETTINGS": pipe.settings, "CONNECTION_STRING": pipe.connection_string}
    )
    client = app.test_client()
    slices = 3
    response = client.post(
        "/api/jobs",
        headers={CSRF_HEADER: CSRF_VALUE},
        content_type="multipart/form-data",
        data={"library": "tiles", "tile_size": "4", "slices": str(slices), "image": (_photo(), "photo.png")},
    )
    assert response.status_code == 202, response.get_json()
    rid = response.get_json()["request_id"]
    status_url = response.get_json()["status_url"]
    wait_for(
        lambda: client.get(status_url).get_json()["status"] in ("done", "failed"),
        seconds=90,
        step=0.2,
        what="the job to end",
        details=pipe.logs,
    )
    assert client.get(status_url).get_json()["status"] == "done"

    web = [
        {
            "trace": format(s.context.trace_id, "032x"),
            "id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
            "name": s.name,
            "service": "photomosaics-web",
            "attributes": dict(s.attributes or {}),
        }
        for s in in_memory.get_finished_spans()
    ]
    expected = {
        "send imagerequest": 1,
        "process imagerequest": 1,
        "send slicerequest": 1,
        "process slicerequest": slices,
        "send sliceresponse": slices,
        "process sliceresponse": slices,
        "send imageresponse": 1,
        "process imageresponse": 1,
        "stitch": 1,
    }

    def job_spans() -> list[Span]:
        return web + [s for s in receiver.spans if s["attributes"].get("photomosaics.request_id") == rid]

    def counted(spans: list[Span]) -> dict[str, int]:
        return {name: sum(1 for s in spans if s["name"] == name) for name in expected}

    def all_of_them() -> list[Span] | None:
        found = job_spans()
        return found if counted(found) == expected else None

    spans = wait_for(  # the roles' batch processors export every 0.1 s
        all_of_them,
        seconds=20,
        step=0.2,
        what="every span of the job",
        details=lambda: str(sorted((s["service"], s["name"]) for s in job_spans())),
    )

    assert len({s["trace"] for s in spans}) == 1, "the job's spans are in more than one trace"
    ids = {s["id"] for s in spans}
    roots = [s for s in spans if s["parent"] not in ids]
    assert [(r["name"], r["service"], r["parent"]) for r in roots] == [("send imagerequest", "photomosaics-web", None)]
    by_id = {s["id"]: s for s in spans}
    for span in spans:  # every process span is the child of the send of its message
        if span["name"].startswith("process "):
            parent = by_id[span["parent"]]
            assert parent["name"] == "send " + span["name"].removeprefix("process "), span
        if span["name"] == "stitch":  # the controller's own step, inside the message that completed the set
            assert by_id[span["parent"]]["name"] == "process sliceresponse", span
            assert span["attributes"]["photomosaics.slices"] == slices
            continue
        attributes = span["attributes"]
        assert attributes["messaging.system"] == tracing.MESSAGING_SYSTEM
        assert attributes["messaging.destination.name"] == span["name"].split(" ", 1)[1]
        assert attributes["messaging.operation.type"] == span["name"].split(" ", 1)[0]
    assert {s["service"] for s in spans} == {
        f"photomosaics-{r}" for r in ("web", "controller", "processor", "responder")
    }
    send_slices = next(s for s in spans if s["name"] == "send slicerequest")
    assert send_slices["attributes"]["messaging.batch.message_count"] == slices


def _photo() -> Any:
    import io

    return io.BytesIO(png_bytes(12, 148))  # at 4 px tiles: three parts of the grid (mosaic.parts)
