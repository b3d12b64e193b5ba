"""Send availability: a paired secondary account, backlog queues and the syphon (``dal.availability.failover``).

Two real Azurites stand in for the two accounts. The primary is reached through the fault
proxy (``tests/support/faultproxy.py``), whose ``reset`` fault cuts every connection: the stand-in for
an account that is unreachable (Azurite cannot be made unreachable and back on demand
without a restart, and a restart is exercised elsewhere).
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dal.availability.failover import (
    SECONDARY_CONNECTION_STRING_ENV,
    FailoverSender,
    backlog_queues,
    parse_backlog_envelope,
    primary_failed,
    secondary_from_env,
)
from dal.config import CONNECTION_STRING_ENV, Settings, StorageClients
from dal.observability.transactions import TransactionCounter
from dal.operations.syphon import Syphon
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import ImageRequestMessage
from dal.retry import RETRY_SCALE_ENV
from dal.stores import Stores
from photomosaics.local.azurite import Azurite, AzuriteError, find_azurite_script
from tests.support.faultproxy import faulty_account
from tests.support.pipelines import Pipeline, sample_photo, synthetic_library
from tests.support.prereqs import require
from tests.support.waiting import wait_for
from webapp import create_app
from webapp.csrf import CSRF_HEADER, CSRF_VALUE

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def secondary_connection_string() -> Iterator[str]:
    """A second Azurite: the paired secondary account."""
    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))
    with Azurite() as azurite:
        yield azurite.connection_string


def request(queues: QueueAccessor, n: int) -> ImageRequestMessage:
    rid = str(uuid.uuid4())
    return ImageRequestMessage(
        queue_uri=queues.image_request.url,
        client_id="alice",
        request_id=rid,
        image_uri=f"http://127.0.0.1/acct/imageinput/{rid}.jpg",
        image_library_uri="http://127.0.0.1/acct/flowers",
        tile_size=8,
        slices=n % 3 + 1,
    )


def test_only_unreachable_or_5xx_fails_over_and_never_server_busy() -> None:
    from azure.core.exceptions import HttpResponseError, ServiceRequestError

    assert primary_failed(ServiceRequestError("connection refused"))
    busy = HttpResponseError("busy")
    busy.status_code, busy.error_code = 503, "ServerBusy"
    assert not primary_failed(busy)
    timed_out = HttpResponseError("timed out")
    timed_out.status_code, timed_out.error_code = 500, "OperationTimedOut"
    assert primary_failed(timed_out)
    bad = HttpResponseError("bad")
    bad.status_code = 400
    assert not primary_failed(bad)


def test_cut_primary_fails_over_to_backlog_and_the_syphon_drains_it_once(
    azurite_connection_string: str, secondary_connection_string: str, unique: str
) -> None:
    prefix = f"f{unique}"
    QueueAccessor(StorageClients(azurite_connection_string, profile="probe"), prefix=prefix).ensure_all()
    secondary_counter = TransactionCounter()
    secondary = StorageClients(secondary_connection_string, profile="probe", response_hook=secondary_counter)
    with faulty_account(azurite_connection_string, faults={"reset": 1.0}) as account:
        stores = Stores(StorageClients(account.connection_string, profile="probe"), Settings(name_prefix=prefix))
        primary = stores.queues
        sender = FailoverSender(primary, secondary, stay_on_secondary=0.0)
        syphon = Syphon(stores, secondary)

        # Healthy primary: the secondary is not touched at all (cost: zero transactions).
        first = request(primary, 0)
        assert sender.submit(first) == "primary"
        assert secondary_counter.total() == 0, secondary_counter.snapshot()

        # Primary cut: every send lands in a backlog queue on the secondary; the syphon waits.
        account.set_active(True)
        parked = [request(primary, n) for n in range(1, 11)]
        assert [sender.submit(m) for m in parked] == ["secondary"] * 10
        assert syphon.run_once() == 0
        backlogged = [
            parse_backlog_envelope(t.text)
            for q in backlog_queues(secondary, prefix, 3)
            for t in q.take_texts(32, visibility_timeout=1)
        ]
        assert sorted(payload for _, payload in backlogged) == sorted(m.payload() for m in parked)
        assert {queue for queue, _ in backlogged} == {primary.image_request.name}
        # The take above hid them for 1 s: wait until a peek sees all ten again.
        raw = [secondary.queue_service.get_queue_client(q.name) for q in backlog_queues(secondary, prefix, 3)]
        wait_for(lambda: sum(len(c.peek_messages(max_messages=32)) for c in raw) == 10, what="the backlog visible")

        # Primary back: the syphon moves all ten, once; the backlog ends empty.
        account.set_active(False)
        assert syphon.run_once() == 10
        assert syphon.run_once() == 0
        for q in backlog_queues(secondary, prefix, 3):
            assert q.approximate_depth() == 0

    direct = QueueAccessor(StorageClients(azurite_connection_string, profile="probe"), prefix=prefix)
    peeked = direct.image_request.peek(32)
    assert all(p.error is None for p in peeked)
    ids = sorted(p.message.request_id for p in peeked if p.message is not None)
    assert ids == sorted(m.request_id for m in [first, *parked])  # nothing lost, nothing twice


def test_the_secondary_is_optional(secondary_connection_string: str) -> None:
    assert secondary_from_env({}) is None
    assert secondary_from_env({SECONDARY_CONNECTION_STRING_ENV: "  "}) is None
    configured = secondary_from_env({SECONDARY_CONNECTION_STRING_ENV: secondary_connection_string})
    assert configured is not None and configured.account_name == "devstoreaccount1"


# --- the whole pipeline across an outage of the primary ------------------------------------

JOBS_DURING_OUTAGE = 10


def _post_job(client: Any, image: bytes, *, slices: int) -> Any:
    return client.post(
        "/api/jobs",
        data={"image": (io.BytesIO(image), "photo.png"), "library": "tiles", "tile_size": "8", "slices": str(slices)},
        headers={CSRF_HEADER: CSRF_VALUE},
    )


def _wait_done(client: Any, ids: list[str], pipe: Pipeline, *, timeout: float) -> dict[str, dict[str, Any]]:
    finished: dict[str, dict[str, Any]] = {}

    def all_ended() -> bool:
        for rid in ids:
            if rid not in finished:
                body = client.get(f"/api/jobs/{rid}").get_json()
                # The responder writes the row's status, then the event: wait for both.
                ended = body["status"] in ("done", "failed") and not body["waiting_for_storage"]
                if ended and body["status"] in {e["kind"] for e in body["events"]}:
                    finished[rid] = body
        return len(finished) == len(ids)

    unfinished = lambda: f"{sorted(set(ids) - set(finished))}\n{pipe.logs()}"  # noqa: E731
    wait_for(all_ended, seconds=timeout, step=0.3, what="every job ended", details=unfinished)
    return finished


def test_jobs_submitted_while_the_primary_is_cut_finish_once_it_is_back(
    azurite_connection_string: str, secondary_connection_string: str, tmp_path: Path
) -> None:
    """Cut the primary, submit 10 jobs (all 202, shown as waiting for storage), restore it:
    all 10 finish pixel-identical to the offline render, each stitched once, the backlog and the
    secondary end empty, and every job row is back on the primary."""
    pipe = Pipeline(azurite_connection_string, tmp_path)
    library = synthetic_library()
    pipe.create_library("tiles", library)
    secondary = StorageClients(secondary_connection_string, profile="probe")
    with faulty_account(azurite_connection_string, faults={"reset": 1.0}) as account:
        env = {
            CONNECTION_STRING_ENV: account.connection_string,
            SECONDARY_CONNECTION_STRING_ENV: secondary_connection_string,
            "PHOTOMOSAICS_SYPHON_INTERVAL": "0.5",
            RETRY_SCALE_ENV: "0.05",
        }
        for role in ("controller", "processor", "responder", "syphon"):
            pipe.start(role, env=env)
        app = create_app(
            {
                "SECRET_KEY": "failover-test-secret-key-of-32-chars",
                "TESTING": True,
                "SETTINGS": pipe.settings,
                "CONNECTION_STRING": account.connection_string,
                "SECONDARY_CONNECTION_STRING": secondary_connection_string,
            }
        )
        client = app.test_client()
        try:
            # Healthy: a job goes the usual way (and proves every role is up before the cut).
            healthy = _post_job(client, sample_photo(24, 18, seed=900), slices=2)
            assert healthy.status_code == 202, healthy.get_json()
            first = healthy.get_json()["request_id"]
            assert _wait_done(client, [first], pipe, timeout=60)[first]["status"] == "done"

            account.set_active(True)  # the primary is unreachable: every connection is reset
            photos = {n: sample_photo(24, 18, seed=910 + n) for n in range(JOBS_DURING_OUTAGE)}
            ids, plan = [], {}
            for n, image in photos.items():
                answer = _post_job(client, image, slices=n % 3 + 1)
                assert answer.status_code == 202, answer.get_json()
                rid = answer.get_json()["request_id"]
                ids.append(rid)
                plan[rid] = (image, n % 3 + 1)
            for rid in ids:
                body = client.get(f"/api/jobs/{rid}").get_json()
                assert (body["status"], body["waiting_for_storage"]) == ("queued", True), body
            listed = {
                j["request_id"]: j["waiting_for_storage"] for j in client.get("/api/jobs?limit=50").get_json()["jobs"]
            }
            assert all(listed.get(rid) is True for rid in ids), listed
            # The workers keep failing on the primary meanwhile (the proxy resets their calls); nothing may be lost.
            resets = account.counts()["reset"]
            wait_for(
                lambda: account.counts()["reset"] >= resets + 10, seconds=30, what="the workers failing on the primary"
            )

            account.set_active(False)  # the primary is back: the syphon moves the backlog
            finished = _wait_done(client, ids, pipe, timeout=150)
        finally:
            account.set_active(False)
            codes = [role.stop() for role in pipe.roles]
    assert codes == [0] * len(codes), f"every role ends with exit 0 after SIGTERM\n{pipe.logs()}"

    from mosaic.images import open_image
    from mosaic.render import render
    from workers.imaging.slicing import encode_output

    for rid, body in finished.items():
        image, slices = plan[rid]
        assert body["status"] == "done", body
        expected = render(
            open_image(image),
            library,
            tile_size=8,
            slices=slices,
            seed=rid,
            max_output_pixels=pipe.settings.max_output_pixels,
        )
        direct = client_free_job(pipe, rid)
        assert pipe.output_bytes(direct) == encode_output(expected), f"job {rid}: output differs from the render"
        kinds = [e["kind"] for e in body["events"]]
        assert kinds.count("stitched") == 1 and kinds.count("done") == 1, kinds
        assert kinds.count("submitted") == 1, kinds  # the event written on the secondary came along

    # Nothing left behind on the secondary, nothing stuck on the primary.
    for q in backlog_queues(secondary, pipe.prefix, 3):
        assert q.approximate_depth() == 0, q.name
    left = Stores(secondary, pipe.settings)
    assert all(left.jobs.get(direct.client_id, rid) is None for rid in ids)
    assert list(left.blobs.list_names("imageinput")) == []
    depths = pipe.queue_depths()
    assert all(depth == 0 for depth in depths.values()), depths


def client_free_job(pipe: Pipeline, request_id: str) -> Any:
    """The job row on the primary, whatever its client id (the web's cookie made it)."""
    rows = pipe.services.jobs._jobs.query_entities("RowKey eq @rk", parameters={"rk": request_id})
    from dal.jobs.model import job_from_entity

    found = [job_from_entity(r) for r in rows]
    assert len(found) == 1, f"job {request_id} is on the primary {len(found)} times"
    return found[0]


def test_run_starts_a_syphon_only_when_a_secondary_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from photomosaics.local.children import children

    monkeypatch.delenv(SECONDARY_CONNECTION_STRING_ENV, raising=False)
    common = dict(
        connection_string="UseDevelopmentStorage=true", secret_key="k", host="127.0.0.1", port=1, processors=1
    )
    assert "syphon" not in [c.name for c in children(**common)]  # type: ignore[arg-type]
    paired = children(**common, shared={SECONDARY_CONNECTION_STRING_ENV: "UseDevelopmentStorage=true"})  # type: ignore[arg-type]
    syphon = [c for c in paired if c.name == "syphon"]
    assert len(syphon) == 1 and syphon[0].argv[-1] == "syphon"
    assert all(c.env[SECONDARY_CONNECTION_STRING_ENV] for c in paired)  # every role can fail over and read both
