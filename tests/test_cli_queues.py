"""``photomosaics queues`` against a real Azurite: depths, poison counts and reasons."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dal.config import CONNECTION_STRING_ENV, Settings, StorageClients
from dal.queues.accessor import QueueAccessor
from photomosaics.cli import main


def test_queues_shows_depths_poison_counts_and_reasons(
    azurite_connection_string: str, storage: StorageClients, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"c{unique}"
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", prefix)
    accessor = QueueAccessor(storage, settings=Settings.from_env(), prefix=prefix)
    accessor.ensure_all()
    client = storage.queue_service.get_queue_client(accessor.slice_request.name)
    client.send_message("aGVsbG8=")  # Base64 of "hello": valid wire text, not a message
    client.send_message("aGVsbG8=")
    assert accessor.slice_request.accept_messages() == []  # both moved to poison with their reason

    runner = CliRunner()
    result = runner.invoke(main, ["queues", "--poison"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[1:5]}
    assert lines[f"{prefix}slicerequest"] == ["0", "2"]
    assert lines[f"{prefix}imagerequest"] == ["0", "0"]
    assert f"{prefix}slicerequest-poison:" in result.output
    assert result.output.count("dequeue count 1: QueueMessageFormatException") == 2
