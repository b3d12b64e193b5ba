"""A stand-in for ``photomosaics run`` in the supervisor tests: Azurite + stand-in children.

``python tests/support/supervise_stub.py PIDFILE GRACE CHILD_JSON...`` starts an in-memory Azurite,
supervises the children (each ``{"name": ..., "argv": [...]}``) with ``photomosaics.local.supervisor``
and writes ``{"azurite": pid, "children": {name: pid}}`` to PIDFILE once they run. On
SIGTERM/SIGINT it stops the children, then Azurite, exactly in ``photomosaics run``'s order.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from photomosaics.local.azurite import Azurite
from photomosaics.local.supervisor import ChildSpec, Supervisor, supervise
from workers.runtime.logfmt import configure_logging


def main() -> None:
    pidfile, grace, *children = sys.argv[1:]
    configure_logging(role="supervisor")
    specs = [ChildSpec(name=c["name"], argv=c["argv"]) for c in map(json.loads, children)]
    supervisor = Supervisor(specs, grace=float(grace), backoff_min=0.2, backoff_max=1.0, stable_after=60)

    azurite = Azurite()
    azurite.start()

    def report() -> None:
        while not all(supervisor.pids().values()):
            time.sleep(0.05)
        Path(pidfile).write_text(json.dumps({"azurite": azurite.pid, "children": supervisor.pids()}))

    try:
        threading.Thread(target=report, daemon=True).start()
        code = supervise(supervisor)
    finally:
        azurite.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
