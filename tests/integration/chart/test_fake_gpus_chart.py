"""The chart's fake-GPU objects on the sandbox's API server, and the plugin under their identity.

Aspects: the rendered DaemonSet passes the API server's validation (server-side dry run); the
ServiceAccount, ClusterRole and binding are created, a token is minted for the ServiceAccount
(TokenRequest), and `gpufleet device-plugin` runs with only that token: it reads its node,
labels it and reads the node's pods for the preferred allocation with no 403; with
`labelNodes=false` the same plugin asked to label the node is refused, naming the permission.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekubelet import FakeKubelet
from kubernetes.client.exceptions import ApiException

from gpufleet.sandbox.binaries import ensure_binaries
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, wait_for

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "helm" / "gpufleet"
KIND_FLEET = REPO_ROOT / "deploy" / "kind" / "fleet.yaml"


def rendered(namespace: str, *args: str) -> list[dict[str, Any]]:
    helm = ensure_binaries(lambda _: None, ("helm",)).helm
    result = subprocess.run(
        [str(helm), "template", "gpufleet", str(CHART), "--namespace", namespace,
         "--set", "fakeGPUs.enabled=true", "--set-file", f"fakeGPUs.fleet={KIND_FLEET}", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [
        d
        for d in yaml.safe_load_all(result.stdout)
        if d
        and (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "fake-gpus"
    ]


def kubectl(sandbox: Sandbox, *args: str, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", f"--kubeconfig={sandbox.kubeconfig}", *args, "-f", "-"],
        input=manifest, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def token_kubeconfig(sandbox: Sandbox, kube: Kube, namespace: str, account: str, out: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a freshly minted token."""
    request: Any = {"spec": {"expirationSeconds": 3600}}
    token = kube.core.create_namespaced_service_account_token(account, namespace, request)
    admin = yaml.safe_load(sandbox.kubeconfig.read_text())
    admin["users"] = [{"name": account, "user": {"token": token.status.token}}]
    for context in admin["contexts"]:
        context["context"]["user"] = account
    out.write_text(yaml.safe_dump(admin))
    return out


@pytest.fixture
def release(sandbox: Sandbox, kube: Kube) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    namespace = f"fake-gpus-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(namespace)
    created: list[dict[str, Any]] = []
    yield namespace, created
    for obj in created:
        kubectl(sandbox, "delete", "--ignore-not-found", manifest=yaml.safe_dump(obj))
    with contextlib.suppress(ApiException):
        kube.core.delete_namespace(namespace)


@pytest.fixture
def node(kube: Kube) -> Iterator[str]:
    name = f"kind-worker-{uuid.uuid4().hex[:6]}"
    body: Any = {"metadata": {"name": name, "labels": {"gpufleet.io/node-pool": "l4"}}}
    kube.core.create_node(body)
    yield name
    with contextlib.suppress(ApiException):
        kube.core.delete_node(name)


@contextlib.contextmanager
def run_plugin(
    kubeconfig: Path, node: str, folder: Path, *extra: str
) -> Iterator[subprocess.Popen[str]]:
    """The plugin as a process logging to plugin.log; stopped and its log closed on exit."""
    with (folder / "plugin.log").open("w") as log:
        plugin = subprocess.Popen(
            [sys.executable, "-m", "gpufleet.cli", "device-plugin", "--node-name", node,
             "--kubeconfig", str(kubeconfig), "--fleet", str(KIND_FLEET),
             "--device-plugin-dir", str(folder / "plugins"), "--device-dir", str(folder / "dev"),
             *extra],
            stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            yield plugin
        finally:
            if plugin.poll() is None:
                plugin.terminate()
            plugin.wait(15)


def test_chart_objects_and_the_plugin_under_its_service_account(
    sandbox: Sandbox, kube: Kube, release: tuple[str, list[dict[str, Any]]], node: str
) -> None:
    namespace, created = release
    objects = {d["kind"]: d for d in rendered(namespace)}
    checked = kubectl(
        sandbox, "apply", "--dry-run=server", manifest=yaml.safe_dump(objects["DaemonSet"])
    )
    assert checked.returncode == 0, checked.stderr
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"):
        applied = kubectl(sandbox, "apply", manifest=yaml.safe_dump(objects[kind]))
        assert applied.returncode == 0, applied.stderr
        created.append(objects[kind])
    account = objects["ServiceAccount"]["metadata"]["name"]

    with tempfile.TemporaryDirectory(prefix="fgc-") as tmp:
        folder = Path(tmp)
        config = token_kubeconfig(sandbox, kube, namespace, account, folder / "kubeconfig")
        kubelet = FakeKubelet(folder / "plugins")
        kubelet.start()
        with run_plugin(config, node, folder, "--label-node") as plugin:
            try:
                devices = wait_for(lambda: kubelet.devices("nvidia.com/gpu"), "registration", 30)
                assert sorted(devices) == ["0", "1", "2", "3"]
                assert kubelet.preferred("nvidia.com/gpu", sorted(devices), 1) == ["0"]
            finally:
                plugin.terminate()
                code = plugin.wait(15)
                kubelet.stop()
        log = (folder / "plugin.log").read_text()
        assert code == 0, log
        assert "cannot read this node's pods" not in log  # listing pods was allowed
        labels = kube.core.read_node(node).metadata.labels
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"

    # Without labelNodes the role has no patch: asking the plugin to label is refused.
    role = next(d for d in rendered(namespace, "--set", "fakeGPUs.labelNodes=false")
                if d["kind"] == "ClusterRole")  # fmt: skip
    assert kubectl(sandbox, "apply", manifest=yaml.safe_dump(role)).returncode == 0
    with tempfile.TemporaryDirectory(prefix="fgc-") as tmp:
        folder = Path(tmp)
        config = token_kubeconfig(sandbox, kube, namespace, account, folder / "kubeconfig")
        with run_plugin(config, node, folder, "--label-node") as plugin:
            assert plugin.wait(60) == 1
        log = (folder / "plugin.log").read_text()
        assert "cannot label node" in log and "Forbidden" in log, log
