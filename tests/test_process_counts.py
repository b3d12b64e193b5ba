"""A command starts a few processes per CPU at most: ``--processors 100000`` once forked until
the machine's memory was gone. Refused as a usage error before anything starts."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from dal.config import CONNECTION_STRING_ENV
from photomosaics.cli import main
from photomosaics.commands import counts


@pytest.fixture
def one_cpu(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(counts, "usable_cpus", lambda: 1)
    return counts.PROCESSES_PER_CPU


@pytest.mark.parametrize(("command", "option"), [("run", "--processors"), ("web", "--workers")])
def test_more_processes_than_a_few_per_cpu_are_refused_before_anything_starts(
    one_cpu: int, monkeypatch: pytest.MonkeyPatch, command: str, option: str
) -> None:
    monkeypatch.delenv(CONNECTION_STRING_ENV, raising=False)
    result = CliRunner().invoke(main, [command, option, str(one_cpu + 1)])
    assert result.exit_code == 2, result.output
    assert f"at most {one_cpu} on this machine ({one_cpu} per CPU it may use, 1); got {one_cpu + 1}" in result.output


def test_a_count_within_the_bound_or_none_is_kept(one_cpu: int) -> None:
    context, option = click.Context(main), click.Option(["--processors"])
    assert counts.process_count(context, option, one_cpu) == one_cpu
    assert counts.process_count(context, option, None) is None  # the command's own default


@pytest.mark.parametrize("option", ["--concurrency", "--min-concurrency"])
def test_a_role_handles_at_most_64_messages_at_once_per_queue(option: str) -> None:
    result = CliRunner().invoke(main, ["controller", option, "65"])
    assert result.exit_code == 2 and "1<=x<=64" in result.output
