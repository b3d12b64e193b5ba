"""A listener on a real queue, for tests: a message to send, a fast-polling listener, a thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from dal.queues.consumable import Consumable, ReceivedMessage
from dal.queues.messages import SliceResponseMessage
from dal.queues.work_queue import ImageProcessingQueue
from workers.runtime.listener import QueueListener
from workers.runtime.listener_options import ListenerOptions


def message(queue: ImageProcessingQueue, seq: int = 0) -> SliceResponseMessage:
    return SliceResponseMessage(
        queue_uri=queue.url,
        client_id="tester",
        request_id=str(uuid.uuid4()),
        slice_uri=f"http://127.0.0.1:10000/devstoreaccount1/sliceresponse/x/{seq}.png",
        slice_sequence=seq,
    )


COLLABORATORS = ("name", "hints", "journal", "on_poison", "rng")


def listener(queue: Consumable, handler: Callable[[ReceivedMessage], None], **given: Any) -> QueueListener:
    """A fast-polling listener: ``given`` mixes its collaborators and its ``ListenerOptions`` fields."""
    collaborators = {key: given.pop(key) for key in COLLABORATORS if key in given}
    options = ListenerOptions(**{"poll_min": 0.05, "poll_max": 0.2, "retry_delay": 1.0, "grace": 10.0, **given})
    return QueueListener(queue, handler, **{"name": "test", **collaborators}, options=options)


def in_thread(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread
