"""Behind an ingress (webapp.ingress): the client's scheme and address come through the trusted
proxies only; HTTPS makes the cookie Secure and adds HSTS; the secret key is long enough and
required where replicas could not share one."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from flask import Flask

from dal.config import CONNECTION_STRING_ENV, Settings
from tests.web.conftest import SECRET, ApiClient
from webapp import create_app
from webapp.ingress import HSTS, MIN_SECRET_KEY_LENGTH

HOST = "mosaics.example"
_NOT_A_JOB = "/api/jobs/00000000-0000-4000-8000-000000000000"


def _app(settings: Settings, connection_string: str, *, proxies: int) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "CONNECTION_STRING": connection_string,
            "SETTINGS": replace(settings, trusted_proxies=proxies),
        }
    )
    app.test_client_class = ApiClient
    return app


def _via_proxy(proto: str) -> dict[str, str]:
    return {"X-Forwarded-For": "203.0.113.5", "X-Forwarded-Proto": proto, "X-Forwarded-Host": HOST}


def test_behind_a_trusted_proxy_the_clients_https_is_what_counts(
    web_settings: Settings, azurite_connection_string: str
) -> None:
    client = _app(web_settings, azurite_connection_string, proxies=1).test_client()
    listed = client.get("/api/jobs", headers=_via_proxy("https"), environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert listed.status_code == 200
    assert listed.headers["Strict-Transport-Security"] == HSTS
    cookie = listed.headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    # The browser's Origin is https://HOST: the origin check sees the same (404, not 403).
    deleted = client.delete(_NOT_A_JOB, headers={**_via_proxy("https"), "Origin": f"https://{HOST}"})
    assert deleted.status_code == 404, deleted.get_json()
    foreign = client.delete(_NOT_A_JOB, headers={**_via_proxy("https"), "Origin": "https://evil.example"})
    assert foreign.status_code == 403


def test_without_trusted_proxies_forwarded_headers_are_ignored(
    web_settings: Settings, azurite_connection_string: str
) -> None:
    client = _app(web_settings, azurite_connection_string, proxies=0).test_client()
    listed = client.get("/api/jobs", headers=_via_proxy("https"))
    assert "Strict-Transport-Security" not in listed.headers
    assert "Secure" not in listed.headers["Set-Cookie"]
    spoofed = client.delete(_NOT_A_JOB, headers={**_via_proxy("https"), "Origin": f"https://{HOST}"})
    assert spoofed.status_code == 403


def test_a_direct_https_request_gets_a_secure_cookie_and_hsts(
    web_settings: Settings, azurite_connection_string: str
) -> None:
    client = _app(web_settings, azurite_connection_string, proxies=0).test_client()
    listed = client.get("/api/jobs", base_url="https://localhost")
    assert listed.headers["Strict-Transport-Security"] == HSTS
    assert "Secure" in listed.headers["Set-Cookie"]


@pytest.mark.parametrize("key", [None, "", "short-key"])
def test_a_missing_or_short_secret_key_stops_the_app(
    web_settings: Settings, azurite_connection_string: str, key: str | None
) -> None:
    with pytest.raises(RuntimeError, match="PHOTOMOSAICS_SECRET_KEY .*secrets.token_urlsafe"):
        create_app({"SECRET_KEY": key, "SETTINGS": web_settings, "CONNECTION_STRING": azurite_connection_string})
    assert len(SECRET) >= MIN_SECRET_KEY_LENGTH


@pytest.mark.parametrize(
    ("replicas", "key", "message"),
    [
        ("2", None, "PHOTOMOSAICS_SECRET_KEY is required: 2 web replicas"),
        ("1", "x" * 12, "PHOTOMOSAICS_SECRET_KEY has 12 characters"),
    ],
)
def test_the_web_command_refuses_to_start_without_a_shareable_key(replicas: str, key: str | None, message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PHOTOMOSAICS_SECRET_KEY"}
    env.update({CONNECTION_STRING_ENV: "UseDevelopmentStorage=true", "PHOTOMOSAICS_WEB_REPLICAS": replicas})
    if key is not None:
        env["PHOTOMOSAICS_SECRET_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-c", "from photomosaics.cli import main; main()", "web", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


@pytest.mark.parametrize("overlay", ["azurite", "storage-account"])
def test_the_kubernetes_web_pod_sees_the_ingress_https_and_the_client(
    web_settings: Settings, azurite_connection_string: str, overlay: str
) -> None:
    """The web Deployment as kustomize renders it (the demo and the real-account overlays) trusts
    the one ingress in front: a browser's HTTPS request, forwarded by the ingress controller
    (X-Forwarded-Proto: https, its address last in X-Forwarded-For), gets a Secure cookie and HSTS,
    and a client's own X-Forwarded-For entry further left does not choose its address."""
    import shutil

    import yaml

    from tests.support.prereqs import require

    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl is not installed (.ci/run installs Debian's kubernetes-client)")
    assert kubectl is not None
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [kubectl, "kustomize", str(root / "deploy" / "kubernetes" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (web,) = [
        d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "web"
    ]
    (container,) = web["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    proxies = Settings.from_env(env).trusted_proxies
    app = _app(web_settings, azurite_connection_string, proxies=proxies)
    seen: list[str] = []

    @app.get("/_test/address")
    def _address() -> dict[str, str]:
        from webapp.ingress import client_address

        seen.append(client_address())
        return {}

    client = app.test_client()
    # The ingress controller (10.0.0.9) appends the peer it saw to what the client sent.
    headers = {"X-Forwarded-For": "198.51.100.1, 203.0.113.5", "X-Forwarded-Proto": "https", "X-Forwarded-Host": HOST}
    listed = client.get("/api/jobs", headers=headers, environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert listed.status_code == 200
    assert listed.headers["Strict-Transport-Security"] == HSTS
    assert "Secure" in listed.headers["Set-Cookie"]
    client.get("/_test/address", headers=headers, environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert seen == ["203.0.113.5"]
