"""The Kubernetes manifests (deploy/kubernetes/): every overlay renders, the core objects are
valid for the Kubernetes API, and the KEDA objects and probes agree with the code.

No cluster is needed: ``kubectl kustomize`` renders the tree and ``kubernetes-validate``
checks Deployments, Services and Secrets against the bundled OpenAPI schemas of the newest
Kubernetes release it knows. KEDA's CRDs have no bundled schema, so their meaning is checked
here instead: each ScaledObject scales a Deployment that exists, on queues the code really
uses, and each role's pod outlives its drain grace.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dal.config import POISON_SUFFIX, WORK_QUEUES, Settings
from dal.queues.lanes import slice_queue_names
from tests.support.prereqs import require

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
ROLES = ("controller", "responder", "processor")
# `photomosaics <role> --grace` default (photomosaics/commands/roles.py).
DEFAULT_GRACE = 30.0


def _render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl is not installed (.ci/run installs Debian's kubernetes-client)")
    done = subprocess.run([kubectl, "kustomize", str(KUBE / "overlays" / overlay)],  # type: ignore[list-item]
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"kubectl kustomize {overlay} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, _render(request.param)


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _shards(deployment: dict[str, Any]) -> int:
    return int(_env(_container(deployment)).get("PHOTOMOSAICS_SLICE_SHARDS") or 1)


def _slice_queues(prefix: str, deployment: dict[str, Any]) -> list[str]:
    """Every lane's every shard of slicerequest (dal.queues.lanes), as this deployment configures them."""
    lanes = int(_env(_container(deployment)).get("PHOTOMOSAICS_FAIR_LANES") or Settings().fair_lanes)
    return slice_queue_names(prefix + "slicerequest", lanes, _shards(deployment))


def test_there_is_a_demo_a_real_account_and_a_sharded_overlay() -> None:
    assert {"azurite", "storage-account", "sharded"} <= set(OVERLAYS)


def test_core_objects_validate_against_the_kubernetes_schemas(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    import kubernetes_validate

    overlay, docs = rendered
    version = kubernetes_validate.latest_version()
    core = [d for d in docs if not d["apiVersion"].startswith("keda.sh/")]
    assert {d["kind"] for d in core} >= {"Deployment", "Service"}
    for doc in core:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay}: {doc['kind']} {doc['metadata']['name']} is invalid: {exc.message}")


def test_every_role_and_the_web_app_is_deployed_from_the_project_image(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    for name in ("web", *ROLES):
        container = _container(deployments[name])
        assert container["args"][:2] == ["photomosaics", name], name
        assert container["image"].split("/")[-1].startswith("photomosaics"), name
        connection = _env(container)["AZURE_STORAGE_CONNECTION_STRING"]
        assert connection == {"secretKeyRef": {"name": "photomosaics-storage", "key": "connection"}}, name


def test_hints_go_through_the_demo_valkey_and_are_optional_elsewhere(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """Every sender and listener reads PHOTOMOSAICS_HINTS_URL from an optional ConfigMap; the
    demo overlay fills it with its valkey Service, the others leave it out (polling only)."""
    overlay, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    maps = _by_kind(docs, "ConfigMap")
    for name in ("web", *ROLES):
        ref = _env(_container(deployments[name]))["PHOTOMOSAICS_HINTS_URL"]["configMapKeyRef"]
        assert (ref["key"], ref["optional"]) == ("url", True), name
        if overlay == "azurite":
            assert ref["name"] in maps, name
    if overlay == "azurite":
        host, port = maps["photomosaics-hints"]["data"]["url"].removeprefix("redis://").split("/")[0].split(":")
        service = _by_kind(docs, "Service")[host]
        assert int(port) in [p["port"] for p in service["spec"]["ports"]]
        assert _container(deployments[host])["image"].startswith("valkey/valkey:")


def test_scaled_objects_name_real_queues_and_deployments(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    auths = _by_kind(docs, "TriggerAuthentication")
    scaled = _by_kind(docs, "ScaledObject")
    assert set(scaled) == {"processor", "controller"}, overlay
    secrets = _by_kind(docs, "Secret")
    for name, obj in scaled.items():
        target = obj["spec"]["scaleTargetRef"]["name"]
        assert target in deployments, f"{name} scales {target}, which is not a Deployment"
        prefix = _env(_container(deployments[target])).get("PHOTOMOSAICS_NAME_PREFIX") or ""
        for trigger in obj["spec"]["triggers"]:
            assert trigger["type"] == "azure-queue"
            queue = trigger["metadata"]["queueName"]
            real = {prefix + q for q in WORK_QUEUES} | set(_slice_queues(prefix, deployments[target]))
            assert queue in real and not queue.endswith(POISON_SUFFIX), queue
            assert int(trigger["metadata"]["queueLength"]) >= 1
            auth = auths[trigger["authenticationRef"]["name"]]
            (ref,) = auth["spec"]["secretTargetRef"]
            assert ref["parameter"] == "connection" and ref["key"] == "connection"
            if overlay == "azurite":  # the real account's Secret is created by the operator
                assert ref["name"] in secrets
    processor = scaled["processor"]["spec"]
    assert processor["minReplicaCount"] == 0
    shards = _shards(deployments["processor"])
    assert _shards(deployments["controller"]) == shards, f"{overlay}: controller and processors disagree on the shards"
    prefix = _env(_container(deployments["processor"])).get("PHOTOMOSAICS_NAME_PREFIX") or ""
    # one trigger per shard of each lane, each waking the pool from zero
    assert [t["metadata"]["queueName"] for t in processor["triggers"]] == _slice_queues(prefix, deployments["processor"])
    assert {t["metadata"]["activationQueueLength"] for t in processor["triggers"]} == {"0"}
    controller = scaled["controller"]["spec"]
    assert controller["minReplicaCount"] >= 1
    assert {t["metadata"]["queueName"] for t in controller["triggers"]} == {"imagerequest", "sliceresponse"}
    for name in scaled:  # KEDA owns the replica count of what it scales
        assert "replicas" not in deployments[name]["spec"], name


def _grace(args: list[str]) -> float:
    return float(args[args.index("--grace") + 1]) if "--grace" in args else DEFAULT_GRACE


def test_roles_drain_before_the_kill_and_probe_their_metrics_server(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    for role in ROLES:
        pod = deployments[role]["spec"]["template"]["spec"]
        container = _container(deployments[role])
        # SIGTERM, then --grace to finish handlers, then a release per held message: the kill
        # must come later, or a drained message waits out its whole visibility timeout.
        assert pod["terminationGracePeriodSeconds"] >= _grace(container["args"]) + 10, role
        env = _env(container)
        port = int(env["PHOTOMOSAICS_METRICS_PORT"])
        assert env["PHOTOMOSAICS_METRICS_HOST"] == "0.0.0.0"  # the kubelet probes the pod IP
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probe = container["livenessProbe"]["httpGet"]
        assert probe["path"] == "/healthz" and ports[probe["port"]] == port, role
    web = _container(deployments["web"])
    assert web["readinessProbe"]["httpGet"]["path"] == "/healthz"
    port = int(web["args"][web["args"].index("--port") + 1])
    assert {p["name"]: p["containerPort"] for p in web["ports"]}["http"] == port


def test_the_demo_azurite_is_the_version_the_tests_use() -> None:
    import json

    lock = json.loads((ROOT / "package-lock.json").read_text())
    version = lock["packages"]["node_modules/azurite"]["version"]
    docs = list(yaml.safe_load_all((KUBE / "overlays" / "azurite" / "azurite.yaml").read_text()))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert _container(deployment)["image"] == f"mcr.microsoft.com/azure-storage/azurite:{version}"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["azurite"]["image"] == f"mcr.microsoft.com/azure-storage/azurite:{version}"


def test_a_daily_cronjob_runs_the_retention_sweep(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    from click.testing import CliRunner

    from photomosaics.cli import main

    overlay, docs = rendered
    (cronjob,) = _by_kind(docs, "CronJob").values()
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid", overlay
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["photomosaics", "retention"], args
    assert _env(container)["AZURE_STORAGE_CONNECTION_STRING"] == {"secretKeyRef": {"name": "photomosaics-storage", "key": "connection"}}
    # The options are ones the command really has (an unknown one fails the parse; --help stops there).
    result = CliRunner().invoke(main, [*args[1:], "--help"])
    assert result.exit_code == 0, result.output


def test_shard_triggers_split_the_per_replica_queue_length() -> None:
    """The HPA scales on the largest trigger and each shard holds ~1/K of the backlog, so each
    shard's queueLength is the unsharded one divided by K: the pool is sized as without shards."""
    base = _by_kind(_render("storage-account"), "ScaledObject")["processor"]["spec"]["triggers"]
    unsharded = int(base[0]["metadata"]["queueLength"])
    assert {int(t["metadata"]["queueLength"]) for t in base} == {unsharded}  # every lane alike
    docs = _render("sharded")
    shards = _shards(_by_kind(docs, "Deployment")["processor"])
    assert shards > 1
    triggers = _by_kind(docs, "ScaledObject")["processor"]["spec"]["triggers"]
    assert {int(t["metadata"]["queueLength"]) for t in triggers} == {max(1, unsharded // shards)}
    assert len(triggers) == shards * Settings().fair_lanes
