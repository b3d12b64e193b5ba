"""Schemathesis strategies for what the spec marks as server-issued or typed binary data.

``format: continuation-token`` is opaque to clients; the fuzzer must still send tokens of the
form the server issues (a token it did not issue is a documented 400), so this strategy
makes them with the server's own encoder.

Every ``format: binary`` field of this API is an uploaded photo (or a zip of photos): a
JSON schema cannot say "decodable image", so schemathesis' own binary data (random bytes,
PDF or zip samples) would be a 415 the fuzzer wrongly calls a rejected valid request. The
format gets real small PNGs instead. It is registered as a *format*, not as an ``image/png``
media type: schemathesis 4.32's coverage phase, given a multipart part with a custom media
type, builds one "positive" body whose other required fields are empty strings.
"""

from __future__ import annotations

import io

from hypothesis import strategies as st


def _png(width: int, height: int, colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def register() -> None:
    import schemathesis

    from dal.jobs import _encode_token

    row_keys = st.builds(
        lambda n, rid: f"~{n:016d}~{rid}",
        st.integers(min_value=0, max_value=10**16 - 1),
        st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z"),
    )
    schemathesis.openapi.format("continuation-token", row_keys.map(_encode_token))
    images = st.builds(
        _png,
        st.integers(min_value=8, max_value=96),
        st.integers(min_value=8, max_value=96),
        st.tuples(*[st.integers(min_value=0, max_value=255)] * 3),
    )
    schemathesis.openapi.format("binary", images)
