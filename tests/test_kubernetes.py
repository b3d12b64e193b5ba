"""The Kubernetes manifests (deploy/kubernetes/): every overlay renders, the core objects are
valid for the Kubernetes API, and the KEDA objects and probes agree with the code.

No cluster is needed: ``kubectl kustomize`` renders the tree and ``kubernetes-validate``
checks Deployments, Services and Secrets against the bundled OpenAPI schemas of the newest
Kubernetes release it knows. KEDA's CRDs have no bundled schema, so their meaning is checked
here instead: each ScaledObject scales a Deployment that exists, on queues the code really
uses, and each role's pod outlives its drain grace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dal.config import INDEX_REQUEST_QUEUE, POISON_SUFFIX, WORK_QUEUES, Settings
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
    done = subprocess.run(
        [kubectl, "kustomize", str(KUBE / "overlays" / overlay)],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        timeout=60,
    )
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


def test_every_role_and_the_web_app_is_deployed_from_the_project_image(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    for name in ("web", *ROLES):
        container = _container(deployments[name])
        assert container["args"][:2] == ["photomosaics", name], name
        assert container["image"].split("/")[-1].startswith("photomosaics"), name
        connection = _env(container)["AZURE_STORAGE_CONNECTION_STRING"]
        assert connection == {"secretKeyRef": {"name": "photomosaics-storage", "key": "connection"}}, name


def test_hints_go_through_the_demo_valkey_and_are_optional_elsewhere(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    """Every sender and listener reads PHOTOMOSAICS_HINTS_URL from an optional Secret (the URL may
    carry a password); the demo overlay fills it with its valkey Service and the password that
    Valkey requires, from the same Secret; the others leave it out (polling only)."""
    overlay, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    secrets = _by_kind(docs, "Secret")
    for name in ("web", *ROLES):
        ref = _env(_container(deployments[name]))["PHOTOMOSAICS_HINTS_URL"]["secretKeyRef"]
        assert (ref["name"], ref["key"], ref["optional"]) == ("photomosaics-hints", "url", True), name
        if overlay == "azurite":
            assert ref["name"] in secrets, name
    if overlay == "azurite":
        from urllib.parse import urlsplit

        hints = {k: _secret_value(secrets["photomosaics-hints"], k) for k in ("url", "password")}
        url = urlsplit(hints["url"])
        assert url.password == hints["password"] and len(url.password) >= 16
        service = _by_kind(docs, "Service")[url.hostname]
        assert url.port in [p["port"] for p in service["spec"]["ports"]]
        valkey = _container(deployments[url.hostname])
        assert valkey["image"].startswith("valkey/valkey:")
        assert valkey["args"][valkey["args"].index("--requirepass") + 1] == "$(VALKEY_PASSWORD)"
        assert _env(valkey)["VALKEY_PASSWORD"] == {"secretKeyRef": {"name": "photomosaics-hints", "key": "password"}}
        assert "--protected-mode" not in valkey["args"]


def _secret_value(secret: dict[str, Any], key: str) -> str:
    import base64

    if key in secret.get("stringData", {}):
        return str(secret["stringData"][key])
    return base64.b64decode(secret["data"][key]).decode()


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod template (Deployments and CronJobs), by its workload's name."""
    pods = {name: d["spec"]["template"] for name, d in _by_kind(docs, "Deployment").items()}
    pods.update({name: d["spec"]["jobTemplate"]["spec"]["template"] for name, d in _by_kind(docs, "CronJob").items()})
    return pods


def test_every_pod_runs_unprivileged_on_a_read_only_root(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, docs = rendered
    for name, pod in _pods(docs).items():
        spec = pod["spec"]
        context = spec["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] > 0, (overlay, name)
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, (overlay, name)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            own = container["securityContext"]
            assert own["allowPrivilegeEscalation"] is False, (overlay, name)
            assert own["readOnlyRootFilesystem"] is True, (overlay, name)
            assert own["capabilities"]["drop"] == ["ALL"] and "add" not in own["capabilities"], (overlay, name)
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            writable = [path for path, volume in mounts.items() if "emptyDir" in volumes[volume]]
            assert writable, f"{overlay}: {name} has a read-only root and no writable folder"
            if container["image"].split("/")[-1].startswith("photomosaics"):
                assert "/tmp" in writable, (overlay, name)


def _policies_for(docs: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    return [
        p
        for p in _by_kind(docs, "NetworkPolicy").values()
        if all(labels.get(k) == v for k, v in p["spec"]["podSelector"].get("matchLabels", {}).items())
    ]


def _ports(rules: list[dict[str, Any]]) -> set[Any]:
    return {port["port"] for rule in rules for port in rule.get("ports", [])}


# What each role may reach (besides DNS): storage over HTTPS, and Redis/Valkey for the hints.
ROLE_EGRESS = {
    "web": {443, 6379, 6380},
    "controller": {443, 6379, 6380},
    "processor": {443, 6379, 6380},
    "responder": {443, 6379, 6380},
    "indexer": {443, 6379, 6380},
    "retention": {443},
    "syphon": {443},
}
ROLE_INGRESS = {
    "web": {"http"},
    "controller": {"metrics"},
    "processor": {"metrics"},
    "responder": {"metrics"},
    "indexer": {"metrics"},
    "retention": set(),
    "syphon": set(),
}


def test_each_role_has_a_network_policy_that_allows_only_what_it_needs(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    overlay, docs = rendered
    for name, pod in _pods(docs).items():
        labels = pod["metadata"]["labels"]
        policies = _policies_for(docs, labels)
        both = [p for p in policies if set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}]
        assert len(both) == 1, f"{overlay}: {name} needs exactly one policy of its own, has {len(both)}"
        (own,) = both
        ingress, egress = own["spec"].get("ingress", []), own["spec"].get("egress", [])
        if labels.get("app.kubernetes.io/name") != "photomosaics":  # the demo's Azurite and Valkey
            assert egress == [] and all(rule.get("from") for rule in ingress), (overlay, name)
            continue
        role = labels["app.kubernetes.io/component"]
        assert own["metadata"]["name"] == role
        assert _ports(ingress) == ROLE_INGRESS[role], (overlay, role)
        assert _ports(egress) == ROLE_EGRESS[role] | {53}, (overlay, role)
        named = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert ROLE_INGRESS[role] <= named, f"{role}: a policy port names no container port"


def test_several_web_replicas_share_a_required_key_and_every_overlay_trusts_the_ingress(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    """One proxy (the ingress controller) is trusted in every overlay, the demo's too: without it
    every client behind the ingress shares one address bucket and HTTPS is not seen
    (tests/web/test_ingress.py shows what the rendered value does to a request)."""
    overlay, docs = rendered
    web = _by_kind(docs, "Deployment")["web"]
    env = _env(_container(web))
    replicas = web["spec"].get("replicas", 1)
    assert int(env.get("PHOTOMOSAICS_WEB_REPLICAS") or 1) == replicas, overlay
    assert env.get("PHOTOMOSAICS_TRUSTED_PROXIES") == "1", overlay
    if replicas > 1:
        assert env["PHOTOMOSAICS_SECRET_KEY"]["secretKeyRef"].get("optional") is False, overlay


def test_no_pod_gets_a_service_account_token(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """No role talks to the Kubernetes API, so none carries a token a compromised pod could use."""
    overlay, docs = rendered
    for name, pod in _pods(docs).items():
        assert pod["spec"].get("automountServiceAccountToken") is False, (overlay, name)


_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _kustomizations(folder: Path) -> list[dict[str, Any]]:
    """The kustomization of ``folder`` and of every kustomization it builds on."""
    own = yaml.safe_load((folder / "kustomization.yaml").read_text())
    found = [own]
    for entry in [*own.get("bases", []), *own.get("resources", [])]:
        path = (folder / entry).resolve()
        if (path / "kustomization.yaml").is_file():
            found += _kustomizations(path)
    return found


def _images(docs: list[dict[str, Any]]) -> list[str]:
    return [
        container["image"]
        for pod in _pods(docs).values()
        for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    ]


def _image_name(image: str) -> str:
    name = image.split("@")[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def test_every_image_can_be_pinned_by_a_digest_the_operator_fills(
    rendered: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Each image the pods run has an `images:` entry with a `digest` field in its overlay's chain:
    empty in this tree (no digest can be verified here, none is invented), a real sha256 when
    filled; an overlay that fills them pins every container, the tag kept beside it."""
    overlay, docs = rendered
    entries = [entry for k in _kustomizations(KUBE / "overlays" / overlay) for entry in k.get("images", [])]
    for entry in entries:
        assert "digest" in entry, f"{overlay}: images entry {entry['name']} has no digest field to fill"
        assert entry["digest"] == "" or _DIGEST.match(entry["digest"]), entry
    project = {image for image in _images(docs) if _image_name(image).split("/")[-1] == "photomosaics"}
    assert len(project) == 1, f"{overlay}: the roles run different builds of the project image: {project}"
    pinnable = {entry.get("newName", entry["name"]) for entry in entries}
    names = {_image_name(image) for image in _images(docs)}
    assert names <= pinnable, f"{overlay}: no images entry (and so no digest) for {names - pinnable}"
    # Filled: every container runs name@sha256:... (a copy of the overlay, as an operator makes).
    digest = "sha256:" + "0" * 64
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(KUBE / "overlays" / overlay, tmp_path)],  # kustomize wants it relative
                "images": [{"name": name, "digest": digest} for name in sorted(names)],
            }
        )
    )
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    done = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pinned = _images([doc for doc in yaml.safe_load_all(done.stdout) if doc])
    assert pinned and all(image.endswith("@" + digest) for image in pinned), pinned


def test_scaled_objects_name_real_queues_and_deployments(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    auths = _by_kind(docs, "TriggerAuthentication")
    scaled = _by_kind(docs, "ScaledObject")
    assert set(scaled) == {"processor", "controller", "indexer"}, overlay
    secrets = _by_kind(docs, "Secret")
    for name, obj in scaled.items():
        target = obj["spec"]["scaleTargetRef"]["name"]
        assert target in deployments, f"{name} scales {target}, which is not a Deployment"
        prefix = _env(_container(deployments[target])).get("PHOTOMOSAICS_NAME_PREFIX") or ""
        for trigger in obj["spec"]["triggers"]:
            assert trigger["type"] == "azure-queue"
            queue = trigger["metadata"]["queueName"]
            real = {prefix + q for q in (*WORK_QUEUES, INDEX_REQUEST_QUEUE)} | set(
                _slice_queues(prefix, deployments[target])
            )
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
    assert [t["metadata"]["queueName"] for t in processor["triggers"]] == _slice_queues(
        prefix, deployments["processor"]
    )
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
    # Prometheus scrapes the web app's metrics port (the app port wants the operator token there).
    annotations = deployments["web"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == int(_env(web)["PHOTOMOSAICS_METRICS_PORT"]) != port
    assert {p["name"]: p["containerPort"] for p in web["ports"]}["metrics"] == int(annotations["prometheus.io/port"])


def test_the_demo_azurite_is_the_version_the_tests_use() -> None:
    import json

    lock = json.loads((ROOT / "package-lock.json").read_text())
    version = lock["packages"]["node_modules/azurite"]["version"]
    docs = list(yaml.safe_load_all((KUBE / "overlays" / "azurite" / "azurite.yaml").read_text()))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert _container(deployment)["image"] == f"mcr.microsoft.com/azure-storage/azurite:{version}"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    image = compose["services"]["azurite"]["image"].removesuffix("${AZURITE_DIGEST:-}")
    assert image == f"mcr.microsoft.com/azure-storage/azurite:{version}"


def test_a_daily_cronjob_runs_the_retention_sweep(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    from click.testing import CliRunner

    from photomosaics.cli import main

    overlay, docs = rendered
    (cronjob,) = _by_kind(docs, "CronJob").values()
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid", overlay
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["photomosaics", "retention"], args
    assert _env(container)["AZURE_STORAGE_CONNECTION_STRING"] == {
        "secretKeyRef": {"name": "photomosaics-storage", "key": "connection"}
    }
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
