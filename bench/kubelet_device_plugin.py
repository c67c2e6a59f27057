"""A real kubelet and gpufleet's fake device plugin: registration, preferred allocation, health,
kubelet restart.

One run, all on this machine: a private sandbox control plane; the real kubelet 1.36.3 (built
from its Go module like the control plane, cached) joined to it as node `real-kubelet-0`, with a
minimal CRI runtime stub (`bench/cri_stub.py`); and `gpufleet device-plugin` as a process for
that node (pool `h100` of the default fleet: 8 x H100-80GB, found by the node's pool label).
It measures and checks:
1. registration: plugin start until the kubelet accepted it, and until the node's capacity
   shows `nvidia.com/gpu: 8`;
2. preferred allocation: two pods bound with the scheduler's assignment annotations (GPUs 5,6
   and 2,7); the kubelet's device manager must allocate exactly those devices (read from its
   checkpoint), where a plugin without preferences would be packed from GPU 0;
3. health: GPU 3 written to the health file until the node's allocatable shows 7 GPUs;
4. kubelet restart: the kubelet stopped and started again (it recreates its socket) until the
   plugin has registered with the new kubelet.
With `--lend-devices` the plugin advertises each GPU twice (capacity 16) and step 2 adds a pod
borrowing GPUs 5,6 from the first pod (an asleep standby's, `gpufleet.io/borrows`): the kubelet
admits it on the lend devices `5::lend`, `6::lend`; a pod assigned the same GPUs that does not
borrow gets no lend device.

Not a CI test: the kubelet's device manager always uses /var/lib/kubelet/device-plugins (one
per machine, so runs cannot overlap), it needs root and cgroup access, and building the kubelet
adds minutes to a cold CI build. Needs Go (first run builds the kubelet), grpcio-tools (CRI stubs
generated from `k8s.io/cri-api`) and the sandbox's binaries.

    sudo python bench/kubelet_device_plugin.py       # ~1 minute once the kubelet is built

Prints a table; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cri_stub
import yaml
from kubernetes import client, config

from gpufleet.sandbox.binaries import ensure_binaries
from gpufleet.sandbox.control_plane import Sandbox, default_fleet_path
from gpufleet.testing.operator import wait_for

NODE = "real-kubelet-0"
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # fixed in the kubelet's device manager
CHECKPOINT = PLUGIN_DIR / "kubelet_internal_checkpoint"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubelet_config(work: Path, cri_socket: Path) -> Path:
    """Standalone-friendly settings: no QoS cgroups, no swap check, cgroup v1 allowed, loopback."""
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{cri_socket}",
        "address": "127.0.0.1",
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "podLogsDir": str(work / "pod-logs"),
        "localStorageCapacityIsolation": False,
        "makeIPTablesUtilChains": False,
        "evictionHard": {},
        "nodeStatusUpdateFrequency": "1s",
    }
    path = work / "kubelet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start_kubelet(binary: Path, conf: Path, kubeconfig: Path, work: Path, log: Path) -> Any:
    args = [
        str(binary),
        f"--config={conf}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={work / 'root'}",
        f"--cert-dir={work / 'pki'}",
        f"--hostname-override={NODE}",
        "--v=2",
    ]
    return subprocess.Popen(args, stdout=log.open("a"), stderr=subprocess.STDOUT)


def stop(proc: Any, timeout: float = 15.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def node_resources(core: Any, field: str) -> dict[str, str]:
    try:
        node = core.read_node(NODE)
    except client.ApiException:
        return {}
    return dict(getattr(node.status, field) or {})


def bind(core: Any, name: str, gpus: str, borrows: str | None = None) -> None:
    """A two-GPU pod bound as gpufleet's scheduler binds: the Binding carries the assignment
    (and, for a borrower, the standby it borrows from)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "nobody",
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }
    core.create_namespaced_pod("default", pod)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": name,
            "annotations": {"gpufleet.io/gpus": gpus}
            | ({"gpufleet.io/borrows": borrows} if borrows else {}),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    }
    core.create_namespaced_binding("default", binding, _preload_content=False)


def allocated(uid: str) -> list[str] | None:
    """The devices the kubelet's device manager recorded for a pod, from its checkpoint."""
    try:
        doc = json.loads(CHECKPOINT.read_text())
    except (FileNotFoundError, ValueError):
        return None
    for entry in doc["Data"]["PodDeviceEntries"] or []:
        if entry["PodUID"] == uid:
            return sorted(d for ids in entry["DeviceIDs"].values() for d in ids)
    return None


def _measure(
    binary: Path,
    sandbox: Sandbox,
    work: Path,
    procs: list[Any],
    results: dict[str, Any],
    lend: bool = False,
) -> None:
    """The steps timed on the running sandbox: the kubelet joins, the plugin registers, two pods
    get the GPUs the scheduler chose, a GPU turns unhealthy, the kubelet restarts. Every process
    started goes to `procs` (the caller stops them), every measure to `results`."""
    core = client.CoreV1Api(config.new_client_from_config(str(sandbox.kubeconfig)))
    conf = kubelet_config(work, work / "cri.sock")
    kubelet_log = work / "kubelet.log"
    kubelet = start_kubelet(binary, conf, sandbox.kubeconfig, work, kubelet_log)
    procs.append(kubelet)
    t0 = time.monotonic()
    wait_for(lambda: node_resources(core, "capacity").get("pods"), "the node", 60)
    results["kubelet_node_registered_s"] = round(time.monotonic() - t0, 2)
    core.patch_node(NODE, {"metadata": {"labels": {"gpufleet.io/node-pool": "h100"}}})

    health = work / "health"
    plugin_log = work / "plugin.log"
    t0 = time.monotonic()
    plugin = subprocess.Popen(
        [
            sys.executable, "-m", "gpufleet.cli", "device-plugin",
            "--node-name", NODE, "--fleet", str(default_fleet_path()),
            "--kubeconfig", str(sandbox.kubeconfig), "--device-dir", str(work / "dev"),
            "--health-file", str(health), "--label-node", "--poll-interval", "0.2",
            *(["--lend-devices"] if lend else []),
        ],
        stdout=plugin_log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    procs.append(plugin)
    wait_for(lambda: "registered nvidia.com/gpu" in plugin_log.read_text(), "registration", 60)
    results["plugin_registered_s"] = round(time.monotonic() - t0, 2)
    devices = "16" if lend else "8"
    wait_for(
        lambda: node_resources(core, "capacity").get("nvidia.com/gpu") == devices,
        "nvidia.com/gpu in the node's capacity",
        60,
    )
    results["capacity_visible_s"] = round(time.monotonic() - t0, 2)

    picks = {}
    for name, gpus in (("first", "5,6"), ("second", "2,7")):
        bind(core, name, gpus)
        uid = core.read_namespaced_pod(name, "default").metadata.uid
        picks[name] = (gpus.split(","), wait_for(lambda u=uid: allocated(u), name, 60))
    if lend:
        # GPUs 5,6 are held by "first" (the standby): the borrower gets their lend devices,
        # a pod that does not borrow gets none (the kubelet packs it onto free GPUs).
        bind(core, "borrower", "5,6", borrows="default/first")
        uid = core.read_namespaced_pod("borrower", "default").metadata.uid
        picks["borrower"] = (["5::lend", "6::lend"], wait_for(lambda: allocated(uid), "lend", 60))
        bind(core, "plain", "5,6")
        uid = core.read_namespaced_pod("plain", "default").metadata.uid
        plain = wait_for(lambda: allocated(uid), "plain", 60)
        results["plain_got_no_lend_device"] = not any(d.endswith("::lend") for d in plain)
    results["preferred_allocation_followed"] = all(w == got for w, got in picks.values())
    results["allocations"] = {n: got for n, (_, got) in picks.items()}

    t0 = time.monotonic()
    health.write_text("3\n")
    healthy = "14" if lend else "7"  # GPU 3 takes its lend device with it
    wait_for(
        lambda: node_resources(core, "allocatable").get("nvidia.com/gpu") == healthy,
        "GPU 3 out of the allocatable GPUs",
        60,
    )
    results["unhealthy_to_allocatable_s"] = round(time.monotonic() - t0, 2)

    stop(kubelet)
    registered = plugin_log.read_text().count("registered nvidia.com/gpu")
    t0 = time.monotonic()
    procs.append(start_kubelet(binary, conf, sandbox.kubeconfig, work, kubelet_log))
    wait_for(
        lambda: plugin_log.read_text().count("registered nvidia.com/gpu") > registered,
        "registration with the restarted kubelet",
        60,
    )
    results["reregistered_after_restart_s"] = round(time.monotonic() - t0, 2)


def _preflight() -> str | None:
    """Why the benchmark cannot run on this machine now, or None."""
    if os.geteuid() != 0:
        return "needs root: the kubelet writes /var/lib/kubelet and cgroups"
    if (PLUGIN_DIR / "kubelet.sock").exists():
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(PLUGIN_DIR / "kubelet.sock"))
                return "another kubelet serves /var/lib/kubelet/device-plugins"
            except OSError:
                pass  # a stale socket of an earlier run
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lend-devices",
        action="store_true",
        help="run the plugin with lend devices and check a borrower's allocation",
    )
    args = parser.parse_args()
    problem = _preflight()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    created_var_lib = not Path("/var/lib/kubelet").exists()
    binary = ensure_binaries(components=("etcd", "kwok", "kubernetes", "kubelet")).kubelet
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gk-") as tmp:
        work = Path(tmp)
        sandbox = Sandbox(work / "sandbox")
        procs: list[Any] = []
        cri = None
        try:
            sandbox.up(progress=lambda m: print(f"[sandbox] {m}"))
            cri = cri_stub.serve(work / "cri.sock", work / "cri")
            _measure(binary, sandbox, work, procs, results, lend=args.lend_devices)
        finally:
            for proc in reversed(procs):
                stop(proc)
            # The kubelet bind-mounts its root folder onto itself; the folder goes with the run.
            subprocess.run(["umount", str(work / "root")], check=False, capture_output=True)
            if cri is not None:
                cri.stop(None)
            sandbox.down(progress=lambda _: None)
            for path in PLUGIN_DIR.glob("*"):
                path.unlink()
            if created_var_lib:
                subprocess.run(["rm", "-rf", "/var/lib/kubelet"], check=False)

    print(f"{'measure':<34} value")
    for key, value in results.items():
        print(f"{key:<34} {value}")
    print(json.dumps(results))
    ok = results.get("preferred_allocation_followed") and results.get("plain_got_no_lend_device", 1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
