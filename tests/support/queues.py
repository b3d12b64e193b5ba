"""Work queues a test makes for itself: created with the settings it names, deleted after it."""

from __future__ import annotations

from dal.queues.work_queue import ImageProcessingQueue


def drop_queue(queue: ImageProcessingQueue) -> None:
    """Delete a test's work queue and its poison queue."""
    queue._client.delete_queue()
    queue.poison._client.delete_queue()
