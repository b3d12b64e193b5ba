"""Queues: typed messages on Azure Storage queues, at-least-once, with poison handling.

- ``messages``: the typed, versioned queue messages (``QueueMessage`` and its subclasses).
- ``message_fields``: the rules each message field obeys, and the id patterns.
- ``work_queue``: ``ImageProcessingQueue`` (receive, send, renew, poison) and ``QueueAccessor``.
- ``stored_queue`` and ``wire``: the text on the wire (Base64, claim checks, poison envelopes).
- ``tracing``: OpenTelemetry traces that follow a job across the queues.
- ``shards`` and ``lanes``: ``slicerequest`` split into K queues, or into priority lanes.
"""
