"""``GET /metrics`` of the web app: storage calls counted, queues and jobs reported."""

from __future__ import annotations

from typing import Any

from tests.support.metrics import samples, value_of
from tests.web.conftest import png_bytes, submit


def test_web_metrics_count_storage_calls_and_report_queues_and_jobs(client: Any, operator: dict[str, str]) -> None:
    client.application.config["METRICS_CACHE_SECONDS"] = 0  # read storage at every scrape
    assert client.get("/metrics").status_code == 401  # operators only
    first = client.get("/metrics", headers=operator)
    assert first.status_code == 200 and first.content_type.startswith("text/plain; version=")
    before = samples(first.get_data(as_text=True))
    assert value_of(before, "photomosaics_storage_up") == 1
    for queue in ("imagerequest", "slicerequest", "sliceresponse", "imageresponse"):
        assert ("photomosaics_poison_queue_messages", (("queue", queue),)) in before

    response = submit(client, image=png_bytes())
    assert response.status_code == 202, response.get_json()
    after = samples(client.get("/metrics", headers=operator).get_data(as_text=True))
    puts = "blob PutBlob", "queue PutMessage"
    assert value_of(after, "photomosaics_jobs", status="queued") >= 1
    for operation in puts:
        grew = value_of(after, "photomosaics_storage_requests_total", operation=operation)
        assert grew > value_of(before, "photomosaics_storage_requests_total", operation=operation), operation
