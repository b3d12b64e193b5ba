"""The queue runtime: the engine every role runs on, whatever its handlers do.

- ``listener``: ``QueueListener``, receives batches and runs a handler per message, at least once.
- ``leases``: a held message's pop receipt, its renewal thread, and the lease journal.
- ``elastic``: ``ElasticPool``, how many handlers run at once (grows on a backlog).
- ``backoff``: the idle poll delay and the retry delays, as pure functions.
- ``settling``: ``MessageRunner``, runs one held message and deletes, retries or poisons it.
- ``hint_credit``: wake-up hints heard, taken notices, and the credit they leave.
- ``errors``: what a handler raises to say how its message ended (``PermanentJobError``, ``RetryLater``).
- ``counters``: a listener's statistics.
- ``logfmt``: ``key=value`` log lines, with the message's fields on every line of its handler.
- ``observability``: a role's /metrics and /healthz endpoint.
- ``role``: a role process: its listeners' threads, signals, logging and exit code.

Nothing here knows a role: the runtime imports no other room of ``workers``.
"""
