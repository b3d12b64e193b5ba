"""The API against its own contract, with the standard OpenAPI fuzzer (schemathesis, pinned).

Schemathesis' own four phases, all checks (server errors, status codes, content types,
headers and bodies against the spec, negative data rejected, positive data accepted,
use-after-free, ...):

- ``test_every_operation_keeps_its_contract``: ``@schema.parametrize()`` runs the
  **examples**, **coverage** and **fuzzing** phases on every operation of the served spec.
- ``test_stateful_workflows_follow_the_links``: the **stateful** phase
  (``schema.as_state_machine()``) follows the spec's ``links``: list or create a library,
  submit a photo with it, follow the job's events until it ends, then fetch its result,
  slices and preview and delete it; list the queues, read a poison queue, requeue or purge
  a message by its id, with every check on every answer.
- Reach **with real ids** is proven by deterministic link walks, one per workflow (a short
  random walk may never draw "create, then read" at a CI-sized scenario count, and reaches a
  finished job only when the roles happen to be quick): submit a real photo, wait for the job
  and follow every link from the submission and the job (get, events, preview, slice, result,
  Deep Zoom descriptor, tile, pyramid, tile map, photos, delete last); create a library and follow its links
  (get, tile); list the queues and follow the links to a poison queue, then to requeue and
  purge a message by the id it listed. Each link's runtime expressions are resolved as a
  generated client would, and every call must answer 2xx.

The app is a real ``create_app`` on the session's Azurite with real controller, processor and
responder processes (jobs really finish, so results and slices exist), served on a loopback
port; one ``requests.Session`` per client keeps the ``pm_client`` cookie, as any non-browser
client must. A few poison messages are seeded before the roles start (and topped up through
the real controller before the poison workflow), so the operator's requeue and purge have real
ids to act on. The checks' settings are the project's ``schemathesis.toml``, which the ``st``
CLI reads too. Examples are bounded and the seed fixed, so CI is fast and repeatable (3
examples, 10 scenarios of 6 steps per workflow); ``PHOTOMOSAICS_FUZZ_SEED`` / ``_EXAMPLES`` /
``_STEPS`` / ``_SCENARIOS`` run it wider by hand (README, "HTTP API").
"""

from __future__ import annotations

import io
import os
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, seed, settings
from PIL import Image

from dal.config import Settings
from tests.web.conftest import SECRET
from tests.web.conftest import served as serving
from webapp.csrf import CSRF_HEADER, CSRF_VALUE

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("PHOTOMOSAICS_FUZZ_SEED", "20261123"))
# 3 generated examples per operation, on top of the coverage phase's deterministic boundary and
# negative cases (which max-examples does not bound): in one measured run the coverage phase made
# 1,246 of 1,447 calls; the fuzzing phase's 199 calls (6 examples) added 6 (operation, status)
# pairs the coverage phase had not seen, each a 404 for a random name that 2 to 4 of the 6 drew.
EXAMPLES = int(os.environ.get("PHOTOMOSAICS_FUZZ_EXAMPLES", "3"))
SCENARIOS = int(os.environ.get("PHOTOMOSAICS_FUZZ_SCENARIOS", "10"))
STATEFUL_STEPS = int(os.environ.get("PHOTOMOSAICS_FUZZ_STEPS", "6"))
ADMIN_TOKEN = "fuzz-operator-token-of-24-chars"
TILES = "fuzztiles"
SEEDED_POISON = 6
FUZZ_MAX_OUTPUT_PIXELS = 2_000_000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pipeline(azurite_connection_string: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Real roles on their own name prefix, a small tile library and a few poison messages."""
    from tests.support.pipelines import Pipeline, synthetic_library

    pipe = Pipeline(azurite_connection_string, tmp_path_factory.mktemp("fuzz"))
    # Generated requests may ask for any grid the spec allows (up to 400 MP): with the default
    # limit the roles would render giant mosaics into the suite's shared Azurite and starve
    # every later test. A small limit keeps each job small; bigger asks get the declared 422.
    pipe.env["PHOTOMOSAICS_MAX_OUTPUT_PIXELS"] = str(FUZZ_MAX_OUTPUT_PIXELS)
    # Backpressure off (0: never busy), as quotas are for every pipeline test: on a loaded machine
    # the measured render rate makes the queued work "too long" and POST /api/jobs answers its
    # declared 503 service_busy, which the fuzzer's not_a_server_error check calls a failure.
    # Backpressure has its own tests (tests/web/test_backpressure.py).
    pipe.env["PHOTOMOSAICS_BACKPRESSURE_MAX_WAIT_SECONDS"] = "0"
    pipe.settings = Settings.from_env(pipe.env)
    library_uri = pipe.library_uri = pipe.create_library(TILES, synthetic_library(24))
    _seed_poison(pipe, library_uri, SEEDED_POISON)  # before the roles start: nobody takes them first
    for role in ("controller", "processor", "responder"):
        pipe.start(role)
    try:
        yield pipe
    finally:
        pipe.stop_all()


def _seed_poison(pipe: Any, library_uri: str, count: int) -> None:
    """Poison messages in the first monitored queue (the one ``GET /api/queues`` lists first,
    which the spec's link reads), as the controller leaves them: an image request that kept
    failing."""
    from dal.queues.messages import ImageRequestMessage

    queue = pipe.services.queues.monitored()[0]
    for _ in range(count):
        queue.submit(
            ImageRequestMessage(
                queue_uri=queue.url,
                client_id="fuzz-poison",
                request_id=str(uuid.uuid4()),
                image_uri=f"{queue.url}/missing.png",
                image_library_uri=library_uri,
                tile_size=8,
                slices=1,
            )
        )
    for received in queue.accept_messages(32):
        queue.move_to_poison(received, "kept failing (seeded by the fuzz test)")


def _top_up_poison(pipe: Any, count: int) -> None:
    """At least ``count`` poison messages in the first monitored queue, moved there by the real
    controller: an image request for more slices than allowed is a permanent error. The
    examples and fuzzing phases may have purged them all (``{"all": true}``) before the poison
    workflow runs, and its reach needs real ids."""
    from dal.queues.messages import ImageRequestMessage

    queue = pipe.services.queues.monitored()[0]
    missing = count - queue.poison.approximate_depth()
    for _ in range(max(missing, 0)):
        queue.submit(
            ImageRequestMessage(
                queue_uri=queue.url,
                client_id="fuzz-poison",
                request_id=str(uuid.uuid4()),
                image_uri=f"{queue.url}/missing.png",
                image_library_uri=pipe.library_uri,
                tile_size=8,
                slices=pipe.settings.max_slices + 1,
            )
        )
    for _ in range(300):  # the controller is real: bounded by attempts, not asserted in time
        if queue.poison.approximate_depth() >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"the controller poisoned fewer than {count} requests\n{pipe.logs()}")


@pytest.fixture(scope="module")
def served(pipeline: Any, azurite_connection_string: str) -> Iterator[str]:
    from webapp import create_app

    app = create_app(
        {
            "SECRET_KEY": SECRET,
            "SETTINGS": pipeline.settings,
            "CONNECTION_STRING": azurite_connection_string,
            "SSE_POLL_SECONDS": 0.05,
            "SSE_MAX_SECONDS": 5.0,
            "ADMIN_TOKEN": ADMIN_TOKEN,
            "ADMIN_MAX_FAILED_ATTEMPTS": 1_000_000,
        }
        # SSE_MAX_SECONDS: a stream on a job still rendering ends after 5 s (a client reconnects);
        # the walks do not wait 30 s on each such job. ADMIN_MAX_FAILED_ATTEMPTS: the fuzzer's wrong
        # tokens (its auth checks) and the operator's walks come from one address; ten wrong ones
        # would lock the walks out for a minute (webapp.admin; tests/web/test_admin_attempts.py).
    )
    with serving(app) as url:
        yield url


class UploadingSession(requests.Session):
    """Sends every file part with a filename, as browsers and ``curl -F`` do (the spec asks it):
    without one, a multipart part is a text field, not a file."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        files = kwargs.get("files")
        if isinstance(files, list):
            kwargs["files"] = [_named(part) for part in files]
        return super().request(method, url, *args, **kwargs)


def _named(part: Any) -> Any:
    name, value = part
    if isinstance(value, tuple) and len(value) >= 3 and value[0] is None and value[2]:  # a typed (file) part
        return name, (f"{name}.bin", *value[1:])
    return part


def client_session() -> requests.Session:
    """What a non-browser client does: keep the cookie jar, send the CSRF header."""
    session = UploadingSession()
    session.headers[CSRF_HEADER] = CSRF_VALUE
    session.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
    return session


def _valid_library_name(name: str) -> bool:
    from dal.blobs.library_info import validate_library_name
    from dal.errors import InvalidLibraryNameError

    try:
        validate_library_name(name)
    except InvalidLibraryNameError:
        return False
    return True


def load_schema(base_url: str, *, examples: int = EXAMPLES) -> Any:
    """The served spec, judged with the project's ``schemathesis.toml`` (what ``st run`` from the
    clone reads), plus this run's seed and example count."""
    config = tomllib.loads((ROOT / "schemathesis.toml").read_text())
    config["seed"] = SEED
    config["generation"] = {**config.get("generation", {}), "max-examples": examples}
    config = schemathesis.Config.from_dict(config)
    # The served spec, not the file: it states the library-name length this deployment's
    # name prefix leaves (webapp/spec.py), as a client generator would read it.
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.yaml", config=config)
    schema.config.update(base_url=base_url)
    return schema


@pytest.fixture
def api_schema(served: str) -> Any:
    return load_schema(served)


@pytest.fixture
def session(request: pytest.FixtureRequest) -> requests.Session:
    # schemathesis 4.32's from_fixture() names each operation's subtest through the node's
    # ``_nodeid``, an attribute pytest 9.2 replaced by ``_id``: give it one to read and set.
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid
    return client_session()


lazy_schema = schemathesis.pytest.from_fixture("api_schema")


# A body refused midway (a text field over MAX_FORM_MEMORY_SIZE after a file: 413) leaves no
# spooled file open: the app's request closes the one werkzeug's parser dropped (webapp.uploads_request).
@lazy_schema.parametrize()
@settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_its_contract(case: Any, session: requests.Session) -> None:
    case.call_and_validate(session=session)


# The stateful phase, one state machine per workflow: with every link of the spec in one
# machine, Hypothesis picks among ~30 rules and the four-step chain "list libraries, submit,
# follow the events to the end, fetch the result" is rarely drawn in a CI-sized run. Each
# workflow's machine holds only its operations (and all their links), so the chains are
# walked; together they cover every operation that takes an id (checked below).
WORKFLOWS = {
    # every operation of a job, Deep Zoom included: whether a short random walk gets past the
    # submission to a finished job depends on the roles' timing, so its reach is proven by the
    # deterministic link walk below; this machine proves the contract along the links
    "jobs": [
        "listLibraries",
        "submitJob",
        "listJobs",
        "getJob",
        "getJobEvents",
        "getJobPreview",
        "getJobSlice",
        "getJobResult",
        "deleteJob",
        "getJobDzi",
        "getJobDziTile",
        "getJobPyramid",
        "getJobTiles",
        "getJobPhotos",
        "cancelJob",
    ],
    "libraries": ["listLibraries", "createLibrary", "getLibrary", "getLibraryTile", "renameLibrary", "deleteLibrary"],
    # a library of staged uploads: the grant (valet-key URLs), indexing, the photos' progress, removal
    "uploads": [
        "grantLibraryUploads",
        "indexLibrary",
        "getLibraryPhotos",
        "getLibrary",
        "removeLibraryPhoto",
        "removeLibraryPhotos",
    ],
    "poison": ["listQueues", "getPoison", "requeuePoison", "purgePoison"],
}


def test_the_workflows_cover_every_operation_with_ids(served: str) -> None:
    schema = load_schema(served)
    covered = {label for ids in WORKFLOWS.values() for label in _labels(schema, ids)}
    missing = operations_with_ids(schema) - covered
    assert missing == set(), f"operations with ids in no stateful workflow of this test: {sorted(missing)}"


@pytest.mark.parametrize("workflow", sorted(WORKFLOWS))
def test_stateful_workflows_follow_the_links(served: str, pipeline: Any, workflow: str) -> None:
    if workflow == "poison":
        _top_up_poison(pipeline, SEEDED_POISON)
    full = load_schema(served)
    schema = full.include(operation_id=WORKFLOWS[workflow])
    found: list[str] = []

    @seed(SEED)
    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # A new client (cookie) per scenario: what the server answers depends only on this
            # scenario's steps, so Hypothesis can replay a scenario and draw the same way.
            self.session = client_session()

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"session": self.session, "base_url": served}

        def before_call(self, case: Any) -> None:
            # Library names are global: a replayed scenario would get 409 for the name it
            # created the first time. A valid generated name is made unique; others stay.
            body = case.body
            if case.operation.label == "POST /api/libraries" and isinstance(body, dict):
                name = body.get("name")
                if isinstance(name, str) and _valid_library_name(name):
                    body["name"] = f"fz{uuid.uuid4().hex[:12]}"

        def step(self, input: Any) -> Any:
            try:
                output = super().step(input)
            except Exception as exc:  # the server keeps state, so Hypothesis' replay may differ:
                found.append(f"{input.case.operation.label}: {type(exc).__name__}: {exc}")  # keep the first word
                raise
            return output

    try:
        Workflow.run(
            settings=settings(
                max_examples=SCENARIOS,
                stateful_step_count=STATEFUL_STEPS,
                # No shrinking: the server keeps state between runs, so a shrunk replay cannot
                # reproduce the same steps; a failure is reported as found.
                phases=[Phase.generate],
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
        )
    except Exception as exc:
        raise AssertionError("\n\n".join(found) or str(exc)) from exc
    assert found == []


# Reach with real ids is proven by deterministic link walks below, one per workflow: a short
# random walk reaches a finished job only when the roles happen to finish within its steps, and
# at a CI-sized scenario count it may never draw "create a library, then read it" either (it
# failed CI that way). The stateful machines above prove the contract along the links.


def test_the_links_of_a_finished_job_reach_every_job_operation_with_2xx(served: str, api_schema: Any) -> None:
    """Submit a real photo, wait for the job to finish, then follow every link the spec gives
    from the submission and from the job (``$response.body#/request_id`` and constants), in the
    spec's order with the deletion last: each answers 2xx, as the spec promises."""
    raw = api_schema.raw_schema
    session = client_session()
    library = session.get(f"{served}/api/libraries").json()["libraries"][0]["name"]
    photo = io.BytesIO()
    Image.new("RGB", (48, 32), (120, 80, 40)).save(photo, "PNG")
    submitted = session.post(
        f"{served}/api/jobs",
        files={"image": ("p.png", photo.getvalue(), "image/png")},
        data={"library": library, "tile_size": "8", "slices": "2"},
    )
    assert submitted.status_code == 202, submitted.text
    request_id = submitted.json()["request_id"]
    for _ in range(600):  # the roles are real: bounded by attempts, not asserted in time
        job = session.get(f"{served}/api/jobs/{request_id}").json()
        if job["status"] in {"done", "failed"}:
            break
        time.sleep(0.2)
    assert job["status"] == "done", job
    links = {
        **raw["paths"]["/api/jobs"]["post"]["responses"]["202"]["links"],
        **raw["paths"]["/api/jobs/{request_id}"]["get"]["responses"]["200"]["links"],
    }
    assert {
        "getJob",
        "getJobResult",
        "getJobSlice",
        "getJobPreview",
        "getJobEvents",
        "getJobDzi",
        "getJobDziTile",
        "getJobPyramid",
        "getJobTiles",
        "getJobPhotos",
        "deleteJob",
    } <= {link["operationId"] for link in links.values()}
    deleting = {name: link for name, link in links.items() if link["operationId"] == "deleteJob"}
    # A finished job has nothing to cancel: the spec's 409 job_finished, checked on its own.
    cancelling = {name: link for name, link in links.items() if link["operationId"] == "cancelJob"}
    reading = {name: link for name, link in links.items() if name not in deleting and name not in cancelling}
    answered = {}
    for batch in (reading, cancelling, deleting):  # the deletion last
        answered |= _follow(raw, batch, response=submitted, path_params={}, session=session, base=served)
    cancelled = answered.pop("cancelJob")
    assert cancelled.status_code == 409 and cancelled.json()["error"] == "job_finished", cancelled.text
    statuses = {operation: response.status_code for operation, response in answered.items()}
    assert all(200 <= status < 300 for status in statuses.values()), statuses


def _follow(
    raw: dict[str, Any],
    links: dict[str, Any],
    *,
    response: Any,
    path_params: dict[str, str],
    session: requests.Session,
    base: str,
) -> dict[str, Any]:
    """Follow each link as a generated client would: resolve its runtime expressions
    (``$response.body#/pointer``, ``$request.path.name``) against the response and the request
    that got it, call the operation, and return the responses by operationId."""
    where = {
        op["operationId"]: (path, method)
        for path, item in raw["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "operationId" in op
    }
    body = response.json()

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$response.body#/"):
            found = body
            for key in value.removeprefix("$response.body#/").split("/"):  # a JSON pointer
                found = found[int(key)] if isinstance(found, list) else found[key]
            return found
        if isinstance(value, str) and value.startswith("$request.path."):
            return path_params[value.removeprefix("$request.path.")]
        return value  # a constant

    answers = {}
    for link in links.values():
        operation = link["operationId"]
        path, method = where[operation]
        values = {k: resolve(v) for k, v in link.get("parameters", {}).items()}
        payload = {k: resolve(v) for k, v in link["requestBody"].items()} if "requestBody" in link else None
        answers[operation] = session.request(method.upper(), base + path.format(**values), json=payload, timeout=60)
    return answers


def test_the_links_of_a_new_library_reach_every_library_operation_with_2xx(served: str, api_schema: Any) -> None:
    """Create a library, then follow every link from the creation and from the listing to an
    operation that takes a library's name: each answers 2xx."""
    raw, session = api_schema.raw_schema, client_session()
    photo = io.BytesIO()
    Image.new("RGB", (40, 40), (30, 90, 160)).save(photo, "PNG")
    name = f"walk{uuid.uuid4().hex[:10]}"
    created = session.post(
        f"{served}/api/libraries", data={"name": name}, files=[("files", ("a.png", photo.getvalue(), "image/png"))]
    )
    assert created.status_code == 201, created.text
    post_links = raw["paths"]["/api/libraries"]["post"]["responses"]["201"]["links"]
    list_links = raw["paths"]["/api/libraries"]["get"]["responses"]["200"]["links"]
    answered = _follow(
        raw,
        {k: v for k, v in post_links.items() if v["operationId"] != "submitJob"},
        response=created,
        path_params={},
        session=session,
        base=served,
    )
    listing = session.get(f"{served}/api/libraries")
    answered |= {
        f"{op} (from the listing)": r
        for op, r in _follow(
            raw,
            {k: v for k, v in list_links.items() if v["operationId"] != "submitJob"},
            response=listing,
            path_params={},
            session=session,
            base=served,
        ).items()
    }
    assert {"getLibrary", "getLibraryTile", "deleteLibrary"} <= set(answered)
    statuses = {op: r.status_code for op, r in answered.items()}
    assert all(200 <= status < 300 for status in statuses.values()), statuses


def test_the_links_of_the_poison_queues_reach_requeue_and_purge_with_2xx(
    served: str, pipeline: Any, api_schema: Any
) -> None:
    """List the queues, follow the link to the first one's poison messages, then its links to
    requeue one message and (from a fresh listing) purge another, by the ids the server gave."""
    _top_up_poison(pipeline, 2)
    raw, session = api_schema.raw_schema, client_session()
    queues = session.get(f"{served}/api/queues")
    assert queues.status_code == 200, queues.text
    queue_links = raw["paths"]["/api/queues"]["get"]["responses"]["200"]["links"]
    poison = _follow(raw, queue_links, response=queues, path_params={}, session=session, base=served)["getPoison"]
    assert poison.status_code == 200 and poison.json()["messages"], poison.text
    name = poison.json()["queue"]
    poison_links = raw["paths"]["/api/queues/{name}/poison"]["get"]["responses"]["200"]["links"]
    requeue_link = {k: v for k, v in poison_links.items() if v["operationId"] == "requeuePoison"}
    purge_link = {k: v for k, v in poison_links.items() if v["operationId"] == "purgePoison"}
    requeued = _follow(raw, requeue_link, response=poison, path_params={"name": name}, session=session, base=served)[
        "requeuePoison"
    ]
    again = session.get(f"{served}/api/queues/{name}/poison")
    purged = _follow(raw, purge_link, response=again, path_params={"name": name}, session=session, base=served)[
        "purgePoison"
    ]
    statuses = {
        "getPoison": poison.status_code,
        "requeuePoison": requeued.status_code,
        "purgePoison": purged.status_code,
    }
    assert all(200 <= status < 300 for status in statuses.values()), (statuses, requeued.text, purged.text)


def _labels(schema: Any, operation_ids: list[str]) -> set[str]:
    raw = schema.raw_schema
    return {
        f"{method.upper()} {path}"
        for path, item in raw["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and op.get("operationId") in operation_ids
    }


def operations_with_ids(schema: Any) -> set[str]:
    """Every operation that takes a server-issued id: in its path, or in a body a link fills."""
    raw = schema.raw_schema
    by_id = {
        op.get("operationId"): f"{method.upper()} {path}"
        for path, item in raw["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "operationId" in op
    }
    labels = {
        f"{method.upper()} {path}"
        for path, item in raw["paths"].items()
        if "{" in path
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    for item in raw["paths"].values():
        for op in item.values():
            for response in (op.get("responses", {}) if isinstance(op, dict) else {}).values():
                for link in response.get("links", {}).values():
                    if "requestBody" in link:
                        labels.add(by_id[link["operationId"]])
    return labels


def test_the_pipeline_roles_kept_running(pipeline: Any) -> None:
    """The fuzzing must not have killed a role (a crash would leave jobs half-done)."""
    dead = [r.role for r in pipeline.roles if not r.alive()]
    assert dead == [], f"roles died during the fuzz: {dead}\n{pipeline.logs()}"
