"""Jobs: job state and the job event log in Azure Tables.

- ``model``: ``Job``, ``JobEvent`` and ``JobStatus``, and how they map to table entities.
- ``store``: ``JobStore``, reads and ETag-guarded updates.
"""
