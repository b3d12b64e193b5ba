"""webapp/openapi.yaml describes exactly the API routes, and the statuses they really answer."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask import Flask

from tests.web.conftest import LIBRARY, png_bytes, submit

SPEC_PATH = Path(__file__).resolve().parents[2] / "webapp" / "openapi.yaml"
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return yaml.safe_load(SPEC_PATH.read_text())


def api_routes(app: Flask) -> set[tuple[str, str]]:
    routes = set()
    for rule in app.url_map.iter_rules():
        if not (rule.rule.startswith("/api/") or rule.rule in ("/healthz", "/metrics")):
            continue
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        routes |= {(path, m.lower()) for m in rule.methods or () if m.lower() in HTTP_METHODS}
    return routes


def spec_routes(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, item in spec["paths"].items() for method in item if method in HTTP_METHODS}


def test_spec_and_routes_match_exactly(app: Flask, spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.")
    assert spec_routes(spec) == api_routes(app)


def test_every_operation_documents_its_responses(spec: dict[str, Any]) -> None:
    refs = spec["components"]["responses"]
    for path, item in spec["paths"].items():
        for method, operation in ((m, o) for m, o in item.items() if m in HTTP_METHODS):
            assert operation.get("summary"), (path, method)
            responses = operation["responses"]
            assert any(code.startswith("2") for code in responses), (path, method)
            for code, response in responses.items():
                if code.startswith(("4", "5")):
                    ref = response["$ref"].rsplit("/", 1)[-1]
                    schema = refs[ref]["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, code)
            declared = {p["name"] for p in item.get("parameters", []) + operation.get("parameters", []) if "name" in p}
            declared |= {
                spec["components"]["parameters"][p["$ref"].rsplit("/", 1)[-1]]["name"]
                for p in item.get("parameters", [])
                if "$ref" in p
            }
            for name in re.findall(r"{(\w+)}", path):
                assert name in declared, (path, name)


def test_real_answers_are_documented(client: Any, spec: dict[str, Any]) -> None:
    """Each status the app really gives on these requests is one the spec lists for the route."""
    request_id = submit(client, slices="1").json["request_id"]
    missing = "00000000-0000-4000-8000-000000000000"
    calls = [
        ("/api/jobs", "post", lambda: submit(client, slices="1")),
        ("/api/jobs", "post", lambda: submit(client, tile_size="0")),
        ("/api/jobs", "post", lambda: submit(client, library="nosuchlibrary")),
        ("/api/jobs", "post", lambda: submit(client, image=b"text")),
        ("/api/jobs", "post", lambda: client.post("/api/jobs", data={}, csrf=False)),
        ("/api/jobs", "get", lambda: client.get("/api/jobs")),
        ("/api/jobs", "get", lambda: client.get("/api/jobs?limit=0")),
        ("/api/jobs/{request_id}", "get", lambda: client.get(f"/api/jobs/{request_id}")),
        ("/api/jobs/{request_id}", "get", lambda: client.get(f"/api/jobs/{missing}")),
        ("/api/jobs/{request_id}", "delete", lambda: client.delete(f"/api/jobs/{request_id}")),
        ("/api/jobs/{request_id}", "delete", lambda: client.delete(f"/api/jobs/{missing}")),
        ("/api/jobs/{request_id}/result", "get", lambda: client.get(f"/api/jobs/{request_id}/result")),
        ("/api/jobs/{request_id}/slices/{sequence}", "get", lambda: client.get(f"/api/jobs/{request_id}/slices/0")),
        ("/api/jobs/{request_id}/dzi", "get", lambda: client.get(f"/api/jobs/{request_id}/dzi")),
        ("/api/jobs/{request_id}/dzi", "get", lambda: client.get(f"/api/jobs/{missing}/dzi")),
        (
            "/api/jobs/{request_id}/dzi_files/{level}/{column}_{row}.jpg",
            "get",
            lambda: client.get(f"/api/jobs/{request_id}/dzi_files/0/0_0.jpg"),
        ),
        ("/api/jobs/{request_id}/pyramid", "get", lambda: client.get(f"/api/jobs/{request_id}/pyramid")),
        ("/api/jobs/{request_id}/preview", "get", lambda: client.get(f"/api/jobs/{request_id}/preview")),
        ("/api/jobs/{request_id}/preview", "get", lambda: client.get(f"/api/jobs/{request_id}/preview?size=2")),
        ("/api/jobs/{request_id}/photos", "get", lambda: client.get(f"/api/jobs/{request_id}/photos")),
        ("/api/jobs/{request_id}/photos", "get", lambda: client.get(f"/api/jobs/{request_id}/photos?limit=0")),
        ("/api/jobs/{request_id}/photos", "get", lambda: client.get(f"/api/jobs/{missing}/photos")),
        ("/api/libraries", "get", lambda: client.get("/api/libraries")),
        (
            "/api/libraries",
            "post",
            lambda: client.post(
                "/api/libraries", data={"name": LIBRARY, "files": [(io.BytesIO(png_bytes()), "a.png")]}
            ),
        ),
        ("/api/libraries/{name}", "get", lambda: client.get(f"/api/libraries/{LIBRARY}")),
        ("/api/libraries/{name}", "get", lambda: client.get("/api/libraries/nosuchlibrary")),
        (
            "/api/libraries/{name}/tiles/{tile}",
            "get",
            lambda: client.get(f"/api/libraries/{LIBRARY}/tiles/tiles/x.jpg"),
        ),
        ("/api/libraries/{name}", "delete", lambda: client.delete(f"/api/libraries/{LIBRARY}")),
        ("/api/libraries/{name}", "delete", lambda: client.delete("/api/libraries/nosuchlibrary")),
        ("/api/plan", "get", lambda: client.get("/api/plan?width=10&height=10&tile_size=4")),
        ("/api/plan", "get", lambda: client.get("/api/plan")),
        (
            "/api/print-plan/for-paper",
            "get",
            lambda: client.get("/api/print-plan/for-paper?tile_size=16&dpi=300&width_cm=21"),
        ),
        ("/api/print-plan/for-paper", "get", lambda: client.get("/api/print-plan/for-paper?tile_size=16&dpi=300")),
        (
            "/api/print-plan/for-paper",
            "get",
            lambda: client.get("/api/print-plan/for-paper?tile_size=1&dpi=2400&width_cm=1000"),
        ),
        (
            "/api/print-plan/for-grid",
            "get",
            lambda: client.get("/api/print-plan/for-grid?tile_size=16&dpi=300&tiles_across=738"),
        ),
        (
            "/api/print-plan/for-grid",
            "get",
            lambda: client.get("/api/print-plan/for-grid?tile_size=16&dpi=300&tiles_across=10001"),
        ),
        ("/api/queues", "get", lambda: client.get("/api/queues")),
        ("/api/queues/{name}/poison", "get", lambda: client.get("/api/queues/slicerequest/poison")),
        (
            "/api/queues/{name}/poison/requeue",
            "post",
            lambda: client.post("/api/queues/slicerequest/poison/requeue", json={"all": True}),
        ),
        (
            "/api/queues/{name}/poison/purge",
            "post",
            lambda: client.post("/api/queues/slicerequest/poison/purge", json={"all": True}),
        ),
        ("/healthz", "get", lambda: client.get("/healthz")),
    ]
    for path, method, call in calls:
        response = call()
        documented = spec["paths"][path][method]["responses"]
        assert str(response.status_code) in documented, (path, method, response.status_code)
        if response.status_code >= 400:
            assert set(response.json) == {"error", "detail"}


def test_served_spec_states_the_name_length_the_prefix_leaves(client: Any, app: Flask, web_prefix: str) -> None:
    """/openapi.yaml gives library names the maxLength this deployment's prefix really leaves."""
    from dal.blobs.libraries import LibraryStore
    from dal.errors import InvalidLibraryNameError

    answer = client.get("/openapi.yaml")
    assert answer.status_code == 200 and answer.mimetype == "application/yaml"
    served = yaml.safe_load(answer.get_data(as_text=True))
    longest = 63 - len(web_prefix)
    assert web_prefix and served["components"]["schemas"]["LibraryName"]["maxLength"] == longest
    bodies = [served["paths"]["/api/jobs"]["post"], served["paths"]["/api/libraries"]["post"]]
    names = [
        next(iter(op["requestBody"]["content"].values()))["schema"]["properties"][field]
        for op, field in zip(bodies, ("library", "name"), strict=True)
    ]
    assert [n["maxLength"] for n in names] == [longest, longest]
    store = LibraryStore(None, prefix=web_prefix)  # type: ignore[arg-type]
    assert store.container_name("a" * longest)  # the documented longest name is accepted...
    with pytest.raises(InvalidLibraryNameError):
        store.container_name("a" * (longest + 1))  # ...and one more is not
