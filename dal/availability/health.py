"""The start-up check: is the storage account usable as configured?

A wrong key or an unreachable endpoint will not heal by retrying, so every role calls
``check_storage`` once at start-up and fails loudly, instead of retrying for minutes inside
its first real operation. One cheap call per service (list one queue, container, table).
Messages name the account and the endpoint, never the key or a SAS token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from dal.config import CONNECTION_STRING_ENV, StorageClients
from dal.errors import StorageConfigurationError


def _first_page(items: Any) -> None:
    for page in items.by_page():
        list(page)
        return


def _endpoint(client: Any) -> str:
    return str(client.url).split("?", 1)[0]


def check_storage(storage: StorageClients, *, throttled_ok: bool = False) -> None:
    """Make one cheap call per service; raise StorageConfigurationError when the account is unusable.

    A 5xx answer (503 ServerBusy, 500 OperationTimedOut) is not a configuration error: it is
    raised as is, or, with ``throttled_ok`` (long-running roles and the web app), accepted:
    the account is there and throttled, and a role that refused to start would turn
    throttling into an outage.
    ``throttled_ok`` accepts a connection dropped after the request was sent the same way.
    """
    checks: list[tuple[str, Callable[[], Any], Callable[[Any], Any]]] = [
        ("blob", lambda: storage.blob_service, lambda c: c.list_containers(results_per_page=1)),
        ("queue", lambda: storage.queue_service, lambda c: c.list_queues(results_per_page=1)),
        ("table", lambda: storage.table_service, lambda c: c.list_tables(results_per_page=1)),
    ]
    account = storage.account_name or "?"
    for service, make_client, list_one in checks:
        try:
            client = make_client()
            endpoint = _endpoint(client)
        except ValueError:  # a malformed connection string
            raise StorageConfigurationError(f"{CONNECTION_STRING_ENV} is malformed for the {service} service") from None
        where = f"{service} service of storage account {account!r} at {endpoint}"
        try:
            _first_page(list_one(client))
        except ClientAuthenticationError as exc:
            raise StorageConfigurationError(
                f"{where} refused the credentials ({_code(exc)}): "
                f"check the AccountKey or SAS in {CONNECTION_STRING_ENV}"
            ) from None
        except (ServiceRequestError, ServiceResponseError) as exc:
            if throttled_ok and isinstance(exc, ServiceResponseError):
                # It took the request and dropped the connection: a flaky path to a live
                # account, not a wrong endpoint (refused or unresolvable: ServiceRequestError).
                continue
            raise StorageConfigurationError(
                f"{where} is unreachable ({type(exc).__name__}: {str(exc)[:200]}): "
                f"check the endpoint in {CONNECTION_STRING_ENV}, "
                "or unset it to use the embedded Azurite"
            ) from None
        except HttpResponseError as exc:
            if exc.status_code in (401, 403):  # Azurite says AuthorizationFailure for a wrong key
                raise StorageConfigurationError(
                    f"{where} refused the credentials (HTTP {exc.status_code} {_code(exc)}): "
                    f"check the AccountKey or SAS in {CONNECTION_STRING_ENV}"
                ) from None
            if exc.status_code is not None and 400 <= exc.status_code < 500:
                raise StorageConfigurationError(
                    f"{where} rejected the request (HTTP {exc.status_code} {_code(exc)}): "
                    f"check the account name and endpoints in {CONNECTION_STRING_ENV}"
                ) from None
            if throttled_ok and exc.status_code is not None and exc.status_code >= 500:
                continue  # the role's retry policy waits out the throttling
            raise


def _code(exc: HttpResponseError) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or exc.reason or "error")
