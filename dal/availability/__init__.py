"""Availability: staying up when storage is throttled, misconfigured or down.

- ``failover``: writes that fail over to a paired secondary account (backlog queues); ``dal.operations.syphon``
  moves them back.
- ``health``: the start-up check that fails loudly on a wrong account or key.
- ``storage_status``: what a supervised embedded Azurite is doing, for /healthz.
"""
