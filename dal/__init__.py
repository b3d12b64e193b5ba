"""The storage layer: everything the roles know about Azure Storage, in one room per concern.

- ``queues``: typed messages and the work queues (poison, claim checks, shards, lanes).
- ``blobs``: workflow containers, streamed uploads, tile libraries, Deep Zoom pyramids.
- ``jobs``: job state and events in Azure Tables.
- ``admission``: quotas and backpressure, whether a new job is taken.
- ``availability``: failover to a secondary account, health checks.
- ``hints``: wake-up hints that let listeners sleep until work arrives.
- ``observability``: transaction counting and Prometheus metrics.
- ``operations``: job cleanup, retention, poison-queue actions, the syphon.
- ``config``, ``connection_strings``, ``retry``, ``names``, ``errors``: settings and clients,
  connection strings, the retry policy (ServerBusy waits), the name prefix, and the storage
  layer's exceptions.
- ``stores``: the stores one process holds, assembled from the rooms.

The rooms' allowed directions are declared in ``tests/test_layers.py``.
"""
