"""One exception tree: every exception class of the project is rooted in ``PhotoMosaicsError``
and named in the drawing in ``mosaic.errors``' docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mosaic.errors
from mosaic.errors import PhotoMosaicsError

PACKAGES = ("mosaic", "dal", "workers", "webapp", "photomosaics")


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            module = importlib.import_module(info.name)
            for _, obj in inspect.getmembers(module, inspect.isclass):
                if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                    found.append(obj)
    return found


CLASSES = _exception_classes()


def test_the_project_has_the_errors_we_expect() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"MosaicError", "StorageConfigurationError", "PermanentJobError", "ApiError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_error_is_rooted_and_drawn(cls: type[BaseException]) -> None:
    assert issubclass(cls, PhotoMosaicsError), f"{cls.__module__}.{cls.__name__} is not a PhotoMosaicsError"
    assert f" {cls.__name__} " in f"{mosaic.errors.__doc__} ", (
        f"{cls.__name__} is missing from the tree in mosaic/errors.py"
    )


def test_storage_unavailable_is_a_documented_alias_of_azures_error_outside_the_tree() -> None:
    """Not a class of ours: Azure's base error under a name the layers above may import."""
    from azure.core.exceptions import AzureError

    from dal.errors import StorageUnavailable

    assert StorageUnavailable is AzureError
    assert not issubclass(StorageUnavailable, PhotoMosaicsError)
    assert "StorageUnavailable" in (mosaic.errors.__doc__ or "") and "alias" in (mosaic.errors.__doc__ or "")
    assert not [cls for cls in CLASSES if issubclass(cls, AzureError)], "a project error must not pose as Azure's"
