"""The operator API of poison queues: token required (401 without it, 403 when operator actions
are off), requeue and purge work."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask import Flask

from dal.config import Settings, StorageClients
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import SliceRequestMessage
from tests.web.conftest import SECRET, ApiClient
from webapp import create_app

TOKEN = "operator-token-for-tests"


@pytest.fixture
def admin_app(web_settings: Settings, azurite_connection_string: str, unique: str) -> Flask:
    settings = Settings(connection_string=azurite_connection_string, name_prefix=f"a{unique}")
    flask_app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "SETTINGS": settings,
            "CONNECTION_STRING": azurite_connection_string,
            "ADMIN_TOKEN": TOKEN,
        }
    )
    flask_app.test_client_class = ApiClient
    return flask_app


def _poison(storage: StorageClients, prefix: str, count: int) -> QueueAccessor:
    accessor = QueueAccessor(storage, settings=Settings(), prefix=prefix)
    accessor.ensure_all()
    queue = accessor.slice_request
    for seq in range(count):
        queue.submit(
            SliceRequestMessage(
                queue_uri=queue.url,
                client_id="web-operator",
                request_id=str(uuid.uuid4()),
                image_library_uri="http://127.0.0.1/devstoreaccount1/lib",
                slice_uri=f"http://127.0.0.1/x/{seq}.png",
                slice_sequence=seq,
                tile_size=8,
            )
        )
    for received in queue.accept_messages(32):
        queue.move_to_poison(received, "kept failing")
    return accessor


def test_without_a_configured_token_operator_calls_are_403_and_the_page_has_no_buttons(client: Any) -> None:
    for response in (
        client.get("/api/queues/slicerequest/poison"),
        client.post(
            "/api/queues/slicerequest/poison/requeue", json={"all": True}, headers={"Authorization": "Bearer anything"}
        ),
        client.post("/api/queues/slicerequest/poison/purge", json={"all": True}),
    ):
        assert response.status_code == 403 and response.json["error"] == "forbidden"
    assert client.get("/api/queues").status_code == 403  # depths: the metrics port or the token
    page = client.get("/queues").get_data(as_text=True)
    assert "poison-ops" not in page and "Requeue" not in page


def test_operator_token_guards_lists_requeues_and_purges(
    admin_app: Flask, storage: StorageClients, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    accessor = _poison(storage, f"a{unique}", 3)
    client = admin_app.test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert "poison-ops" in client.get("/queues").get_data(as_text=True)

    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = client.post("/api/queues/slicerequest/poison/requeue", json={"all": True}, headers=headers)
        assert refused.status_code == 401 and set(refused.json) == {"error", "detail"}
        assert refused.json["error"] == "unauthorized" and refused.headers["WWW-Authenticate"].startswith("Bearer ")
    assert accessor.slice_request.poison.approximate_depth() == 3

    listed = client.get("/api/queues/slicerequest/poison", headers=auth)
    assert listed.status_code == 200 and len(listed.json["messages"]) == 3
    first = listed.json["messages"][0]
    assert first["reason"] == "kept failing" and first["dequeue_count"] == 1

    for body in ({}, {"id": "x", "all": True}, {"all": "yes"}, {"other": 1}, [1]):
        bad = client.post("/api/queues/slicerequest/poison/requeue", json=body, headers=auth)
        assert bad.status_code == 400 and set(bad.json) == {"error", "detail"}, body
    assert client.post("/api/queues/nosuch/poison/purge", json={"all": True}, headers=auth).status_code == 404
    gone = client.post("/api/queues/slicerequest/poison/requeue", json={"id": "nosuchid"}, headers=auth)
    assert gone.status_code == 404

    one = client.post("/api/queues/slicerequest/poison/requeue", json={"id": first["id"]}, headers=auth)
    assert one.status_code == 200 and one.json["ids"] == [first["id"]]
    assert [r.message.slice_sequence for r in accessor.slice_request.accept_messages(32)] == [0]
    purged = client.post("/api/queues/slicerequest/poison/purge", json={"all": True}, headers=auth)
    assert purged.status_code == 200 and purged.json["count"] == 2
    assert accessor.slice_request.poison.peek() == []
    assert TOKEN not in caplog.text
