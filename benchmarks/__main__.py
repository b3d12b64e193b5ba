"""``python -m benchmarks [name ...] [--option ...]``: run every benchmark module, or the ones named.

Options after the names go to each named benchmark's ``main(argv)`` (e.g. ``python -m
benchmarks libraries --photos 40``); without options ``main()`` runs with its defaults.

A benchmark is a module ``benchmarks/<name>.py`` with a ``main()``; they run in a fixed
order (``ORDER`` first, then the rest alphabetically) so that `make bench` output is stable.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import time

import benchmarks

ORDER = ("engine", "pipeline", "runtime")


def available() -> list[str]:
    names = []
    for info in pkgutil.iter_modules(benchmarks.__path__):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        if callable(getattr(module, "main", None)):
            names.append(info.name)
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def run(argv: list[str]) -> int:
    names = available()
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{__doc__}\nAvailable: {', '.join(names)}. Each one's options: python -m benchmarks NAME --help")
        return 0
    first_option = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    wanted, options = argv[:first_option] or names, argv[first_option:]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    if options:  # options belong to the benchmarks named before them, each of which must take them
        if not argv[:first_option]:
            print("options go after the benchmarks they are for: python -m benchmarks NAME --option", file=sys.stderr)
            return 2
        without = [n for n in wanted if not _takes_options(n)]
        if without:
            print(f"{', '.join(without)} take(s) no options", file=sys.stderr)
            return 2
    for name in wanted:
        print(f"\n=== benchmark: {name} ===", flush=True)
        start = time.perf_counter()
        module = importlib.import_module(f"benchmarks.{name}")
        result = module.main(options) if options else module.main()
        print(f"=== {name} finished in {time.perf_counter() - start:.0f} s ===", flush=True)
        if isinstance(result, int) and result:
            return result
    return 0


def _takes_options(name: str) -> bool:
    """Whether ``benchmarks.<name>.main`` accepts an argv."""
    main = importlib.import_module(f"benchmarks.{name}").main
    return bool(inspect.signature(main).parameters)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
