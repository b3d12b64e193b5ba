"""JSON request bodies that cost the server no more than a refusal.

Python's ``json`` decoder recurses once per nested array or object, so 100,000 ``[`` (a 200 KB
body, far inside the request limits) raise ``RecursionError`` in ``request.get_json``, which
turns only ``ValueError`` into "not JSON": left alone, that is a 500 and a traceback in the log.
``BodyJSONProvider`` (``Flask.json``) gives it as the ``ValueError`` of any malformed body, so
every endpoint answers it with its own 400.
"""

from __future__ import annotations

from typing import Any

from flask.json.provider import DefaultJSONProvider


class BodyJSONProvider(DefaultJSONProvider):
    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            return super().loads(s, **kwargs)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
