"""A tiny role process for the signal tests: its handler sleeps, leaving marker files.

Run as ``python tests/support/sleep_role.py --prefix P --markers DIR --seconds S``; it consumes the
``<P>sliceresponse`` queue with the real listener and role machinery (``workers.runtime.role``), so
the test exercises exactly what ``photomosaics processor`` does on SIGTERM.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dal.queues.accessor import QueueAccessor
from dal.queues.consumable import ReceivedMessage
from workers.runtime.listener import QueueListener
from workers.runtime.listener_options import ListenerOptions
from workers.runtime.role import Role, configure_role_logging, exit_role, run_role, storage_from_env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--markers", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--prefetch", type=int, default=0)
    parser.add_argument("--grace", type=float, default=20.0)
    args = parser.parse_args()

    configure_role_logging("sleeper")
    storage = storage_from_env(role="sleeper")
    queue = QueueAccessor(storage, prefix=args.prefix).slice_response

    def handle(received: ReceivedMessage) -> None:
        seq = received.message.slice_sequence  # type: ignore[attr-defined]
        (args.markers / f"started-{seq}").touch()
        time.sleep(args.seconds)  # ordinary handler code: it does not know about signals
        (args.markers / f"done-{seq}").touch()

    options = ListenerOptions(concurrency=args.concurrency, prefetch=args.prefetch, poll_min=0.05, poll_max=0.5)
    listener = QueueListener(queue, handle, name="sleeper", options=options)
    exit_role(run_role(Role("sleeper", [listener], grace=args.grace)))


if __name__ == "__main__":
    main()
