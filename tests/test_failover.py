"""Send availability: a paired secondary account, backlog queues and the syphon (``dal.failover``).

Two real Azurites stand in for the two accounts. The primary is reached through the fault
proxy (``tests/faultproxy.py``), whose ``reset`` fault cuts every connection: the stand-in for
an account that is unreachable (Azurite cannot be made unreachable and back on demand
without a restart, and a restart is exercised elsewhere).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from dal.azurite import Azurite, AzuriteError, find_azurite_script
from dal.config import StorageClients
from dal.failover import (
    SECONDARY_CONNECTION_STRING_ENV,
    FailoverSender,
    Syphon,
    backlog_queues,
    primary_failed,
    secondary_from_env,
)
from dal.messages import ImageRequestMessage
from dal.metrics import TransactionCounter
from dal.queues import QueueAccessor
from tests.conftest import require
from tests.faultproxy import faulty_account

pytestmark = pytest.mark.timeout(120)


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
        queue_uri=queues.image_request.url, client_id="alice", request_id=rid,
        image_uri=f"http://127.0.0.1/acct/imageinput/{rid}.jpg", image_library_uri="http://127.0.0.1/acct/flowers",
        tile_size=8, slices=n % 3 + 1,
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
        primary = QueueAccessor(StorageClients(account.connection_string, profile="probe"), prefix=prefix)
        sender = FailoverSender(primary, secondary, stay_on_secondary=0.0)
        syphon = Syphon(primary, secondary)

        # Healthy primary: the secondary is not touched at all (cost: zero transactions).
        first = request(primary, 0)
        assert sender.submit(first) == "primary"
        assert secondary_counter.total() == 0, secondary_counter.snapshot()

        # Primary cut: every send lands in a backlog queue on the secondary; the syphon waits.
        account.set_active(True)
        parked = [request(primary, n) for n in range(1, 11)]
        assert [sender.submit(m) for m in parked] == ["secondary"] * 10
        assert syphon.run_once() == 0
        backlogged = [json.loads(m.content) for q in backlog_queues(secondary, prefix, 3)
                      for m in q._client.peek_messages(max_messages=32)]
        assert sorted(b["payload"] for b in backlogged) == sorted(m.payload() for m in parked)
        assert {b["queue"] for b in backlogged} == {primary.image_request.name}

        # Primary back: the syphon moves all ten, once; the backlog ends empty.
        account.set_active(False)
        assert syphon.run_once() == 10
        assert syphon.run_once() == 0
        for q in backlog_queues(secondary, prefix, 3):
            assert list(q._client.peek_messages(max_messages=32)) == []

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
