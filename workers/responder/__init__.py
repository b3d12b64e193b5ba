"""The responder role: short storage-only work on the web side of the workflow.

- ``responder``: ``Responder``, the handler of ``imageresponse`` (marks the job done if it is not).
- ``cleaner``: ``JobCleaner``, the handler of ``jobcleanup`` (a job's blobs and rows, or a tile library).
"""
