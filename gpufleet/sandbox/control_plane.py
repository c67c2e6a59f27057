"""The sandbox: a real Kubernetes control plane on 127.0.0.1 with a simulated GPU fleet.

`Sandbox.up()` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the
fake MIG manager as background processes, installs gpufleet's CRDs and creates the fleet's nodes.
Each runs under its own supervisor (`supervisor.py`), which starts it again when it dies, as a
kubelet restarts a pod's container, and counts the restarts. The PIDs, commands and ports go to
a state file, so `status`, `down` and stopping or starting one component (`stop_component`,
`start_component`: the same command again, as after a crash) work from any later command.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpufleet.admin.tls import ensure_self_signed
from gpufleet.model.fleet import load_fleet
from gpufleet.model.migparted import load_default_configs
from gpufleet.sandbox import (
    fleetnodes,
    kwok_grace,
    kwok_readiness,
    processes,
    serving_stand_in,
    supervisor,
)
from gpufleet.sandbox.binaries import Binaries, ensure_binaries
from gpufleet.sandbox.node_manifests import fleet_manifests, sandbox_pool_check
from gpufleet.sandbox.pki import ensure_pki, issue_client_cert, write_kubeconfig
from gpufleet.scheduler.nodes import node_ready
from gpufleet.settings import CONFIG_FILE_ENV

SYSTEM_NAMESPACE = "gpufleet-system"
MIG_CONFIGMAP = "default-mig-parted-config"
# Fake addresses from TEST-NET-2 / a private pod range: written into objects, never contacted.
FAKE_NODE_IP = "198.51.100.1"
FAKE_POD_CIDR = "10.244.0.0/16"
# kwok stages from its module: nodes become Ready and keep a lease; bound pods become Running;
# `kwok_grace`'s: deleted pods go away (there is no kubelet to confirm deletion), at once or, when
# a pod asks, after its grace period; and `kwok_readiness`'s own stages: Ready follows the pods'
# readiness gates, as a kubelet's does.
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
)
KWOK_WORKERS = 32  # parallel node stages, pod stages and node-lease renewals in kwok
# Start order; `down` stops in reverse. The operator is optional (`up(operator=True)`): tests
# start their own, which they can kill at will.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "mig-manager",
)
OPERATOR = "gpufleet-operator"
# Processes run under a supervisor. The demo's simulated vLLM servers are not: the Prometheus
# they start is on a port the example ServingJob names, which a restart would move.
SUPERVISED = (*COMPONENTS, OPERATOR)
# API Priority and Fairness on (`up(apf=True)`, `start_component(..., apf=True)`): the API
# server's default concurrency limits, which APF shares out among its priority levels.
APF_FLAGS = {
    "--enable-priority-and-fairness": "true",
    "--max-requests-inflight": "400",
    "--max-mutating-requests-inflight": "200",
}
# The operator's admin API (port name in the state file) and the account to sign in with.
ADMIN = "admin-api"
ADMIN_USER = "gpufleet-admin"
# The demo's simulated vLLM servers and the Prometheus scraping them (`ensure_serving`).
SERVING = "serving-sim"
PROMETHEUS = "prometheus"
# The sandbox operator's config file: the demo's load repeats every nine minutes, and a burst
# reserve that halves every minute (the policy's default is ten) lets its pools shrink between
# two bursts.
OPERATOR_SETTINGS = {"autoscaler": {"burst_memory_half_life_s": 60}}


def default_fleet_path() -> Path:
    """The default fleet file shipped with the package."""
    return Path(__file__).parent / "fleets" / "default.yaml"


def default_state_dir() -> Path:
    """Where `gpufleet sandbox` keeps its state: $GPUFLEET_SANDBOX_DIR or ~/.local/state."""
    import os

    if env := os.environ.get("GPUFLEET_SANDBOX_DIR"):
        return Path(env)
    return Path.home() / ".local" / "state" / "gpufleet" / "sandbox"


@dataclass
class SandboxState:
    """What a running sandbox is: PIDs and markers (a supervised component's are its
    supervisor's), the commands supervised and their own markers, ports, fleet file."""

    pids: dict[str, int] = field(default_factory=dict)
    markers: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    fleet: str = ""
    argv: dict[str, list[str]] = field(default_factory=dict)
    child_markers: dict[str, str] = field(default_factory=dict)


class Sandbox:
    """One sandbox cluster rooted at `state_dir`."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.pki = self.state_dir / "pki"
        self.logs = self.state_dir / "logs"
        self.kubeconfig = self.state_dir / "kubeconfig"
        self._state_file = self.state_dir / "state.json"

    # -- state ------------------------------------------------------------------------------

    def _load_state(self) -> SandboxState | None:
        if not self._state_file.exists():
            return None
        return SandboxState(**json.loads(self._state_file.read_text()))

    def _save_state(self, state: SandboxState) -> None:
        self._state_file.write_text(json.dumps(state.__dict__, indent=2))

    def supervisor_status(self, name: str) -> dict[str, Any]:
        """What the supervisor of `name` last wrote: child `pid`, `restarts`, `last_exit`."""
        return supervisor.read_status(self._status_file(name))

    def _status_file(self, name: str) -> Path:
        return self.state_dir / "supervised" / f"{name}.json"

    def _alive(self, state: SandboxState, name: str) -> bool:
        """Whether the process of `name` itself (a supervised component's child) runs."""
        if name not in state.argv:
            return processes.is_ours(state.pids[name], state.markers[name])
        pid = self.supervisor_status(name).get("pid")
        return pid is not None and processes.is_ours(int(pid), state.child_markers[name])

    def running_components(self) -> dict[str, bool]:
        """Each recorded component and whether its process is alive at this moment (a
        supervised one may be dead for the moment and about to be restarted)."""
        state = self._load_state()
        if state is None:
            return {}
        return {name: self._alive(state, name) for name in state.pids}

    def component_pid(self, name: str) -> int | None:
        """The PID of a recorded component's process while it runs (benchmarks pause or kill
        it; a supervised one is then restarted by its supervisor, under a new PID)."""
        state = self._load_state()
        if state is None or name not in state.pids or not self._alive(state, name):
            return None
        if name in state.argv:
            return int(self.supervisor_status(name)["pid"])
        return state.pids[name]

    def is_running(self) -> bool:
        """Whether every control-plane component of a recorded sandbox runs or is supervised
        (about to be restarted)."""
        state = self._load_state()
        if state is None or not set(COMPONENTS) <= set(state.pids):
            return False
        return all(processes.is_ours(state.pids[name], state.markers[name]) for name in COMPONENTS)

    def user_kubeconfig(self, user: str) -> Path:
        """A kubeconfig for `user`, a client certificate in no group (so neither
        `system:masters`, which API Priority and Fairness never throttles, nor allowed
        anything RBAC does not grant it)."""
        state = self._load_state()
        assert state is not None, "start the sandbox first"
        path = self.state_dir / f"kubeconfig-{user}"
        server = f"https://127.0.0.1:{state.ports['kube-apiserver']}"
        write_kubeconfig(path, self.pki, server, cert=issue_client_cert(self.pki, user))
        return path

    # -- kubectl ----------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this sandbox."""
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(self, docs: list[dict[str, Any]]) -> None:
        """`kubectl apply` a list of objects."""
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    # -- lifecycle --------------------------------------------------------------------------

    def up(
        self,
        fleet: Path | None = None,
        progress: Callable[[str], None] = print,
        operator: bool = False,
        apf: bool = False,
    ) -> None:
        """Start the sandbox (or check the running one) and make sure the fleet exists.

        With `operator`, also run `gpufleet operator` (operator and scheduler) against it.
        With `apf`, a newly started API server applies API Priority and Fairness (throttling
        with 429 and Retry-After; the sandbox runs without it by default).
        """
        started = time.monotonic()
        fleet_file = fleet or default_fleet_path()
        # A bad fleet file fails (InputError, naming file, line and field) before anything starts.
        fleet_spec = load_fleet(fleet_file, check=sandbox_pool_check(load_default_configs()))
        fleet_path = fleet_file.resolve()
        if shutil.which("kubectl") is None:
            raise RuntimeError("kubectl is not on PATH; the sandbox installs objects with it")
        binaries = ensure_binaries(progress)
        if self.is_running():
            progress(f"sandbox already running ({self.state_dir})")
        else:
            if self._load_state() is not None:
                progress("stopping the remains of an earlier sandbox")
                self.down(progress=lambda _: None)
            factor = fleetnodes.heartbeat_factor(fleet_spec.total_nodes)
            self._start(binaries, fleet_path, progress, apf, factor)
        progress("installing CRDs and the MIG layouts")
        self._install_crds()
        self._install_mig_configs()
        progress(f"creating {fleet_spec.total_nodes} nodes with {fleet_spec.total_gpus} GPUs")
        docs = fleet_manifests(fleet_spec, load_default_configs())
        created_at = time.monotonic()
        created = fleetnodes.create_nodes(self.kubeconfig, docs)
        if created:
            progress(f"created {created} nodes in {time.monotonic() - created_at:.1f}s")
        fleetnodes.wait_ready(
            self.kubeconfig, len(docs), "type=kwok", 120 + 0.1 * len(docs), progress
        )
        if operator:
            self._install_admin_user()
            self._ensure_operator(progress)
        elapsed = time.monotonic() - started
        progress(f"sandbox ready in {elapsed:.1f}s; KUBECONFIG={self.kubeconfig}")
        if operator and (url := self.admin_url()):
            progress(
                f"admin API and dashboard: {url}/ (certificate {self.admin_tls_dir}/admin.crt)"
            )

    def _start(
        self,
        binaries: Binaries,
        fleet_path: Path,
        progress: Callable[[str], None],
        apf: bool = False,
        heartbeat_factor: int = 1,
    ) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ensure_pki(self.pki)
        state = SandboxState(fleet=str(fleet_path))
        for name in ("etcd", "etcd-peer", "kube-apiserver", "kcm", "scheduler"):
            state.ports[name] = processes.free_port()
        write_kubeconfig(
            self.kubeconfig, self.pki, f"https://127.0.0.1:{state.ports['kube-apiserver']}"
        )
        self._save_state(state)  # recorded before each spawn, so `down` can clean up a failed up

        def launch(name: str, argv: list[str]) -> None:
            marker = argv[0] if name != "mig-manager" else str(self.kubeconfig)
            self._supervise(state, name, argv, marker)

        progress("starting etcd")
        launch("etcd", self._etcd_args(binaries, state))
        self._wait_ready(state, "etcd")
        progress("starting kube-apiserver")
        apiserver = self._apiserver_args(binaries, state)
        launch("kube-apiserver", _with_flags(apiserver, APF_FLAGS) if apf else apiserver)
        self._wait_ready(state, "kube-apiserver")
        progress("starting kube-controller-manager, kube-scheduler, kwok, MIG manager")
        launch("kube-controller-manager", self._kcm_args(binaries, state, heartbeat_factor))
        launch("kube-scheduler", self._scheduler_args(binaries, state))
        launch("kwok", self._kwok_args(binaries, heartbeat_factor))
        launch(
            "mig-manager",
            [sys.executable, "-m", "gpufleet.sandbox.migmanager",
             f"--kubeconfig={self.kubeconfig}", f"--namespace={SYSTEM_NAMESPACE}"],
        )  # fmt: skip

    def _supervise(
        self, state: SandboxState, name: str, argv: list[str], marker: str, append: bool = False
    ) -> None:
        """Start `argv` under a supervisor and record both (before `down` may need them)."""
        status = self._status_file(name)
        status.parent.mkdir(parents=True, exist_ok=True)
        state.argv[name] = argv
        state.child_markers[name] = marker
        state.markers[name] = str(status)
        state.pids[name] = processes.spawn(
            [sys.executable, "-m", "gpufleet.sandbox.supervisor", f"--status={status}", "--",
             *argv],
            self.logs / f"{name}.log",
            append=append,
        )  # fmt: skip
        self._save_state(state)

    def _wait_ready(self, state: SandboxState, name: str) -> None:
        """Wait until etcd or the API server answers its health check."""
        log = self.logs / f"{name}.log"
        if name == "etcd":
            url = f"http://127.0.0.1:{state.ports['etcd']}/health"
            processes.wait_until(lambda: _http_ok(url), "etcd", 30, log)
        elif name == "kube-apiserver":
            url = f"https://127.0.0.1:{state.ports['kube-apiserver']}/readyz"
            processes.wait_until(lambda: _https_ok(url, self.pki), "kube-apiserver", 90, log)

    def stop_component(self, name: str, graceful: bool = False) -> None:
        """Stop one supervised component, and its supervisor so nothing restarts it, until
        `start_component`: an outage of that component. SIGKILL, as in a crash, unless
        `graceful` (SIGTERM: the API server then takes its time to drain)."""
        state = self._load_state()
        if state is None or name not in state.argv:
            raise KeyError(f"no supervised component {name!r} in this sandbox")
        end = processes.stop if graceful else processes.kill
        if name in state.pids:
            end(state.pids.pop(name), state.markers[name])
        child = self.supervisor_status(name).get("pid")
        if child is not None:  # after a kill the child is ours to stop
            end(int(child), state.child_markers[name])
        self._save_state(state)

    def start_component(
        self, name: str, apf: bool | None = None, timeout: float | None = None
    ) -> None:
        """Start a stopped component again with the command it had (with API Priority and
        Fairness switched on or off when `apf` is given, for the API server), and wait for
        its health check (etcd, the API server)."""
        state = self._load_state()
        if state is None or name not in state.argv:
            raise KeyError(f"no supervised component {name!r} in this sandbox")
        if name in state.pids and processes.is_ours(state.pids[name], state.markers[name]):
            raise RuntimeError(f"{name} is running; stop it first")
        argv = state.argv[name]
        if apf is not None:
            argv = _with_flags(argv, APF_FLAGS if apf else _APF_OFF)
        self._supervise(state, name, argv, state.child_markers[name], append=True)
        self._wait_ready(state, name)

    def _ensure_operator(self, progress: Callable[[str], None]) -> None:
        state = self._load_state()
        assert state is not None
        if OPERATOR in state.pids and processes.is_ours(
            state.pids[OPERATOR], state.markers[OPERATOR]
        ):
            return
        progress("starting gpufleet operator (operator, scheduler, admin API and dashboard)")
        state.ports[ADMIN] = processes.free_port()
        cert, key = ensure_self_signed(self.admin_tls_dir)
        argv = [
            sys.executable, "-m", "gpufleet.app", f"--kubeconfig={self.kubeconfig}",
            # One replica only here: a short lease lets a restarted operator take over at once.
            "--lease-duration=3",
            f"--admin-port={state.ports[ADMIN]}", f"--admin-tls-cert={cert}",
            f"--admin-tls-key={key}",
        ]  # fmt: skip
        # The user's environment (GPUFLEET_*) wins over this file; their own file replaces it.
        if CONFIG_FILE_ENV not in os.environ:
            config = self.state_dir / "operator-settings.yaml"
            config.write_text(yaml.safe_dump(OPERATOR_SETTINGS))
            argv.append(f"--config={config}")
        self._supervise(state, OPERATOR, argv, str(self.kubeconfig))
        # Return once the supervisor has the operator running (its start takes seconds on a
        # busy machine), so that `component_pid` and `status` show it.
        log = self.logs / f"{OPERATOR}.log"
        running = functools.partial(self._alive, state, OPERATOR)
        processes.wait_until(running, "gpufleet operator", 60, log)

    def ensure_serving(
        self, namespace: str, servingjob: str, progress: Callable[[str], None] = print
    ) -> str:
        """Run simulated vLLM servers for the disaggregated ServingJob `namespace/servingjob`
        and a real Prometheus scraping them (`gpufleet.sandbox.serving_stand_in`); returns its
        URL."""
        state = self._load_state()
        assert state is not None, "start the sandbox first"
        serving_dir = self.state_dir / "serving"
        info_file = serving_dir / serving_stand_in.INFO_FILE
        if not (
            SERVING in state.pids
            and processes.is_ours(state.pids[SERVING], str(serving_dir))
            and info_file.exists()
        ):
            progress(f"starting simulated vLLM servers for {servingjob} and Prometheus")
            info_file.unlink(missing_ok=True)
            argv = [
                sys.executable, "-m", "gpufleet.sandbox.serving_stand_in",
                f"--kubeconfig={self.kubeconfig}", f"--state-dir={serving_dir}",
                f"--namespace={namespace}", f"--servingjob={servingjob}",
            ]  # fmt: skip
            state.pids[SERVING] = processes.spawn(argv, self.logs / f"{SERVING}.log")
            state.markers[SERVING] = str(serving_dir)
            self._save_state(state)
            log = self.logs / f"{SERVING}.log"
            processes.wait_until(info_file.exists, "simulated servers and Prometheus", 60, log)
        info = json.loads(info_file.read_text())
        state.pids[PROMETHEUS] = int(info["prometheus_pid"])
        state.markers[PROMETHEUS] = str(info["prometheus_marker"])
        self._save_state(state)
        return str(info["prometheus_url"])

    def down(self, progress: Callable[[str], None] = print) -> None:
        """Stop every process this sandbox started and delete its cluster data."""
        state = self._load_state()
        if state is None:
            progress("no sandbox running")
            return
        # The serving simulator stops its Prometheus itself; a killed one leaves it to us.
        # A supervisor stops its child and never restarts it after SIGTERM; a child whose
        # supervisor was killed by hand is stopped by its own PID.
        for name in (SERVING, PROMETHEUS, OPERATOR, *reversed(COMPONENTS)):
            if name in state.pids:
                processes.stop(state.pids[name], state.markers[name])
            child = self.supervisor_status(name).get("pid") if name in state.argv else None
            if child is not None:
                processes.stop(int(child), state.child_markers[name])
        for port in state.ports.values():
            processes.wait_until(functools.partial(_port_closed, port), f"port {port}", 15)
        shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
        shutil.rmtree(self._status_file("x").parent, ignore_errors=True)
        self._state_file.unlink(missing_ok=True)
        progress("sandbox stopped")

    def status(self) -> dict[str, Any]:
        """Components and whether they run, ports, and node readiness."""
        state = self._load_state()
        if state is None:
            return {"running": False, "components": {}}
        info: dict[str, Any] = {
            "running": self.is_running(),
            "components": self.running_components(),
            # Times each supervisor started its component again after it died.
            "restarts": {n: self.supervisor_status(n).get("restarts", 0) for n in state.argv},
            "ports": state.ports,
            "fleet": state.fleet,
            "kubeconfig": str(self.kubeconfig),
        }
        if info["running"]:
            nodes = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)["items"]
            info["nodes"] = len(nodes)
            info["nodes_ready"] = sum(node_ready(n) for n in nodes)
        return info

    # -- component arguments ----------------------------------------------------------------

    def _etcd_args(self, b: Binaries, s: SandboxState) -> list[str]:
        client = f"http://127.0.0.1:{s.ports['etcd']}"
        peer = f"http://127.0.0.1:{s.ports['etcd-peer']}"
        return [
            str(b.etcd), "--name=sandbox", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=sandbox={peer}", "--listen-metrics-urls=",
            "--auto-compaction-retention=1", "--quota-backend-bytes=8589934592",
            "--unsafe-no-fsync=true",
        ]  # fmt: skip

    def _apiserver_args(self, b: Binaries, s: SandboxState) -> list[str]:
        pki = self.pki
        return [
            str(b.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{s.ports['etcd']}",
            "--bind-address=127.0.0.1", f"--secure-port={s.ports['kube-apiserver']}",
            # A fake, non-loopback advertise address with the endpoint reconciler off: the
            # `kubernetes` Service is never used here and loopback is refused for it.
            f"--advertise-address={FAKE_NODE_IP}", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki / 'admin.crt'}", f"--tls-private-key-file={pki / 'admin.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--authorization-mode=Node,RBAC", "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No kubelet mounts tokens here; without this, pods in a new namespace race the
            # controller that creates its default ServiceAccount. TaintNodesByCondition gives
            # every new node the not-ready taint until the node-lifecycle controller sees it
            # Ready; kwok's nodes are created Ready, and on 5,000 nodes of a loaded machine the
            # controller took over 10 minutes to untaint them all (nodes going NotReady later
            # are still tainted by the controller).
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # The sandbox is the only client: no request throttling, so benchmarks measure
            # gpufleet rather than API priority and fairness.
            "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
        ]  # fmt: skip

    def _kcm_args(self, b: Binaries, s: SandboxState, heartbeat_factor: int = 1) -> list[str]:
        grace = fleetnodes.NODE_GRACE_S * heartbeat_factor
        return [
            str(b.kube_controller_manager), f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={s.ports['kcm']}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            "--leader-elect=false", "--node-monitor-period=5s",
            f"--node-monitor-grace-period={grace}s",
            "--kube-api-qps=500", "--kube-api-burst=1000",
        ]  # fmt: skip

    def _scheduler_args(self, b: Binaries, s: SandboxState) -> list[str]:
        return [
            str(b.kube_scheduler), f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={s.ports['scheduler']}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--leader-elect=false", "--kube-api-qps=500", "--kube-api-burst=1000",
        ]  # fmt: skip

    def _kwok_args(self, b: Binaries, heartbeat_factor: int = 1) -> list[str]:
        lease = fleetnodes.NODE_LEASE_S * heartbeat_factor
        config = self.state_dir / "kwok.yaml"
        stages = [(b.kwok_stages / stage).read_text() for stage in KWOK_STAGES]
        stages += [yaml.safe_dump(stage) for stage in (*kwok_grace.STAGES, *kwok_readiness.STAGES)]
        config.write_text("\n---\n".join([yaml.safe_dump(_kwok_configuration()), *stages]))
        return [
            str(b.kwok), f"--kubeconfig={self.kubeconfig}", f"--config={config}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--node-lease-duration-seconds={lease}", f"--cidr={FAKE_POD_CIDR}",
            f"--node-ip={FAKE_NODE_IP}",
        ]  # fmt: skip

    # -- admin API --------------------------------------------------------------------------

    @property
    def admin_tls_dir(self) -> Path:
        """Where the admin API's self-signed certificate is kept."""
        return self.state_dir / "admin-tls"

    def admin_url(self) -> str | None:
        """The sandbox operator's admin API, or None when it is not running."""
        state = self._load_state()
        if state is None or ADMIN not in state.ports:
            return None
        return f"https://127.0.0.1:{state.ports[ADMIN]}"

    def _install_admin_user(self) -> None:
        """A ServiceAccount allowed every admin API route, to sign in to the dashboard with
        (`kubectl create token gpufleet-admin -n gpufleet-system`)."""
        from gpufleet.admin.rbac import USER_RULES

        ref = {"kind": "ServiceAccount", "name": ADMIN_USER, "namespace": SYSTEM_NAMESPACE}
        self.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": ADMIN_USER, "namespace": SYSTEM_NAMESPACE},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": ADMIN_USER},
                    "rules": USER_RULES,
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": ADMIN_USER},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": ADMIN_USER,
                    },
                    "subjects": [ref],
                },
            ]
        )

    # -- cluster objects --------------------------------------------------------------------

    def _install_crds(self) -> None:
        from gpufleet.model.crdgen import crd_documents
        from gpufleet.model.gpuqueue_policy import default_queue, queue_policy_documents

        docs = crd_documents()
        self.apply(docs)
        names = [f"crd/{d['metadata']['name']}" for d in docs]
        self.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")
        # The default queue is created once and then left as the admin edits it; before the
        # admission policy, which the API server needs a moment to be ready to evaluate.
        made = self.kubectl("create", "-f", "-", input=yaml.safe_dump(default_queue()), check=False)
        if made.returncode != 0 and "AlreadyExists" not in made.stderr:
            raise RuntimeError(f"cannot create the default GPUQueue: {made.stderr.strip()}")
        self.apply(queue_policy_documents())

    def _install_mig_configs(self) -> None:
        layouts = yaml.safe_dump(load_default_configs(), sort_keys=False)
        self.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": MIG_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
                    "data": {"config.yaml": layouts},
                },
            ]
        )


def _kwok_configuration() -> dict[str, Any]:
    """kwok's own options: more of its stage and lease workers than its default of 4 each,
    which took four minutes to make 1,000 new nodes Ready on the shared machine (each status
    patch waiting on a busy API server)."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "nodePlayStageParallelism": KWOK_WORKERS,
            "podPlayStageParallelism": KWOK_WORKERS,
            "nodeLeaseParallelism": KWOK_WORKERS,
        },
    }


# Flags that switch APF back off (the sandbox's default: no throttling at all).
_APF_OFF = {
    "--enable-priority-and-fairness": "false",
    "--max-requests-inflight": "0",
    "--max-mutating-requests-inflight": "0",
}


def _with_flags(argv: list[str], flags: dict[str, str]) -> list[str]:
    """`argv` with each `--flag=value` of `flags` replacing the same flag, or added."""
    kept = [a for a in argv if a.split("=", 1)[0] not in flags]
    return kept + [f"{k}={v}" for k, v in flags.items()]


def _port_closed(port: int) -> bool:
    return not processes.port_open(port)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def _https_ok(url: str, pki: Path) -> bool:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(url, timeout=2, context=context) as response:
        return bool(response.status == 200)
