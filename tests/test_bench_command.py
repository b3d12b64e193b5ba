"""``python -m benchmarks``: a wrong command line is one clear line and exit 2, never a traceback."""

from __future__ import annotations

from typing import Any

from benchmarks.__main__ import available, run


def test_help_lists_every_benchmark(capsys: Any) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "python -m benchmarks [name ...]" in out and all(name in out for name in available())


def test_options_without_a_benchmark_or_for_one_that_takes_none_are_refused(capsys: Any) -> None:
    assert run(["--photos", "3"]) == 2  # was: every benchmark's main() called with them, a TypeError
    assert "options go after the benchmarks they are for" in capsys.readouterr().err
    assert run(["engine", "--photos", "3"]) == 2
    assert "engine take(s) no options" in capsys.readouterr().err
    assert run(["no-such-benchmark"]) == 2
    assert "unknown benchmark(s): no-such-benchmark" in capsys.readouterr().err
