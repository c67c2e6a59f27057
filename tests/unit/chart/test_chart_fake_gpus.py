"""The chart's fake GPU device plugin (`fakeGPUs`), as the real helm renders it.

Aspects: off by default (nothing rendered, so deploy/gpufleet.yaml is unchanged); when enabled
with a fleet, a DaemonSet on the nodes labelled gpufleet.io/node-pool that runs
`gpufleet device-plugin` with the fleet mounted, the node's name, the kubelet's device-plugin
folder and a device folder from the host, privileged (sockets in a root-owned folder, device
nodes); the fleet in its ConfigMap is the file given and a valid fleet; RBAC exactly as the
plugin's calls (its node: get, patch only when it labels; pods: list); without a fleet the
plugin reads GFD labels; a misspelt key fails the schema.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpufleet.model.fleet import FleetSpec
from gpufleet.sandbox.binaries import ensure_binaries

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "helm" / "gpufleet"
KIND_FLEET = REPO_ROOT / "deploy" / "kind" / "fleet.yaml"
HELM = ensure_binaries(lambda _: None, ("helm",)).helm


def render(*args: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(HELM), "template", "gpufleet", str(CHART), "--namespace", "gpufleet-system", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def fake_gpu_objects(*args: str) -> dict[str, dict[str, Any]]:
    """kind -> the one object of the fake-GPU component."""
    objects = [
        d
        for d in render(*args)
        if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "fake-gpus"
    ]
    by_kind = {d["kind"]: d for d in objects}
    assert len(by_kind) == len(objects), "one object of each kind"
    return by_kind


ENABLED = ("--set", "fakeGPUs.enabled=true", "--set-file", f"fakeGPUs.fleet={KIND_FLEET}")


def test_off_by_default() -> None:
    assert fake_gpu_objects() == {}


def test_daemonset_runs_the_plugin_on_pool_nodes() -> None:
    objects = fake_gpu_objects(*ENABLED)
    assert set(objects) == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
    }
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == [
        "device-plugin",
        "--fleet=/etc/gpufleet/fleet.yaml",
        "--label-node",
    ]
    [env] = container["env"]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert container["securityContext"]["privileged"] is True
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert volumes["device-plugins"]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert (
        mounts["devices"] == volumes["devices"]["hostPath"]["path"] == "/var/run/gpufleet/devices"
    )
    assert mounts["fleet"] == "/etc/gpufleet"
    assert volumes["fleet"]["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {"matchExpressions": [{"key": "gpufleet.io/node-pool", "operator": "Exists"}]}
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]


def test_fleet_config_map_is_the_file_given() -> None:
    fleet = fake_gpu_objects(*ENABLED)["ConfigMap"]["data"]["fleet.yaml"]
    assert yaml.safe_load(fleet) == yaml.safe_load(KIND_FLEET.read_text())
    assert len(FleetSpec.model_validate(yaml.safe_load(fleet)).node_pools) == 3


def test_rbac_is_what_the_plugin_calls() -> None:
    objects = fake_gpu_objects(*ENABLED)
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": objects["ServiceAccount"]["metadata"]["name"],
            "namespace": "gpufleet-system",
        }
    ]
    quiet = fake_gpu_objects(*ENABLED, "--set", "fakeGPUs.labelNodes=false")
    assert quiet["ClusterRole"]["rules"][0]["verbs"] == ["get"]
    [container] = quiet["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert "--label-node" not in container["args"]


def test_without_a_fleet_the_plugin_reads_gfd_labels() -> None:
    objects = fake_gpu_objects("--set", "fakeGPUs.enabled=true")
    assert "ConfigMap" not in objects
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["device-plugin", "--label-node"]
    assert "fleet" not in {v["name"] for v in pod["volumes"]}


def test_lend_devices_are_opt_in() -> None:
    [plain] = fake_gpu_objects(*ENABLED)["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert "--lend-devices" not in plain["args"]
    lending = fake_gpu_objects(*ENABLED, "--set", "fakeGPUs.lendDevices=true")
    [container] = lending["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][-1] == "--lend-devices"


def test_misspelt_key_fails_naming_it() -> None:
    result = subprocess.run(
        [str(HELM), "template", "gpufleet", str(CHART), "--set", "fakeGPUs.enabeld=true"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "enabeld" in result.stderr
