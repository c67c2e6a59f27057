"""The chart's admin API and Grafana dashboard, as the real helm renders them (no cluster):

- off by default: no admin Service, no TLS volume, no TokenReview/SubjectAccessReview rules,
  the policy ConfigMap only read;
- enabled: a TLS Secret is required (the schema names the key); the Deployment serves the
  API on its `admin` port with the Secret mounted where the settings point, and knows its own
  pod (downward API) to label it; the admin Service selects only the labelled (leading) pod;
  the ClusterRole gains exactly tokenreviews and subjectaccessreviews create, the policy Role
  update and create; the operator's settings file loads with those paths;
- the Grafana dashboard ConfigMap carries the sidecar's label and the dashboard file as is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from test_chart_render import CHART, _deployment, _helm, _settings, render

from gpufleet.admin.wiring import SERVING_LABEL
from gpufleet.settings import load

ENABLED = ("--set", "admin.enabled=true", "--set", "admin.tls.secretName=gpufleet-admin-tls")


def _rules(objects: dict[str, list[dict[str, Any]]], kind: str, name: str) -> list[Any]:
    [role] = [r for r in objects[kind] if r["metadata"]["name"] == name]
    rules: list[Any] = role["rules"]
    return rules


def test_off_by_default() -> None:
    objects = render()
    assert [s["metadata"]["name"] for s in objects["Service"]] == ["gpufleet-metrics"]
    [container] = _deployment(objects)["spec"]["template"]["spec"]["containers"]
    assert "env" not in container and [p["name"] for p in container["ports"]] == ["metrics"]
    resources = {
        r for rule in _rules(objects, "ClusterRole", "gpufleet") for r in rule["resources"]
    }
    assert not {"tokenreviews", "subjectaccessreviews"} & resources
    assert _rules(objects, "Role", "gpufleet-policy")[0]["verbs"] == ["get", "list", "watch"]
    assert "port" not in _settings(objects)["admin"]


def test_enabling_needs_a_tls_secret() -> None:
    result = _helm("template", "gpufleet", str(CHART), "--set", "admin.enabled=true")
    assert result.returncode != 0 and "/admin/tls/secretName" in result.stderr


def test_enabled_serves_on_the_leaders_pod_with_its_tls_secret(tmp_path: Path) -> None:
    objects = render(*ENABLED)
    pod = _deployment(objects)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "admin", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "GPUFLEET_ADMIN__POD_NAME": "metadata.name",
        "GPUFLEET_ADMIN__POD_NAMESPACE": "metadata.namespace",
    }
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "admin-tls"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "admin-tls"]
    assert volume["secret"]["secretName"] == "gpufleet-admin-tls" and mount["readOnly"]
    settings = _settings(objects)
    assert settings["admin"]["tls_cert_file"] == f"{mount['mountPath']}/tls.crt"
    assert (settings["admin"]["bind_address"], settings["admin"]["port"]) == ("0.0.0.0", 8443)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    assert load(environ={}, config_file=path).admin.port == 8443
    [service] = [s for s in objects["Service"] if s["metadata"]["name"] == "gpufleet-admin"]
    assert service["spec"]["selector"][SERVING_LABEL] == "serving"
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "admin", "protocol": "TCP"}
    ]
    added = [
        r
        for r in _rules(objects, "ClusterRole", "gpufleet")
        if r["apiGroups"][0] in ("authentication.k8s.io", "authorization.k8s.io")
    ]
    assert added == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    assert _rules(objects, "Role", "gpufleet-policy") == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gpufleet-policy"],
            "verbs": ["get", "list", "watch", "update"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]


def test_grafana_dashboard_config_map() -> None:
    [dashboard] = [
        c for c in render()["ConfigMap"] if c["metadata"]["name"] == "gpufleet-grafana-dashboard"
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "gpufleet.json").read_text())
    assert json.loads(dashboard["data"]["gpufleet.json"]) == shipped
    assert "ConfigMap" in render("--set", "grafanaDashboard.enabled=false")
    names = [
        c["metadata"]["name"]
        for c in render("--set", "grafanaDashboard.enabled=false")["ConfigMap"]
    ]
    assert names == ["gpufleet-config"]
