"""Admission: whether the web app takes a new job.

- ``quotas``: per-client limits on unfinished jobs and submissions per minute.
- ``backpressure``: refuse new work while the queued work would take too long.
- ``render_rates``: the processors' measured capacity that backpressure divides by.
"""
