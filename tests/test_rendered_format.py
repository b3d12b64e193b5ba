"""A rendered slice blob (``dal.blobs.rendered``) that is not one is a ``RenderedFormatError``,
whatever is wrong with it: the controller's stitch refuses it, it does not crash on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dal.blobs.rendered import decode_rendered, encode_rendered
from dal.errors import RenderedFormatError
from workers.imaging.stitching import open_slice

PIXELS = np.arange(16 * 24 * 3, dtype=np.uint8).reshape(16, 24, 3)


def test_a_rendered_slice_round_trips() -> None:
    assert np.array_equal(decode_rendered(encode_rendered(PIXELS)), PIXELS)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data.replace(b"}", b" ", 1),  # the header's dict never closes: a TokenError once escaped
        lambda data: data.replace(b"'shape'", b"'shap('", 1),
        lambda data: data[:60],
        lambda data: data[:-5],
        lambda data: b"not a slice",
    ],
    ids=["unclosed-header", "broken-key", "cut-in-header", "cut-in-pixels", "neither-npy-nor-png"],
)
def test_a_damaged_slice_is_a_format_error(damage: Callable[[bytes], bytes]) -> None:
    with pytest.raises(RenderedFormatError):
        decode_rendered(damage(encode_rendered(PIXELS)))


def test_the_stitch_refuses_a_damaged_slice_file_too(tmp_path: Path) -> None:
    """The controller's stitch opens slice files by their header alone (``open_slice``)."""
    path = tmp_path / "0.npy"
    path.write_bytes(encode_rendered(PIXELS).replace(b"}", b" ", 1))
    with pytest.raises(RenderedFormatError):
        open_slice(path)
