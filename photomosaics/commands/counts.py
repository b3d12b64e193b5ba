"""How many processes a command may start: a few per CPU this process may use. A typo such as
``--processors 100000`` forked until the machine's memory was gone; more processes than that
only compete for the same cores."""

from __future__ import annotations

import os

import click

PROCESSES_PER_CPU = 4


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's or ``taskset``'s share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def process_count(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    """A click callback: ``value`` processes (None: the command's default), at most
    ``PROCESSES_PER_CPU`` per usable CPU."""
    most = PROCESSES_PER_CPU * usable_cpus()
    if value is not None and value > most:
        raise click.BadParameter(
            f"at most {most} on this machine ({PROCESSES_PER_CPU} per CPU it may use, {usable_cpus()}); got {value}"
        )
    return value
