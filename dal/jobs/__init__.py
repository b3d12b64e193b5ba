"""Jobs: job state and the job event log in Azure Tables.

- ``model``: ``Job``, ``JobEvent`` and ``JobStatus``, and how they map to table entities.
- ``store``: ``JobStore``, reads and ETag-guarded updates.
- ``events``: ``JobEventLog``, the job event log (table ``jobevents``).
- ``tables``: the tables' name rule, the batch size, a missing table said as such.
"""
