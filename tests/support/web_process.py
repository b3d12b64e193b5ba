"""The web app alone in its own process, for tests that measure that process (its peak RSS).

Run as ``python tests/support/web_process.py``; storage, prefix and limits come from the environment
(``AZURE_STORAGE_CONNECTION_STRING``, ``PHOTOMOSAICS_*``). It serves the app with werkzeug's
threaded server on a free loopback port and prints that port on its first line of output.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys

from werkzeug.serving import make_server

from webapp import create_app


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("PHOTOMOSAICS_SECRET_KEY", secrets.token_urlsafe(32))
    server = make_server("127.0.0.1", 0, create_app(), threaded=True)
    print(server.server_port, flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
