"""The chart's power-cap node agent (`nodeAgent`), as the real helm renders it.

Aspects: off by default (nothing rendered, so deploy/gpufleet.yaml is unchanged); when enabled, a
DaemonSet on the GPU nodes (GFD's label, every taint tolerated) running `gpufleet node-agent`
with the node's name; with NVML it is privileged and asks the NVIDIA runtime for every GPU's
management library, with the recording limiter it runs restricted; RBAC exactly as the agent's
calls (its node: get, patch; pods: list, watch); a limiter it does not know fails the schema.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from test_chart_fake_gpus import CHART, HELM, render


def agent_objects(*args: str) -> dict[str, dict[str, Any]]:
    """kind -> the one object of the node-agent component."""
    objects = [
        d
        for d in render(*args)
        if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "node-agent"
    ]
    by_kind = {d["kind"]: d for d in objects}
    assert len(by_kind) == len(objects), "one object of each kind"
    return by_kind


def test_off_by_default() -> None:
    assert agent_objects() == {}


def test_daemonset_applies_caps_through_nvml_on_gpu_nodes() -> None:
    objects = agent_objects("--set", "nodeAgent.enabled=true")
    assert set(objects) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["node-agent", "--limiter=nvml"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert container["securityContext"]["privileged"] is True
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    rules = {tuple(r["resources"]): sorted(r["verbs"]) for r in objects["ClusterRole"]["rules"]}
    assert rules == {("nodes",): ["get", "patch"], ("pods",): ["list", "watch"]}
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]


def test_recording_limiter_runs_restricted() -> None:
    objects = agent_objects("--set", "nodeAgent.enabled=true", "--set", "nodeAgent.limiter=record")
    [container] = objects["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["node-agent", "--limiter=record"]
    assert {e["name"] for e in container["env"]} == {"NODE_NAME"}
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
    assert "privileged" not in context


@pytest.mark.parametrize("limiter", ["nvidia-smi", "NVML"])
def test_schema_refuses_an_unknown_limiter(limiter: str) -> None:
    result = subprocess.run(
        [str(HELM), "template", "gpufleet", str(CHART), "--set", "nodeAgent.enabled=true",
         "--set", f"nodeAgent.limiter={limiter}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "nodeAgent" in result.stderr and "limiter" in result.stderr
