"""``photomosaics library create|list`` against a configured account and the embedded Azurite."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from PIL import Image

from dal.blobs.libraries import LibraryStore
from dal.config import CONNECTION_STRING_ENV, StorageClients
from photomosaics.cli import main
from tests.support.prereqs import require

COLOURS = [(220, 40, 40), (40, 200, 60), (30, 60, 210), (240, 220, 40), (20, 20, 20)]


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    (folder / "more").mkdir(parents=True)
    for i, colour in enumerate(COLOURS):
        out = io.BytesIO()
        Image.new("RGB", (50, 40), colour).save(out, format="JPEG")
        (folder / ("more" if i % 2 else "") / f"p{i}.jpg").write_bytes(out.getvalue())
    (folder / "list.csv").write_text("a,b\n")
    return folder


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch, azurite_connection_string: str, unique: str) -> str:
    """The session's Azurite as the configured account, with a name prefix private to the test."""
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", f"t{unique}")
    return f"t{unique}"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["library", *args])


def test_create_then_list(configured: str, photos: Path, storage: StorageClients) -> None:
    created = run("create", "family", str(photos), "--description", "Family photos")
    assert created.exit_code == 0, created.output
    assert "library family: 5 tiles" in created.output
    assert "skipped list.csv" in created.output
    listed = run("list")
    assert listed.exit_code == 0, listed.output
    [row] = [line for line in listed.output.splitlines() if line.startswith("family")]
    assert row.split()[:2] == ["family", "5"] and row.endswith("Family photos")
    assert LibraryStore(storage, prefix=configured).load("family").atlas.shape[0] == 5


def test_an_operators_library_is_shared_unless_private_and_the_mark_can_change(
    configured: str, photos: Path, storage: StorageClients
) -> None:
    store = LibraryStore(storage, prefix=configured)
    assert run("create", "open", str(photos)).exit_code == 0
    assert run("create", "closed", str(photos), "--private").exit_code == 0
    marks = {info.name: info.shared for info in store.list()}
    assert marks == {"open": True, "closed": False}
    rows = {line.split()[0]: line.split()[3] for line in run("list").output.splitlines()[1:]}
    assert rows == {"closed": "no", "open": "yes"}
    shared = run("share", "closed")
    assert shared.exit_code == 0 and "shared with every client" in shared.output
    assert run("share", "open", "--off").exit_code == 0
    assert {info.name: info.shared for info in store.list()} == {"open": False, "closed": True}
    missing = run("share", "nowhere")
    assert missing.exit_code == 1 and "does not exist" in missing.output and "Traceback" not in missing.output


def test_list_with_no_libraries_says_how_to_make_one(configured: str) -> None:
    result = run("list")
    assert result.exit_code == 0 and "library create" in result.output


def test_bad_input_is_a_clear_error_and_creates_nothing(
    configured: str, photos: Path, tmp_path: Path, storage: StorageClients
) -> None:
    bad_name = run("create", "Family_Photos", str(photos))
    assert bad_name.exit_code == 2 and "lowercase letters" in bad_name.output
    missing = run("create", "family", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("text")
    empty = run("create", "docs", str(tmp_path / "docs"))
    assert empty.exit_code == 1 and "no usable image" in empty.output
    not_zip = tmp_path / "photos.zip"
    not_zip.write_bytes(b"PK but not really")
    assert run("create", "zipped", str(not_zip)).exit_code == 1
    for result in (bad_name, missing, empty):
        assert "Traceback" not in result.output
    assert LibraryStore(storage, prefix=configured).list() == []


def test_embedded_azurite_keeps_libraries_in_the_data_dir(
    photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from photomosaics.local.azurite import AzuriteError, find_azurite_script

    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))
    monkeypatch.delenv(CONNECTION_STRING_ENV, raising=False)
    monkeypatch.delenv("PHOTOMOSAICS_NAME_PREFIX", raising=False)
    data_dir = tmp_path / "data"
    created = run("create", "kept", str(photos), "--data-dir", str(data_dir))
    assert created.exit_code == 0, created.output
    assert (data_dir / "azurite").is_dir()
    listed = run("list", "--data-dir", str(data_dir))  # a new Azurite process, same folder
    assert listed.exit_code == 0, listed.output
    assert any(line.split()[:2] == ["kept", "5"] for line in listed.output.splitlines())
