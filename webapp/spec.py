"""``GET /openapi.yaml``: the API contract as this deployment really enforces it.

``webapp/openapi.yaml`` states library names as 3..63 characters: a storage container name.
A deployment with ``PHOTOMOSAICS_NAME_PREFIX`` stores library ``x`` in container
``<prefix>x``, so it accepts only ``63 - len(prefix)`` characters. The served spec says so:
the library-name ``maxLength`` (the only 63 in the file) is rewritten from the configured
prefix, so a client generator or an API fuzzer reading ``/openapi.yaml`` never sends a name
the server must refuse. Text substitution, not a YAML round trip: the file stays as written
(comments, order) and the app needs no YAML library at run time.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from flask import Blueprint, Response, current_app

from dal.blobs.store import CONTAINER_NAME_MAX
from dal.names import longest_logical

bp = Blueprint("spec", __name__)


@cache
def _template() -> str:
    return files("webapp").joinpath("openapi.yaml").read_text(encoding="utf-8")


def served_spec(prefix: str) -> str:
    """The spec with the library-name maximum this prefix leaves (63 without one)."""
    longest = longest_logical(prefix, CONTAINER_NAME_MAX)
    text = _template()
    if not prefix:
        return text
    return text.replace(f"maxLength: {CONTAINER_NAME_MAX}", f"maxLength: {longest}").replace(
        f"3 to {CONTAINER_NAME_MAX} characters", f"3 to {longest} characters"
    )


@bp.get("/openapi.yaml")
def openapi() -> Response:
    prefix = current_app.extensions["photomosaics"].prefix
    return Response(served_spec(prefix), mimetype="application/yaml")
