"""Schemathesis hooks: strategies for what the spec marks as server-issued or typed binary data,
and a fair judgement of link-edited uploads.

``format: continuation-token`` is opaque to clients; the fuzzer must still send tokens of the
form the server issues (a token it did not issue is a documented 400), so this strategy
makes them with the server's own encoder; ``format: library-continuation-token`` likewise, signed
with the secret key of the served app.

Every ``format: binary`` field of this API is an uploaded photo (or a zip of photos): a
JSON schema cannot say "decodable image", so schemathesis' own binary data (random bytes,
PDF or zip samples) would be a 415 the fuzzer wrongly calls a rejected valid request. The
format gets real small PNGs instead. It is registered as a *format*, not as an ``image/png``
media type: schemathesis 4.32's coverage phase, given a multipart part with a custom media
type, builds one "positive" body whose other required fields are empty strings.

A multipart body is judged as the server receives it (``before_call``): multipart carries only
files and text, so schemathesis 4.32's judgement of the Python values it generated is wrong both
ways. It calls a body with a binary part invalid after a link edited it (``SubmitJob`` puts a
real library name into the photo upload) without looking, and a "negative" ``name: null`` goes
out as the text ``null``, a valid name: both were false ST201s on a 201/202. Each field is read
as the server reads it (a file as the string the schema says it is; text as is, or as a whole
number where the schema wants an integer and the text is one, as ``webapp.validation`` parses
it), then validated against the schema.

``schemathesis.toml`` names this module as its ``hooks``: importing it registers all of this,
for ``st run`` from the clone's root and for the suite's fuzz test alike.
"""

from __future__ import annotations

import io
from typing import Any

from hypothesis import strategies as st


def _png(width: int, height: int, colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def register() -> None:
    import schemathesis

    from dal.jobs.store import _encode_token

    row_keys = st.builds(
        lambda n, rid: f"~{n:016d}~{rid}",
        st.integers(min_value=0, max_value=10**16 - 1),
        st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z"),
    )
    schemathesis.openapi.format("continuation-token", row_keys.map(_encode_token))
    # GET /api/libraries: a storage marker signed with the web app's secret key (the suite's app
    # uses tests.web.conftest.SECRET; for `st run` set PHOTOMOSAICS_SECRET_KEY to the served app's).
    schemathesis.openapi.format("library-continuation-token", st.from_regex(r"\A[a-z0-9-]{1,63}\Z").map(_library_token))
    images = st.builds(
        _png,
        st.integers(min_value=8, max_value=96),
        st.integers(min_value=8, max_value=96),
        st.tuples(*[st.integers(min_value=0, max_value=255)] * 3),
    )
    schemathesis.openapi.format("binary", images)
    schemathesis.hook("before_call")(_judge_multipart_as_sent)


def _library_token(marker: str) -> str:
    import os

    from webapp.api_libraries import library_page_token

    secret = os.environ.get("PHOTOMOSAICS_SECRET_KEY")
    if not secret:
        from tests.web.conftest import SECRET as secret
    return library_page_token(marker, secret)


def _judge_multipart_as_sent(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    import jsonschema_rs
    from schemathesis.core.parameters import ParameterLocation
    from schemathesis.generation import GenerationMode
    from schemathesis.generation.meta import ComponentInfo

    meta, body = case.meta, case.body
    if meta is None or not isinstance(body, dict) or case.media_type != "multipart/form-data":
        return
    case.operation.schema.revalidate_case_metadata(case)
    judged = meta.components.get(ParameterLocation.BODY)
    definition = case.operation.get_body_for_media_type(case.media_type)
    if judged is None or judged.mode.is_positive or definition is None:
        return
    schema = definition.validation_schema
    properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
    received = {key: _as_received(value, properties.get(key, {})) for key, value in body.items()}
    if jsonschema_rs.validator_for(schema).is_valid(received):
        meta.components[ParameterLocation.BODY] = ComponentInfo(mode=GenerationMode.POSITIVE)
        if all(info.mode.is_positive for info in meta.components.values()):
            meta.generation.mode = GenerationMode.POSITIVE


def _as_received(value: Any, schema: dict[str, Any]) -> Any:
    """One multipart field as the server reads it (see the module's docstring)."""
    from schemathesis.transport.serialization import Binary, serialize_binary

    from webapp.validation import WHOLE_NUMBER

    if isinstance(value, (bytes, Binary)):
        return ""  # a file: the schema's `type: string, format: binary`
    if isinstance(value, list) and schema.get("type") == "array":  # repeated parts
        return [_as_received(item, schema.get("items", {})) for item in value]
    text = serialize_binary(value).decode(errors="replace")
    if schema.get("type") == "integer" and WHOLE_NUMBER.fullmatch(text.strip()):
        return int(text.strip())
    return text


register()
