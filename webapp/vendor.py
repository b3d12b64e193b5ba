"""Browser libraries from npm, served by the app itself: ``/vendor/openseadragon/...``.

The job page's deep-zoom viewer is OpenSeadragon, pinned in ``package-lock.json`` and
installed by ``npm ci`` (``make install``) into ``node_modules/``; nothing is copied or
committed, and no CDN is involved (the CSP allows scripts and images from this origin only).
The folder is found in the project (a source checkout) or the working directory (the
Docker image puts ``node_modules/openseadragon`` in ``/app``). A missing library answers 404
with a message that says how to install it; the page then falls back to the plain image.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, send_from_directory

from webapp.errors import ApiError

bp = Blueprint("vendor", __name__, url_prefix="/vendor")

_PACKAGES = {"openseadragon": Path("openseadragon") / "build" / "openseadragon"}
_ROOTS = (Path(__file__).resolve().parents[1], Path.cwd())


def package_dir(package: str) -> Path | None:
    """The served folder of ``package`` in the first ``node_modules`` that has it."""
    for root in _ROOTS:
        folder = root / "node_modules" / _PACKAGES[package]
        if folder.is_dir():
            return folder
    return None


@bp.get("/openseadragon/<path:filename>")
def openseadragon(filename: str) -> Response:
    folder = package_dir("openseadragon")
    if folder is None:
        raise ApiError(404, "not_installed", "OpenSeadragon is not installed: run `make install` (npm ci)")
    return send_from_directory(folder, filename, max_age=86400)
