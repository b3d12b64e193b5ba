"""A request whose upload files are closed when it ends, even when the upload was cut short.

werkzeug spools each uploaded file of a multipart body into a temporary file (on disk past
500 KB) and ``Request.close`` closes the ones it parsed. When the client goes away in the
middle of a file (a page that cancels its preview request because the person chose another
photo, a dropped connection) the parser gives up with that file half-written and drops it
unclosed: its descriptor, or its disk space, stays taken until the garbage collector finds it.
``ClosingRequest`` keeps every file the parser opened and closes them all with the request.
"""

from __future__ import annotations

from typing import IO

from flask import Request


class ClosingRequest(Request):
    """Flask's request, closing every upload stream it opened (``Flask.request_class``)."""

    def _get_file_stream(
        self,
        total_content_length: int | None,
        content_type: str | None,
        filename: str | None = None,
        content_length: int | None = None,
    ) -> IO[bytes]:
        stream = super()._get_file_stream(total_content_length, content_type, filename, content_length)
        self.__dict__.setdefault("_upload_streams", []).append(stream)
        return stream

    def close(self) -> None:
        try:
            super().close()
        finally:
            for stream in self.__dict__.pop("_upload_streams", ()):
                stream.close()
