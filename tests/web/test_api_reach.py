"""``POST /api/plan``: the plan for a photo and library, and whether the library reaches the
photo's colours, before anything is submitted (``webapp.api_reach``, ``mosaic.reach``)."""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image

from mosaic.reach import PREVIEW_ACROSS, PREVIEW_MOST, PREVIEW_TILE
from mosaic.signatures import SUB
from tests.web.conftest import LIBRARY, png_bytes


def _plan(client: Any, image: bytes | None, **fields: Any) -> Any:
    form: dict[str, Any] = {"library": LIBRARY, "tile_size": "8", **fields}
    form = {k: v for k, v in form.items() if v is not None}
    if image is not None:
        form["image"] = (io.BytesIO(image), "photo.png")
    return client.post("/api/plan", data=form, content_type="multipart/form-data")


def _decoded(data_url: str) -> Image.Image:
    head, _, body = data_url.partition(",")
    assert head == "data:image/jpeg;base64"
    return Image.open(io.BytesIO(base64.b64decode(body)))


def _jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_a_library_that_has_the_photos_colours_is_said_to_reach_it(
    client: Any, web_storage: Any, web_prefix: str
) -> None:
    # A library cut from the photo itself has every colour of it, many times over.
    import numpy as np
    import skimage.data

    from dal.blobs.libraries import LibraryStore

    photo = Image.fromarray(skimage.data.astronaut())
    rng = np.random.default_rng(3)
    crops = []
    for i in range(240):
        side = int(rng.integers(24, 96))
        left, top = int(rng.integers(0, photo.width - side)), int(rng.integers(0, photo.height - side))
        crops.append((f"crop-{i}.jpg", _jpeg(photo.crop((left, top, left + side, top + side)).resize((64, 64)))))
    LibraryStore(web_storage, prefix=web_prefix).create_from("selfcrops", "crops of the photo", crops, shared=True)
    response = _plan(client, _jpeg(photo.resize((128, 128))), library="selfcrops")
    assert response.status_code == 200, response.json
    body = response.json
    assert (body["tiles_across"], body["tiles_down"]) == (128, 128)
    reach = body["reach"]
    assert reach["warn"] is False and "reaches" in reach["message"], reach["message"]
    assert reach["delta_e"] <= reach["nearest_delta_e"] + 1.0
    assert _decoded(reach["preview"]).size[0] > 0 and _decoded(reach["preview_toward_photo"]).size[0] > 0


def test_colours_the_library_lacks_are_said_before_the_job(client: Any, tile_library: str) -> None:
    # The web tests' library is 18 flat colours: one of them is red, and a red photo's cells
    # cannot all take it (no tile repeats next to itself), so the mosaic would come out in other
    # colours, where a program repeating its nearest tile would paint it red.
    response = _plan(client, png_bytes(96, 64, colour=(240, 0, 0)), correction="30")
    assert response.status_code == 200, response.json
    reach = response.json["reach"]
    assert reach["warn"] is True and reach["correction"] == 30
    assert "lacks some of the photo's colours" in reach["message"]
    assert set(reach["toward_photo"]) == {"75", "100"} and reach["toward_photo"]["100"] < reach["delta_e"]


def test_bad_requests_are_clear_and_store_nothing(client: Any, tile_library: str) -> None:
    assert _plan(client, None).json["error"] == "missing_field"
    assert _plan(client, png_bytes(8, 8), library="no-such-library").status_code == 404
    assert _plan(client, b"not an image at all").status_code == 415
    assert _plan(client, png_bytes(8, 8), tile_size="0").json["error"] == "invalid_field"
    assert _plan(client, png_bytes(8, 8), correction="101").json["error"] == "invalid_field"


def test_the_preview_is_rendered_with_the_jobs_cell_sizes(client: Any, tile_library: str, monkeypatch: Any) -> None:
    """With several cell sizes the reach is measured, and the preview drawn, as that job will
    be made; a combination the job would be refused is refused here the same way."""
    import webapp.api_reach

    seen = []
    real = webapp.api_reach.library_reach

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["options"])
        return real(*args, **kwargs)

    monkeypatch.setattr(webapp.api_reach, "library_reach", recorded)
    photo = png_bytes(120, 90)
    plain = _plan(client, photo)
    mixed = _plan(client, photo, cell_sizes="1,2,4", split="30")
    assert plain.status_code == mixed.status_code == 200, mixed.json
    assert (seen[0].cell_sizes, seen[1].cell_sizes, seen[1].split) == ((1,), (1, 2, 4), 30)
    assert _decoded(mixed.json["reach"]["preview"]).size == _decoded(plain.json["reach"]["preview"]).size
    refused = _plan(client, photo, tile_size="32", cell_sizes="1,2,4")
    assert refused.status_code == 422 and refused.json["error"] == "invalid_plan"
    assert _plan(client, photo, split="30").json["error"] == "invalid_plan"  # split alone


def test_the_preview_reserves_what_its_decode_holds(client: Any, monkeypatch: Any) -> None:
    """A JPEG's preview is a reduced decode; a PNG has none, so its preview reserves every pixel
    (the budget of webapp.decode_budget, watched through its reserve)."""
    from webapp.decode_budget import DECODES

    reserved: list[int] = []
    real = DECODES.reserve
    monkeypatch.setattr(DECODES, "reserve", lambda pixels: reserved.append(pixels) or real(pixels))
    photo = Image.new("RGB", (1600, 1200), (40, 90, 160))
    out = io.BytesIO()
    photo.save(out, format="PNG")
    for data, preview in ((_jpeg(photo), "reduced"), (out.getvalue(), "whole")):
        reserved.clear()
        assert _plan(client, data).status_code == 200
        check, preview_pixels = reserved  # the upload's check (a whole decode), then the preview's
        assert check == 1600 * 1200
        assert (preview_pixels == 1600 * 1200) == (preview == "whole"), (preview, reserved)


def test_the_answer_carries_the_photos_upright_size_and_picture(client: Any, tile_library: str) -> None:
    """For a page that cannot show the photo (Chrome and a HEIC): its size and a small picture,
    turned as the photo's orientation says (a phone's portrait is stored sideways)."""
    upright = Image.new("RGB", (300, 600), (200, 30, 30))
    upright.paste((30, 30, 200), (0, 300, 300, 600))  # red above, blue below
    exif = Image.Exif()
    exif[0x0112] = 6  # stored turned a quarter anticlockwise: shown turned back clockwise
    stored = io.BytesIO()
    upright.transpose(Image.Transpose.ROTATE_90).save(stored, format="JPEG", quality=90, exif=exif)
    response = _plan(client, stored.getvalue(), library=tile_library)
    assert response.status_code == 200, response.get_json()
    photo = response.get_json()["photo"]
    assert (photo["width"], photo["height"]) == (300, 600)
    picture = _decoded(photo["preview"]).convert("RGB")
    assert max(picture.size) <= 2 * PREVIEW_MOST * SUB and abs(picture.width / picture.height - 0.5) < 0.02, (
        picture.size
    )
    top, bottom = picture.getpixel((picture.width // 2, 5)), picture.getpixel((picture.width // 2, picture.height - 5))
    assert top[0] > 150 > top[2] and bottom[2] > 150 > bottom[0], (top, bottom)


def test_the_preview_follows_the_jobs_grid_up_to_its_bound(client: Any, tile_library: str) -> None:
    """A coarser preview than the job errs toward silence (``mosaic.reach``): it is planned on the
    job's own cells across, up to ``PREVIEW_MOST``; the photo's picture stays sharp for a small grid."""
    photo = _jpeg(Image.new("RGB", (1200, 800), (40, 120, 200)))
    for asked, expected in ((60, 60), (PREVIEW_MOST + 50, PREVIEW_MOST), (12, 12)):
        response = _plan(client, photo, library=tile_library, tiles_across=str(asked))
        assert response.status_code == 200, response.get_json()
        body = response.get_json()
        assert body["tiles_across"] == asked
        assert _decoded(body["reach"]["preview"]).width == expected * PREVIEW_TILE, asked
        assert min(_decoded(body["photo"]["preview"]).size) >= PREVIEW_ACROSS * SUB, asked
