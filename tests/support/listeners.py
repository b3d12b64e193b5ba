"""A listener on a real queue, for tests: a message to send, a fast-polling listener, a thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from dal.queues.messages import SliceResponseMessage
from dal.queues.work_queue import ImageProcessingQueue, ReceivedMessage
from workers.runtime.listener import QueueListener


def message(queue: ImageProcessingQueue, seq: int = 0) -> SliceResponseMessage:
    return SliceResponseMessage(
        queue_uri=queue.url,
        client_id="tester",
        request_id=str(uuid.uuid4()),
        slice_uri=f"http://127.0.0.1:10000/devstoreaccount1/sliceresponse/x/{seq}.png",
        slice_sequence=seq,
    )


def listener(
    queue: ImageProcessingQueue, handler: Callable[[ReceivedMessage], None], **options: object
) -> QueueListener:
    defaults: dict[str, object] = {"name": "test", "poll_min": 0.05, "poll_max": 0.2, "retry_delay": 1.0, "grace": 10.0}
    return QueueListener(queue, handler, **{**defaults, **options})  # type: ignore[arg-type]


def in_thread(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread
