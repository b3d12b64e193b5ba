"""Reading Prometheus text in tests: every sample by name and labels, and sums over labels."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value_of(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum over samples of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))
