"""Every API error is JSON ``{"error": <code>, "detail": <sentence>}`` with a 4xx/5xx status.

``ApiError`` is raised by the views; werkzeug's own HTTP errors (404 route, 405, 413 body
too large) get the same shape under ``/api`` and ``/healthz``. A storage failure that the
retry policy could not ride out is 503 ``storage_unavailable``: its text is logged (the
Azure SDK never puts the account key in an error) but not shown to the client.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from dal.errors import PhotoMosaicsError, StorageUnavailable

log = logging.getLogger(__name__)

_CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "too_many_requests",
    503: "storage_unavailable",
}


class ApiError(PhotoMosaicsError):
    """An error answered to the client as JSON; nothing has been stored when it is raised."""

    def __init__(self, status: int, error: str, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = headers or {}


def error_response(status: int, error: str, detail: str) -> Response:
    response = jsonify({"error": error, "detail": detail})
    response.status_code = status
    return response


def _wants_json() -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def _api_error(exc: ApiError) -> Response:
    response = error_response(exc.status, exc.error, exc.detail)
    response.headers.update(exc.headers)  # e.g. 429's and 503's Retry-After
    return response


def _http_error(exc: HTTPException) -> Any:
    if not _wants_json():
        return exc
    status = exc.code or 500
    detail = exc.description or exc.name
    if status == 413:
        detail = "the upload is larger than this service accepts"
    response = error_response(status, _CODES.get(status, "error"), detail)
    for name, value in exc.get_headers():  # e.g. 405's Allow (RFC 9110 requires it)
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def _storage_error(exc: Exception) -> Response:
    log.error("storage request failed on %s %s: %s", request.method, request.path, type(exc).__name__)
    return error_response(503, "storage_unavailable", "the storage service did not answer; try again shortly")


def init_app(app: Flask) -> None:
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(StorageUnavailable, _storage_error)
