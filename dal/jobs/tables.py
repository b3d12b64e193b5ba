"""The job tables' shared rules: a valid table name, the entity-group batch, and the one
deployment mistake they can show, a table that was never created (said as such, not as a
missing job)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableTransactionError

from dal.errors import StorageConfigurationError

BATCH = 100  # operations per entity-group transaction
_TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,62}$")


def check_table_name(name: str) -> str:
    if not _TABLE_NAME.match(name):
        raise ValueError(f"invalid table name {name!r}: letters and digits, starting with a letter")
    return name


def raise_if_table_missing(exc: Exception, tables: str) -> None:
    """A missing table is a deployment mistake, not a missing job: say so."""
    code = getattr(exc, "error_code", None)
    if str(getattr(code, "value", code)) == "TableNotFound" or (code is None and "TableNotFound" in str(exc)):
        raise StorageConfigurationError(
            f"table {tables!r} does not exist: call JobStore.ensure_tables() at start-up"
        ) from None


@contextlib.contextmanager
def tables_exist(tables: str) -> Iterator[None]:
    """``raise_if_table_missing`` around a block of table calls."""
    try:
        yield
    except (ResourceNotFoundError, TableTransactionError) as exc:
        raise_if_table_missing(exc, tables)
        raise
