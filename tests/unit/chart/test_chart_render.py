"""The Helm chart as the real helm renders it (no cluster; helm comes from the binary cache).

Aspects under test:
- `helm lint --strict` is clean;
- deploy/gpufleet.yaml and deploy/gpufleet-default-queue.yaml are exactly the chart rendered
  with its defaults (drift), the default GPUQueue apart, so one `kubectl apply` of the first
  holds no object of its own CRDs;
- values.schema.json: a wrong type, an unknown preset, a negative service tier threshold, a
  misspelt key or a toleration's unknown operator fails naming the key;
- the Deployment: 2 replicas, the restricted security context, probes on the named metrics
  port, the settings file mounted read-only, a checksum that rolls the pods on a settings change;
- the settings file: the user's `config` with the chart's Lease and metrics settings on top
  (the service tier's threshold among them), and `jobPodTolerations` as the operator's
  `pod_tolerations` (an empty list included);
- optional objects: the ServiceMonitor only where monitoring.coreos.com/v1 is served, the
  PodDisruptionBudget only with more than one replica, PriorityClasses only when asked for;
- RBAC: no wildcard anywhere, the Lease Role limited to the one Lease, the MIG Role to the one
  ConfigMap in the namespace the values name.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.sandbox import deploy_manifest
from gpufleet.sandbox.binaries import ensure_binaries
from gpufleet.settings import load

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "helm" / "gpufleet"
HELM = ensure_binaries(lambda _: None, ("helm",)).helm


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render(*args: str, namespace: str = "gpufleet-system") -> dict[str, list[dict[str, Any]]]:
    """`helm template` of the chart: kind -> objects."""
    result = _helm("template", "gpufleet", str(CHART), "--namespace", namespace, *args)
    assert result.returncode == 0, result.stderr
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all(result.stdout):
        if doc:
            out.setdefault(doc["kind"], []).append(doc)
    return out


def _deployment(objects: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    [deployment] = objects["Deployment"]
    return deployment


def _settings(objects: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    [config_map] = [c for c in objects["ConfigMap"] if c["metadata"]["name"].endswith("-config")]
    settings: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return settings


def test_helm_lint_strict_is_clean() -> None:
    result = _helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_deploy_manifests_are_the_rendered_chart() -> None:
    rendered = deploy_manifest.render(CHART, HELM)
    for path, text in rendered.items():
        assert (REPO_ROOT / path).read_text() == text, (
            f"{path}: regenerate with: python -m gpufleet.sandbox.deploy_manifest"
        )
    install = [d for d in yaml.safe_load_all(rendered[deploy_manifest.OUT]) if d]
    kinds = [d["kind"] for d in install]
    assert kinds[0] == "Namespace" and kinds.count("CustomResourceDefinition") == 3
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ConfigMap", "Service"} <= set(kinds)
    # Installed with the CRDs: the GPUQueue admission policy and its binding.
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= set(kinds)
    # One `kubectl apply` of the install manifest succeeds on a new cluster: it holds no object
    # of a kind its own CRDs define (the API server refuses one until its CRD is established).
    defined = {
        (d["spec"]["group"], d["spec"]["names"]["kind"])
        for d in install
        if d["kind"] == "CustomResourceDefinition"
    }
    own = [d for d in install if (d["apiVersion"].split("/")[0], d["kind"]) in defined]
    assert own == []
    # The default queue is the second file, created once the CRD is established.
    [queue] = [d for d in yaml.safe_load_all(rendered[deploy_manifest.QUEUE_OUT]) if d]
    assert (queue["kind"], queue["metadata"]["name"]) == ("GPUQueue", "default")
    header = rendered[deploy_manifest.QUEUE_OUT].split("---", 1)[0]
    assert "kubectl wait --for condition=established" in header


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        pytest.param("replicaCount=two", "'/replicaCount': got string, want integer", id="type"),
        pytest.param("config.placement.preset=fastest", "'/config/placement/preset'", id="enum"),
        pytest.param("replicas=2", "additional properties 'replicas' not allowed", id="unknown"),
        pytest.param("metrics.port=70000", "'/metrics/port'", id="bound"),
        pytest.param(
            "config.placement.service_tier_gpu_s=-1",
            "'/config/placement/service_tier_gpu_s'",
            id="service-tier",
        ),
        pytest.param(
            "config.placement.service_tier_rerun_s=-1",
            "'/config/placement/service_tier_rerun_s'",
            id="service-tier-rerun",
        ),
        pytest.param(
            "jobPodTolerations[0].operator=Maybe",
            "'/jobPodTolerations/0/operator': value must be one of 'Exists', 'Equal'",
            id="toleration",
        ),
    ],
)
def test_schema_rejects_a_bad_value_naming_the_key(flag: str, named: str) -> None:
    result = _helm("template", "gpufleet", str(CHART), "--set", flag)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr


def test_deployment_runs_two_restricted_replicas_with_probes() -> None:
    deployment = _deployment(render())
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["args"] == ["operator", "--config", "/etc/gpufleet/config.yaml"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/gpufleet"]["readOnly"] is True and "/tmp" in mounts
    assert pod["serviceAccountName"] == "gpufleet"


def test_a_settings_change_changes_the_pods_checksum() -> None:
    def checksum(*args: str) -> str:
        template = _deployment(render(*args))["spec"]["template"]
        value: str = template["metadata"]["annotations"]["checksum/config"]
        return value

    assert checksum() == checksum("--set", "replicaCount=3")
    assert checksum() != checksum("--set", "config.placement.preset=energy")


def test_settings_file_is_the_users_config_under_the_charts_own(tmp_path: Path) -> None:
    flags = ["config.placement.preset=energy", "config.lease.namespace=x", "metrics.port=9100"]
    settings = _settings(render(*(f"--set={f}" for f in flags), namespace="gpu-ops"))
    assert settings["placement"] == {"preset": "energy"}
    assert settings["lease"] == {
        "name": "gpufleet-operator",
        "namespace": "gpu-ops",
        "duration_s": 15,
    }
    assert settings["metrics"] == {"bind_address": "0.0.0.0", "port": 9100}
    assert settings["scheduler"] == {"mig_config_map_namespace": "gpu-ops"}
    assert settings["admin"] == {"namespace": "gpu-ops", "policy_configmap": "gpufleet-policy"}
    flags = ["mig.configMapNamespace=gpu-operator", "config.scheduler.resync_s=5"]
    settings = _settings(render(*(f"--set={f}" for f in flags)))
    assert settings["scheduler"] == {"mig_config_map_namespace": "gpu-operator", "resync_s": 5}
    # The operator reads this very file (its settings root refuses an unknown key).
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    loaded = load(environ={}, config_file=path)
    assert loaded.scheduler.mig_config_map_namespace == "gpu-operator"
    assert (loaded.metrics.bind_address, loaded.metrics.port) == ("0.0.0.0", 9090)
    assert loaded.lease.namespace == "gpufleet-system"
    # The service tier's threshold, as `helm install --set` gives it.
    settings = _settings(render("--set=config.placement.service_tier_gpu_s=600"))
    path.write_text(yaml.safe_dump(settings))
    tier = load(environ={}, config_file=path).placement.policy().service_tier_gpu_s
    assert tier == 600.0
    assert (loaded.admin.namespace, loaded.admin.policy_configmap) == (
        "gpufleet-system",
        "gpufleet-policy",
    )


def test_job_pod_tolerations_become_the_operators_setting(tmp_path: Path) -> None:
    def loaded(*args: str) -> tuple[dict[str, Any], ...]:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(_settings(render(*args))))
        return load(environ={}, config_file=path).operator.tolerations()

    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert loaded() == (gpu,)
    # An empty list replaces the default (nothing added), beside other operator settings.
    assert loaded("--set-json", "jobPodTolerations=[]", "--set", "config.operator.tick_s=2") == ()
    custom = '[{"key": "example.com/accelerator", "operator": "Exists", "effect": "NoSchedule"}]'
    assert loaded("--set-json", f"jobPodTolerations={custom}") == (
        {"key": "example.com/accelerator", "operator": "Exists", "effect": "NoSchedule"},
    )


def test_service_monitor_only_where_the_prometheus_operator_is() -> None:
    assert "ServiceMonitor" not in render()
    [monitor] = render("--api-versions", "monitoring.coreos.com/v1")["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    [service] = render()["Service"]
    assert service["spec"]["ports"][0]["name"] == "metrics"
    off = render(
        "--api-versions",
        "monitoring.coreos.com/v1",
        "--set",
        "metrics.serviceMonitor.enabled=false",
    )
    assert "ServiceMonitor" not in off


def test_disruption_budget_and_priority_classes_are_conditional() -> None:
    assert render()["PodDisruptionBudget"][0]["spec"]["minAvailable"] == 1
    assert "PodDisruptionBudget" not in render("--set", "replicaCount=1")
    assert "PriorityClass" not in render()
    classes = render("--set", "priorityClasses.create=true")["PriorityClass"]
    assert [c["metadata"]["name"] for c in classes] == [
        "gpufleet-high",
        "gpufleet-default",
        "gpufleet-preemptible",
    ]


def test_rbac_has_no_wildcards_and_named_resources_where_it_can() -> None:
    objects = render("--set", "mig.configMapNamespace=gpu-operator")
    roles = objects["ClusterRole"] + objects["Role"]
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (role["metadata"]["name"], rule)
    by_name = {r["metadata"]["name"]: r for r in objects["Role"]}
    lease = by_name["gpufleet-leader-election"]
    assert lease["metadata"]["namespace"] == "gpufleet-system"
    assert lease["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["gpufleet-operator"],
            "verbs": ["get", "update"],
        }
    ]
    [lease_object] = objects["Lease"]
    assert lease_object["metadata"]["name"] == "gpufleet-operator"
    mig = by_name["gpufleet-mig-config"]
    assert mig["metadata"]["namespace"] == "gpu-operator"
    assert mig["rules"][0]["resourceNames"] == ["default-mig-parted-config"]
    policy = by_name["gpufleet-policy"]
    assert policy["metadata"]["namespace"] == "gpufleet-system"
    assert policy["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gpufleet-policy"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    estimate = by_name["gpufleet-workload-estimate"]
    assert estimate["metadata"]["namespace"] == "gpufleet-system"
    assert estimate["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gpufleet-workload-estimate"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]
    bindings = objects["ClusterRoleBinding"] + objects["RoleBinding"]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpufleet", "namespace": "gpufleet-system"}
        ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("team-estimate", ["team-estimate"], id="renamed"),
        pytest.param("", None, id="not-kept"),
    ],
)
def test_the_workload_estimate_role_follows_its_setting(
    name: str, expected: list[str] | None
) -> None:
    objects = render("--set", f"config.scheduler.estimate_configmap={name}")
    roles = {r["metadata"]["name"]: r for r in objects["Role"]}
    bindings = {b["metadata"]["name"] for b in objects["RoleBinding"]}
    if expected is None:
        assert "gpufleet-workload-estimate" not in set(roles) | bindings
    else:
        assert roles["gpufleet-workload-estimate"]["rules"][0]["resourceNames"] == expected
        assert "gpufleet-workload-estimate" in bindings
