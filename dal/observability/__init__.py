"""Observability of the storage layer.

- ``transactions``: counting storage transactions (what a job and an idle hour cost).
- ``prometheus``: the storage metrics every process exports.

Traces across the queues live with the queues (``dal.queues.tracing``).
"""
