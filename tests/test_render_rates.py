"""Measured render rates (dal.admission.render_rates) against the session's Azurite: a processor's
moving average is written at most once per interval, and only fresh rows count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dal.admission.render_rates import FRESH_SECONDS, RateMeter, RenderRates
from dal.config import StorageClients
from dal.observability.transactions import TransactionCounter


def test_a_meter_writes_its_average_at_most_once_per_interval(azurite_connection_string: str, unique: str) -> None:
    counter = TransactionCounter()
    rates = RenderRates(
        StorageClients(azurite_connection_string, profile="probe", response_hook=counter), prefix=f"r{unique}"
    )
    rates.ensure_table()
    meter = RateMeter(rates, "processor@host:1", interval=30)
    before = counter.total()
    meter.observe(2.0, clock=100.0)  # the first slice is reported at once
    meter.observe(4.0, clock=110.0)  # within the interval: memory only
    meter.observe(4.0, clock=120.0)
    assert counter.total() - before == 1
    assert rates.capacity().slices_per_second == 0.5
    meter.observe(4.0, clock=131.0)  # the interval is over: the moving average is written
    assert counter.total() - before == 3  # + the capacity query above
    average = 0.8 * (0.8 * (0.8 * 2.0 + 0.2 * 4.0) + 0.2 * 4.0) + 0.2 * 4.0
    assert abs(rates.capacity().slices_per_second - 1 / average) < 1e-9


def test_capacity_sums_the_fresh_processors_only(azurite_connection_string: str, unique: str) -> None:
    rates = RenderRates(StorageClients(azurite_connection_string, profile="probe"), prefix=f"r{unique}")
    rates.ensure_table()
    assert rates.capacity().slices_per_second is None  # nothing measured: unknown, not zero
    now = datetime.now(UTC)
    rates.record("processor@a:1", seconds_per_slice=2.0, slices=5, now=now)
    rates.record("processor@b:1", seconds_per_slice=4.0, slices=5, now=now - timedelta(seconds=10))
    rates.record("processor@c:1", seconds_per_slice=1.0, slices=5, now=now - timedelta(seconds=FRESH_SECONDS + 60))
    capacity = rates.capacity(now=now)
    assert capacity.processors == 2
    assert capacity.slices_per_second == 0.75
