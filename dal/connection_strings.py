"""Azure Storage connection strings: read, expanded, described without their secrets, and the
embedded Azurite's (its well-known development account, whose key is public).
"""

from __future__ import annotations

# The account every Azurite and the Azure Storage Emulator know; its key is public.
DEVSTORE_ACCOUNT = "devstoreaccount1"
DEVSTORE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_connection_string(host: str, blob_port: int, queue_port: int, table_port: int) -> str:
    """The connection string of an Azurite listening on the given ports (path-style URLs)."""
    base = f"http://{host}:{{port}}/{DEVSTORE_ACCOUNT}"
    return (
        f"DefaultEndpointsProtocol=http;AccountName={DEVSTORE_ACCOUNT};AccountKey={DEVSTORE_KEY};"
        f"BlobEndpoint={base.format(port=blob_port)};"
        f"QueueEndpoint={base.format(port=queue_port)};"
        f"TableEndpoint={base.format(port=table_port)};"
    )


def expand_connection_string(connection_string: str) -> str:
    """Expand ``UseDevelopmentStorage=true`` into the emulator's explicit endpoints.

    Not every Azure SDK package understands the shorthand; all of them understand this.
    """
    parts = dict(_split(connection_string))
    if parts.get("UseDevelopmentStorage", "").lower() != "true":
        return connection_string
    proxy = parts.get("DevelopmentStorageProxyUri", "http://127.0.0.1").rstrip("/")
    host = proxy.split("://", 1)[-1]
    return azurite_connection_string(host, 10000, 10001, 10002)


def _split(connection_string: str) -> list[tuple[str, str]]:
    pairs = []
    for part in connection_string.strip().strip(";").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"malformed connection string: segment {key.strip()!r} has no '='")
        pairs.append((key.strip(), value.strip()))
    return pairs


def account_name(connection_string: str) -> str:
    """The ``AccountName`` a connection string states ("" when it states none or cannot be read)."""
    try:
        return dict(_split(connection_string)).get("AccountName", "")
    except ValueError:
        return ""


def describe_connection_string(connection_string: str) -> str:
    """A description safe to log or show: account and endpoints, never the key or a SAS."""
    parts = dict(_split(expand_connection_string(connection_string)))
    account = parts.get("AccountName", "?")
    endpoint = parts.get("BlobEndpoint") or parts.get("EndpointSuffix", "core.windows.net")
    return f"account {account} at {endpoint}"


def connection_string_parts(connection_string: str) -> dict[str, str]:
    """The ``key=value`` segments of a connection string; ValueError for a malformed one."""
    return dict(_split(connection_string))


def service_endpoint(connection_string: str, service: str) -> str:
    """The URL of ``service`` (``blob``, ``queue`` or ``table``) that a connection string names:
    its ``<Service>Endpoint``, else the account's default one."""
    parts = dict(_split(expand_connection_string(connection_string)))
    stated = parts.get(f"{service.capitalize()}Endpoint")
    if stated:
        return stated
    protocol = parts.get("DefaultEndpointsProtocol", "https")
    suffix = parts.get("EndpointSuffix", "core.windows.net")
    return f"{protocol}://{parts.get('AccountName', '')}.{service}.{suffix}"
