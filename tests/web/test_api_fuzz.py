"""The API against its own contract, with the standard OpenAPI fuzzer (schemathesis, pinned).

Every operation of ``webapp/openapi.yaml`` is fuzzed with all of schemathesis' checks
(server errors, status codes, content types, headers and bodies against the spec, negative
data rejected, positive data accepted, ...), then the stateful phase follows the spec's
``links`` from ``POST /api/jobs`` and ``POST /api/libraries`` to every operation that takes
their ids. The app is a real ``create_app`` on the session's Azurite, served on a loopback
port; one ``requests.Session`` keeps the ``pm_client`` cookie between calls, as any
non-browser client must. Examples are bounded and the seed fixed, so CI is fast and
repeatable; ``PHOTOMOSAICS_FUZZ_SEED`` / ``PHOTOMOSAICS_FUZZ_EXAMPLES`` run it wider by hand.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, seed, settings

from dal.config import Settings
from tests.web.conftest import SECRET
from tests.web.conftest import served as serving
from webapp.csrf import CSRF_HEADER, CSRF_VALUE

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("PHOTOMOSAICS_FUZZ_SEED", "20261123"))
EXAMPLES = int(os.environ.get("PHOTOMOSAICS_FUZZ_EXAMPLES", "10"))
STATEFUL_STEPS = int(os.environ.get("PHOTOMOSAICS_FUZZ_STEPS", "6"))
ADMIN_TOKEN = "fuzz-operator-token"


@pytest.fixture(scope="module")
def served(web_settings: Settings, azurite_connection_string: str, tile_library: str) -> Iterator[str]:
    from webapp import create_app

    # The spec states the default limits (e.g. 64 slices); the other web tests lower some.
    limits = replace(web_settings, max_slices=64)
    app = create_app(
        {"SECRET_KEY": SECRET, "SETTINGS": limits, "CONNECTION_STRING": azurite_connection_string,
         "SSE_POLL_SECONDS": 0.05, "SSE_MAX_SECONDS": 2.0, "ADMIN_TOKEN": ADMIN_TOKEN}  # fmt: skip
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
    from dal.libraries import InvalidLibraryNameError, validate_library_name

    try:
        validate_library_name(name)
    except InvalidLibraryNameError:
        return False
    return True


def load_schema(base_url: str) -> Any:
    import schemathesis

    from tests.web.fuzz_strategies import register

    register()
    # The served spec, not the file: it states the library-name length this deployment's
    # name prefix leaves (webapp/spec.py), as a client generator would read it.
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.yaml")
    schema.config.update(base_url=base_url)
    # 422 is this API's answer to a well-formed request that this photo cannot satisfy (a
    # 1 × 1,000,000 px photo has no mosaic under the output limit): declared in the spec.
    acceptance = schema.config.checks.positive_data_acceptance
    acceptance.expected_statuses = [*acceptance.expected_statuses, "422"]
    return schema


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def test_every_operation_keeps_its_contract(served: str) -> None:
    schema = load_schema(served)
    session = client_session()
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @seed(SEED)
        @FUZZ_SETTINGS
        @given(case=operation.as_strategy())
        def fuzz(case: Any) -> None:
            case.call_and_validate(session=session, base_url=served)

        try:
            fuzz()
        except Exception as exc:  # collect all operations' findings, not just the first
            failures.append(f"{operation.label}: {exc}")
    assert failures == [], "\n\n".join(failures)


def test_stateful_workflows_follow_the_links(served: str) -> None:
    schema = load_schema(served)
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
                return super().step(input)
            except Exception as exc:  # the server keeps state, so Hypothesis' replay may differ:
                found.append(f"{input.case.operation.label}: {type(exc).__name__}: {exc}")  # keep the first word
                raise

    try:
        Workflow.run(
            settings=settings(
                max_examples=EXAMPLES,
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
