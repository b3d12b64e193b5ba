"""Queues: typed messages on Azure Storage queues, at-least-once, with poison handling.

- ``messages``: the typed, versioned queue messages (``QueueMessage`` and its subclasses).
- ``message_fields``: the rules each message field obeys, and the id patterns.
- ``work_queue``: ``ImageProcessingQueue`` (receive, send, renew, poison).
- ``queue_settings``: a queue's poison threshold and default invisibility, from its metadata.
- ``accessor``: ``QueueAccessor``, the workflow's queues by name, lane and shard.
- ``stored_queue`` and ``wire``: the text on the wire (Base64, claim checks, poison envelopes).
- ``tracing``: OpenTelemetry traces that follow a job across the queues.
- ``shards`` and ``lanes``: ``slicerequest`` split into K queues, or into priority lanes.
"""
