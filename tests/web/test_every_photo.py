""" "Use every photo" at the web app: the field, its 400 naming the smallest tiles across, the planner."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dal.config import Settings, StorageClients
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import ImageRequestMessage
from mosaic.cover import smallest_tiles_across
from mosaic.grid import plan_grid
from tests.web.conftest import LIBRARY, png_bytes, submit

TILES = 18  # the test library's tiles: no groups, so 18 photos


@pytest.fixture
def queue(web_storage: StorageClients, web_settings: Settings) -> Any:
    return QueueAccessor(web_storage, settings=web_settings, prefix=web_settings.name_prefix).image_request


def test_use_every_photo_travels_in_the_request_message(client: Any, queue: Any) -> None:
    response = submit(client, image=png_bytes(64, 48), tiles_across="8", use_every_photo="true")
    assert response.status_code == 202, response.json  # 8 x 6 = 48 cells for 18 photos
    request_id = response.json["request_id"]
    message = next(m.message for m in queue.peek(32) if m.message.request_id == request_id)
    assert isinstance(message, ImageRequestMessage) and message.use_every_photo is True
    assert "every photo at least once" in client.get(f"/api/jobs/{request_id}").json["events"][0]["message"]
    off = submit(client, image=png_bytes(64, 48), tiles_across="8", use_every_photo="false").json["request_id"]
    assert "every photo" not in client.get(f"/api/jobs/{off}").json["events"][0]["message"]
    assert "use_every_photo" not in replace(message, use_every_photo=None).payload()  # off: as before


def test_a_grid_with_too_few_cells_is_400_naming_the_smallest_tiles_across(client: Any) -> None:
    need = smallest_tiles_across(64, 48, tile_size=8, groups=TILES)
    assert plan_grid(64, 48, tile_size=8, tiles_across=need).cells >= TILES
    assert plan_grid(64, 48, tile_size=8, tiles_across=need - 1).cells < TILES
    response = submit(client, image=png_bytes(64, 48), tiles_across=str(need - 1), use_every_photo="true")
    assert response.status_code == 400 and response.json["error"] == "too_few_cells"
    assert f"choose at least {need} tiles across" in response.json["detail"]
    assert submit(client, image=png_bytes(64, 48), tiles_across=str(need), use_every_photo="true").status_code == 202
    # The planner says the same number beforehand, for the photo's size.
    plan = client.get(f"/api/print-plan/every-photo?library={LIBRARY}&tile_size=8&width=64&height=48")
    assert plan.status_code == 200 and plan.json == {
        "library": LIBRARY,
        "photos": TILES,
        "tile_size": 8,
        "tiles_across": need,
    }


@pytest.mark.parametrize("value", ["yes", "1", "", "True", "on"])
def test_use_every_photo_is_true_or_false(client: Any, value: str) -> None:
    response = submit(client, image=png_bytes(64, 48), use_every_photo=value)
    assert response.status_code == 400 and response.json["error"] == "invalid_field"
    assert "use_every_photo must be true or false" in response.json["detail"]


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ("tile_size=8&width=64&height=48", 400, "missing_field"),
        ("library=nosuchlibrary&tile_size=8&width=64&height=48", 404, "library_not_found"),
        ("library=Not A Name&tile_size=8&width=64&height=48", 400, "invalid_field"),
        (f"library={LIBRARY}&tile_size=0&width=64&height=48", 400, "invalid_field"),
        (f"library={LIBRARY}&tile_size=8&height=48", 400, "missing_field"),
    ],
)
def test_the_every_photo_planner_refuses_bad_questions(client: Any, query: str, status: int, error: str) -> None:
    response = client.get(f"/api/print-plan/every-photo?{query}")
    assert response.status_code == status and response.json["error"] == error
