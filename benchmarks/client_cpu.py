"""Storage client CPU per request: the HTTP environment read on every request, or once.

``python -m benchmarks client_cpu``: an in-memory Azurite and an empty queue, and two queue
clients side by side, alike but for one thing. One has the Azure SDK's default, which reads
the proxies and CA bundle from the environment for every request. The other reads them once,
with the keywords ``StorageClients`` gives every client (``dal.http_environment``). Both time one empty receive, which is what an
idle listener sends all day. Client CPU per receive, best of 5 rounds of 300, alternated,
with this process's environment and with 160 variables more, as a Kubernetes pod gets for
the services of its namespace.
"""

from __future__ import annotations

import os
import time
from typing import Any

ROUNDS, CALLS = 5, 300
SERVICE_VARIABLES = 160


def _per_receive(queues: dict[str, Any]) -> dict[str, float]:
    best = dict.fromkeys(queues, float("inf"))
    for _ in range(ROUNDS):
        for name, queue in queues.items():
            start = time.process_time()
            for _ in range(CALLS):
                list(queue.receive_messages(max_messages=32))
            best[name] = min(best[name], (time.process_time() - start) / CALLS * 1000)
    return best


def measure(connection_string: str, queue: str) -> dict[str, float]:
    from azure.storage.queue import QueueServiceClient

    from dal.http_environment import for_service

    once = for_service(connection_string, "queue")
    made = {
        "per request (SDK default)": QueueServiceClient.from_connection_string(connection_string),
        "read once (ours)": QueueServiceClient.from_connection_string(connection_string, **once),
    }
    queues = {name: service.get_queue_client(queue) for name, service in made.items()}
    next(iter(queues.values())).create_queue()
    _per_receive(queues)  # connections open, code warm
    return _per_receive(queues)


def main() -> int:
    from photomosaics.local.azurite import Azurite

    azurite = Azurite()
    connection_string = azurite.start()
    try:
        rows = [(f"this process ({len(os.environ)} variables)", measure(connection_string, "plain"))]
        added = {f"SERVICE_{i}_SERVICE_HOST": f"10.0.{i // 250}.{i % 250}" for i in range(SERVICE_VARIABLES)}
        os.environ.update(added)
        try:
            rows.append(
                (f"with {SERVICE_VARIABLES} more ({len(os.environ)} variables)", measure(connection_string, "crowded"))
            )
        finally:
            for name in added:
                del os.environ[name]
    finally:
        azurite.stop()
    print("\nStorage client CPU per empty queue receive (ms, best of 5 x 300, alternated)")
    print("| environment | read per request (SDK default) | read once (ours) | ours / default |")
    print("|---|---:|---:|---:|")
    for label, figures in rows:
        default, ours = figures.values()
        print(f"| {label} | {default:.2f} | {ours:.2f} | {ours / default:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
