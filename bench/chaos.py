"""Chaos under load: faults while TrainingJobs stream in and a ServingJob serves, with the
cluster invariants checked throughout. Bounded in time, loopback only.

One private sandbox (the default 16-node, 96-GPU fleet with MIG nodes, or --fleet), two
`gpufleet operator` replicas electing a leader (--lease-duration), and:
- a stream of TrainingJobs of mixed sizes, types, MIG slices and priorities (one every
  --interval seconds, each "running" for 10-60 s, after which the harness marks its pods
  Succeeded as a finished container would: only once every pod is bound and Running, and a
  preempted job runs its time again from its next start);
- the example disaggregated ServingJob with the sandbox's simulated vLLM servers and real
  Prometheus, so the autoscaler acts under its load pattern (--no-serving leaves it out);
- faults at random moments of --duration seconds, one after another: SIGKILL of the leading
  replica (--kills times; it is started again as a standby, as a Deployment would), a
  kube-apiserver restart and an etcd restart (each down --outage seconds), 10 % of the nodes
  NotReady for --notready seconds (kwok stops heart-beating them) and back, and a Lease
  handover (the leader stopped with SIGTERM, releasing its Lease, then started as a standby);
  --faults picks some of the kinds (e.g. `--faults etcd,kube-apiserver`);
- every 2 s, the invariant checker (gpufleet.testing): no GPU or MIG slice in use twice or
  beyond a node's capacity, no two pods for one rank, no gang partly bound for longer than 3 s
  under a live leader; a gang a killed leader left partly bound (one Binding written of its
  gang's) is the next leader's to complete or restart within --takeover seconds of taking the
  Lease, plus the 3 s (invariants.PartialGangClock);
- lost jobs: a TrainingJob that disappears before it was seen Succeeded (jobs are removed 60 s
  after they finish), or a job the stream created that never got a phase;
- after the last fault the stream stops and every job must be Running or Succeeded within
  --bound seconds; the ServingJob (its phase and ready replicas followed every 2 s and each
  change logged) must be Ready again within --bound seconds of the last fault clearing
  (reported: after how long, and the count of ServingJobs that were not);
- pods seen Succeeded and later Running again (kwok, the sandbox's kubelet, does that to a pod
  marked finished before kwok started it): reported apart, as a harness fault.

    python bench/chaos.py                         # 10 minutes of faults, 20 kills
    python bench/chaos.py --duration 300 --kills 20 --interval 4 --no-serving

Prints the faults and the violations; the last line is one JSON object. --log-dir keeps the
operators' logs and, at the end, the serving namespace's ServingJob, Events, Deployments,
ReplicaSets and pods and the nodes (serving-end.json) and the sandbox components' logs.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.cliargs import OneLineParser, input_error_exit, output_dir, positive_int
from gpufleet.model.contract import names
from gpufleet.model.fleet import load_fleet
from gpufleet.model.input_error import InputError
from gpufleet.model.migparted import load_default_configs
from gpufleet.sandbox.control_plane import Sandbox, default_fleet_path
from gpufleet.sandbox.node_manifests import sandbox_pool_check
from gpufleet.scheduler.informer import Informer
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.runtime import api_client
from gpufleet.testing.invariants import TAKEOVER_S
from gpufleet.testing.node_faults import break_nodes, restore_nodes
from gpufleet.testing.operator import Kube, OperatorProcess, SettledInvariants, training_job

PROG = "chaos.py"
JOBS_NS = "chaos"
SERVING_NS = "chaos-serving"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "servingjob-disaggregated.yaml"
# (type, GPUs per replica or MIG profile, most replicas): sizes the default fleet can hold.
SHAPES = (
    ("T4", 1, 4), ("T4", 2, 2), ("L4", 1, 4), ("L4", 4, 2), ("A100-80GB", 2, 2),
    ("A100-80GB", 8, 1), ("H100-80GB", 4, 2), ("H100-80GB", 8, 1), ("A100-80GB", "1g.10gb", 4),
    ("H100-80GB", "3g.40gb", 2),
)  # fmt: skip
FINISHED_TTL_S = 60
FAULTS = ("kill", "kube-apiserver", "etcd", "notready", "handover")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Job:
    name: str
    created: float
    runs_for: float
    replicas: int
    first_running_at: float | None = None
    running_at: float | None = None  # since when the current run is Running
    succeeded: bool = False
    finished_sent: bool = False
    gone: bool = False


@dataclass
class Record:
    """What the run saw: faults done, violations, lost jobs, and polls the API refused."""

    faults: dict[str, int] = field(default_factory=dict)
    violations: dict[str, float] = field(default_factory=dict)  # first seen, seconds into the run
    lost: list[str] = field(default_factory=list)
    refused_polls: int = 0
    refused_creates: int = 0
    leaders: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Replicas:
    """Two operator replicas; the leader is the one whose PID the Lease names."""

    def __init__(self, make: Callable[[int], OperatorProcess]) -> None:
        self.all = [make(0), make(1)]

    def start(self) -> None:
        self.all[0].start(timeout=120)
        self.all[1].start(timeout=120, lead=False)

    def leader(self, timeout: float = 120.0) -> OperatorProcess:
        """The replica holding the Lease; replicas that exited meanwhile are started again
        (a replica that sees another holder exits by design)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.restart_dead()
            for r in self.all:
                if r.proc is not None and r.proc.poll() is None and r.holds_lease():
                    return r
            time.sleep(0.2)
        raise TimeoutError("no replica took the Lease")

    def restart_dead(self) -> None:
        """Start again, as standbys, replicas that exited (a Deployment's restart)."""
        for r in self.all:
            if r.proc is None or r.proc.poll() is not None:
                r.start(timeout=120, lead=False)

    def stop(self) -> None:
        for r in self.all:
            r.stop()


Shape = tuple[str, int | str, int]  # (GPU type, GPUs per replica or MIG profile, most replicas)


class Watched:
    """One resource of `namespace` as a watch shows it, by name: what `Load` follows. Listing
    every job and pod each second made the harness the bottleneck of a long run (a 10,000-job
    soak at 3 a second: each poll of some 6,000 jobs took minutes at load 8, jobs ran on long
    after their time, and the fleet filled up); the informer lists again after any outage."""

    def __init__(self, name: str, list_fn: Callable[..., Any], namespace: str) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.informer = Informer(
            name, list_fn, self._on_list, self._on_event, self.stop, namespace=namespace
        )

    def _on_list(self, items: list[dict[str, Any]]) -> None:
        fresh = {o["metadata"]["name"]: o for o in items}
        with self._lock:
            self.items = fresh

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self.items.pop(name, None)
            else:
                self.items[name] = obj

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self.items)


class Load(threading.Thread):
    """Creates TrainingJobs (one per `interval` seconds, `limit` in all), marks their pods
    Succeeded once they ran for their time (uniform in `runs_for`), and follows their phases.

    `creators` threads create, each job at its planned time, so API latency under load does not
    lower the rate (one thread creating and following fell to about one job a second at load
    average 15-20); this thread follows."""

    def __init__(
        self,
        kube: Kube,
        record: Record,
        interval: float,
        seed: int,
        shapes: tuple[Shape, ...] = SHAPES,
        runs_for: tuple[float, float] = (10.0, 60.0),
        limit: int | None = None,
        creators: int = 4,
    ) -> None:
        super().__init__(daemon=True)
        self.kube, self.record, self.interval = kube, record, interval
        self.shapes, self.runs_for, self.limit = shapes, runs_for, limit
        self.rng = random.Random(seed)
        self.jobs: dict[str, Job] = {}
        self.creating = threading.Event()
        self.creating.set()
        self.stop = threading.Event()
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._planned = 0  # jobs handed to a creator so far
        self._running = creators
        self._creators = [
            threading.Thread(target=self._create, daemon=True) for _ in range(creators)
        ]
        list_jobs = functools.partial(
            kube.custom.list_namespaced_custom_object,
            group="gpufleet.io", version="v1alpha1", plural="trainingjobs",
        )  # fmt: skip
        self.watched_jobs = Watched(f"trainingjobs-{JOBS_NS}", list_jobs, JOBS_NS)
        self.watched_pods = Watched(f"pods-{JOBS_NS}", kube.core.list_namespaced_pod, JOBS_NS)

    def manifest(self, name: str) -> dict[str, Any]:
        gpu_type, size, most = self.rng.choice(self.shapes)
        replicas = self.rng.randint(1, most)
        priority = self.rng.choice((0, 0, 1, 2))
        if isinstance(size, str):
            doc = training_job(name, replicas, 1, gpu_type, priority, mig_profile=size)
        else:
            doc = training_job(name, replicas, size, gpu_type, priority)
        doc["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": FINISHED_TTL_S}
        return doc

    def snapshot(self) -> list[Job]:
        """The jobs created so far (the creators add to them meanwhile)."""
        with self._lock:
            return list(self.jobs.values())

    def _next(self) -> tuple[int, dict[str, Any], float] | None:
        """The next job to create: its index, manifest and run time; None when all are."""
        with self._lock:
            if self.limit is not None and self._planned >= self.limit:
                return None
            index = self._planned
            self._planned += 1
            doc = self.manifest(f"j{index:05d}")  # drawn in index order: seeded, repeatable
            return index, doc, self.rng.uniform(*self.runs_for)

    def _create(self) -> None:
        try:
            self._create_planned()
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    self.creating.clear()  # every planned job is created

    def _create_planned(self) -> None:
        while not self.stop.is_set() and self.creating.is_set():
            planned = self._next()
            if planned is None:
                return
            index, doc, runs_for = planned
            if self.stop.wait(max(0.0, self.started + index * self.interval - time.monotonic())):
                return
            while self.creating.is_set() and not self.stop.is_set():
                try:
                    self.kube.create_job(JOBS_NS, doc)
                except Exception as exc:
                    # 409: an earlier attempt was stored after all
                    if not (isinstance(exc, ApiException) and exc.status == 409):
                        with self._lock:
                            self.record.refused_creates += 1
                        self.stop.wait(self.interval)  # an outage: try the same job again
                        continue
                name = doc["metadata"]["name"]
                with self._lock:
                    self.jobs[name] = Job(name, time.monotonic(), runs_for, doc["spec"]["replicas"])
                break

    def run(self) -> None:
        for watched in (self.watched_jobs, self.watched_pods):
            watched.informer.start()
        for creator in self._creators:
            creator.start()
        while not self.stop.is_set():
            if not self.watched_jobs.informer.synced.is_set():
                self.stop.wait(0.2)
                continue
            try:
                self.follow()
            except Exception:
                self.record.refused_polls += 1
            self.stop.wait(min(1.0, self.interval))

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        for creator in self._creators:
            creator.join(timeout)
        for watched in (self.watched_jobs, self.watched_pods):
            watched.stop.set()

    def follow(self) -> None:
        """Phases as the watch shows them; the pods of jobs that ran for their time marked
        Succeeded."""
        seen = self.watched_jobs.snapshot()
        now = time.monotonic()
        due: list[Job] = []
        for job in self.snapshot():
            if job.gone:
                continue
            obj = seen.get(job.name)
            if obj is None:
                if now - job.created < 10:
                    continue  # not in the list yet
                job.gone = True
                if not job.succeeded:
                    self.record.lost.append(job.name)
                continue
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Succeeded":
                job.succeeded = True
            elif phase == "Running":
                if job.running_at is None:
                    job.running_at = now
                    job.first_running_at = job.first_running_at or now
                if not job.finished_sent and now - job.running_at >= job.runs_for:
                    due.append(job)
            elif not job.succeeded:
                # Preempted or restarted: its new pods run for the job's time from their start.
                job.running_at, job.finished_sent = None, False
        if due:
            pods: dict[str, list[dict[str, Any]]] = {}
            for pod in self.watched_pods.snapshot().values():
                owner = (pod["metadata"].get("labels") or {}).get(names.TRAININGJOB_LABEL, "")
                pods.setdefault(owner, []).append(pod)
            for job in due:
                self.finish(job, pods.get(job.name, []))

    def finish(self, job: Job, pods: list[dict[str, Any]]) -> None:
        """Mark the job's pods Succeeded, as their containers exiting would; only pods that
        run (bound and Running) can finish, so a job whose phase is stale (preempted, its new
        pods not placed yet) waits for the next poll. Marking pods that never ran once left
        unbound Succeeded pods, and bound ones that kwok then set Running again."""
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        running = [
            p
            for p in live
            if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") == "Running"
        ]
        if len(running) < job.replicas or len(running) < len(live):
            return
        for pod in running:
            self.kube.core.patch_namespaced_pod_status(
                pod["metadata"]["name"], JOBS_NS, {"status": {"phase": "Succeeded"}}
            )
        job.finished_sent = True

    def unsettled(self) -> list[str]:
        """Jobs neither Running nor Succeeded (nor removed after finishing)."""
        phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase")
                  for j in self.kube.jobs(JOBS_NS)}  # fmt: skip
        return sorted(
            f"{job.name}: {phases.get(job.name)}"
            for job in self.snapshot()
            if not job.gone and phases.get(job.name) not in ("Running", "Succeeded")
        )


class PhaseReverts:
    """Pods of `namespace` the watch showed finished (Succeeded or Failed) and later not:
    pod key -> what it went back to and which client last wrote its status (managedFields).
    A kubelet never does that; a stand-in kubelet writing late can."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.finished: set[str] = set()
        self.reverted: dict[str, str] = {}
        self.stop = threading.Event()
        self.informer = Informer(
            f"pods-{namespace}", kube.core.list_namespaced_pod, self.on_list, self.on_event,
            self.stop, namespace=namespace,
        )  # fmt: skip

    def on_list(self, items: list[dict[str, Any]]) -> None:
        for pod in items:
            self.on_event("MODIFIED", pod)

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        key = f"{pod['metadata']['name']}/{pod['metadata'].get('uid', '')}"
        if kind == "DELETED":
            self.finished.discard(key)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            self.finished.add(key)
        elif key in self.finished and key not in self.reverted:
            writers = sorted(
                f"{m.get('manager')}@{m.get('time')}"
                for m in pod["metadata"].get("managedFields") or []
                if m.get("subresource") == "status"
            )
            self.reverted[key] = f"back to {phase}; status written by {', '.join(writers)}"
            log(f"REVERTED {key}: {self.reverted[key]}")


class Checker(threading.Thread):
    """The invariants every 2 s; each distinct violation recorded once, with when."""

    def __init__(self, kube: Kube, record: Record, started: float, takeover: float) -> None:
        super().__init__(daemon=True)
        self.watch = SettledInvariants(kube.core, coordination=kube.coordination, takeover=takeover)
        self.record, self.started = record, started
        self.stop = threading.Event()
        self.checks = 0

    def run(self) -> None:
        while not self.stop.wait(2.0):
            try:
                problems = self.watch.check()
            except Exception:
                self.record.refused_polls += 1
                continue
            self.checks += 1
            for p in problems:
                self.record.violations.setdefault(p, round(time.monotonic() - self.started, 1))
                log(f"VIOLATION {p}")


class Faults:
    """The fault actions; each returns when the fault has cleared."""

    def __init__(
        self, sandbox: Sandbox, kube: Kube, replicas: Replicas, record: Record, args: Any
    ) -> None:
        self.sandbox, self.kube, self.replicas = sandbox, kube, replicas
        self.record, self.args = record, args
        self.rng = random.Random(args.seed + 1)

    def kill(self) -> None:
        leader = self.replicas.leader()
        self.record.leaders.append(leader.pid)
        leader.kill()
        time.sleep(1.0)
        self.replicas.restart_dead()
        self.record.leaders.append(self.replicas.leader().pid)

    def handover(self) -> None:
        leader = self.replicas.leader()
        leader.stop()  # SIGTERM: it releases the Lease and the standby takes it at once
        new = self.replicas.leader()
        assert new is not leader, "the Lease did not move"
        self.record.leaders.append(new.pid)
        self.replicas.restart_dead()

    def outage(self, component: str) -> None:
        self.sandbox.stop_component(component)
        time.sleep(self.args.outage)
        self.sandbox.start_component(component)

    def notready(self) -> None:
        nodes = sorted(n.metadata.name for n in self.kube.core.list_node().items)
        chosen = self.rng.sample(nodes, max(1, math.ceil(0.1 * len(nodes))))
        break_nodes(self.kube.core, chosen, "chaos")
        log(f"  NotReady: {', '.join(chosen)}")
        time.sleep(self.args.notready)
        restore_nodes(self.kube.core, chosen, report_ready=False)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            raw: Any = self.kube.core.list_node(_preload_content=False)
            nodes = json.loads(raw.data)["items"]
            if set(chosen) <= {n["metadata"]["name"] for n in nodes if node_ready(n)}:
                return
            time.sleep(1.0)
        raise TimeoutError(f"nodes {chosen} not Ready again in 120 s")

    def run(self, kind: str) -> None:
        actions: dict[str, Callable[[], None]] = {
            "kill": self.kill,
            "handover": self.handover,
            "kube-apiserver": lambda: self.outage("kube-apiserver"),
            "etcd": lambda: self.outage("etcd"),
            "notready": self.notready,
        }
        actions[kind]()
        self.record.faults[kind] = self.record.faults.get(kind, 0) + 1


def schedule(args: Any) -> list[tuple[float, str]]:
    """(seconds into the run, fault) in time order, all within the first 90 % of the run."""
    rng = random.Random(args.seed)
    kinds = ["kill"] * args.kills + [k for k in FAULTS if k != "kill"]
    kinds = [k for k in kinds if k in args.faults]
    start, end = 20.0, 0.9 * args.duration
    return sorted((rng.uniform(start, end), kind) for kind in kinds)


def start_serving(sandbox: Sandbox, kube: Kube) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    kube.create_namespace(SERVING_NS)
    url = sandbox.ensure_serving(SERVING_NS, doc["metadata"]["name"], progress=log)
    doc["spec"]["autoscaling"]["prometheus"]["url"] = url
    doc["metadata"]["namespace"] = SERVING_NS
    sandbox.apply([doc])


def serving_state(kube: Kube) -> dict[str, Any]:
    raw: Any = kube.custom.list_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", SERVING_NS, "servingjobs"
    )
    out = {}
    for job in raw.get("items", []):
        status = job.get("status") or {}
        out[job["metadata"]["name"]] = {
            "phase": status.get("phase"),
            **{p: (status.get(p) or {}).get("readyReplicas") for p in ("prefill", "decode")},
        }
    return out


class ServingWatch(threading.Thread):
    """The ServingJob's phase and ready replicas every 2 s; each change logged and kept
    (seconds into the run, state), so a run shows when it stopped and started serving."""

    def __init__(self, kube: Kube, record: Record, started: float) -> None:
        super().__init__(daemon=True)
        self.kube, self.record, self.started = kube, record, started
        self.stop = threading.Event()
        self.timeline: list[tuple[float, dict[str, Any]]] = []

    def run(self) -> None:
        while not self.stop.wait(2.0):
            try:
                state = serving_state(self.kube)
            except Exception:
                self.record.refused_polls += 1
                continue
            if not self.timeline or self.timeline[-1][1] != state:
                at = round(time.monotonic() - self.started, 1)
                self.timeline.append((at, state))
                log(f"serving {state}")

    def ready_since(self) -> float | None:
        """Seconds into the run since when every ServingJob is Ready without a break (None:
        not now); changes of ready replicas while Ready do not break it."""
        since = None
        for at, state in reversed(self.timeline):
            if not state or any(s["phase"] != "Ready" for s in state.values()):
                break
            since = at
        return since

    def recovery(self, since: float, bound: float) -> float | None:
        """Wait until every ServingJob is Ready, at most until `bound` s after `since` (seconds
        into the run: when the last fault cleared); how long after `since` it was Ready again
        (0: it never stopped being Ready after then; more than `bound` when it was Ready only
        later, which this wait did not see), or None when it is not Ready."""
        while True:
            ready = self.ready_since()
            if ready is not None:
                return round(max(0.0, ready - since), 1)
            if time.monotonic() - self.started - since >= bound or not self.is_alive():
                return None
            time.sleep(1.0)


def dump_serving(kube: Kube, sandbox: Sandbox, into: Path) -> None:
    """What explains the ServingJob's end state, into `into`: the job, its namespace's Events,
    Deployments, ReplicaSets and pods, the nodes, and the sandbox's component logs."""
    apps = client.AppsV1Api(kube.core.api_client)

    def items(raw: Any) -> list[dict[str, Any]]:
        return list(json.loads(raw.data)["items"])

    out: dict[str, Any] = {
        "servingjobs": kube.custom.list_namespaced_custom_object(
            "gpufleet.io", "v1alpha1", SERVING_NS, "servingjobs"
        )["items"],
        "events": items(kube.core.list_namespaced_event(SERVING_NS, _preload_content=False)),
        "deployments": items(apps.list_namespaced_deployment(SERVING_NS, _preload_content=False)),
        "replicasets": items(apps.list_namespaced_replica_set(SERVING_NS, _preload_content=False)),
        "pods": items(kube.core.list_namespaced_pod(SERVING_NS, _preload_content=False)),
        "nodes": items(kube.core.list_node(_preload_content=False)),
    }
    into.mkdir(parents=True, exist_ok=True)
    (into / "serving-end.json").write_text(json.dumps(out, indent=1))
    shutil.copytree(sandbox.logs, into / "sandbox-logs", dirs_exist_ok=True)


def run(args: Any) -> dict[str, Any]:
    record = Record()
    plan = schedule(args)
    with tempfile.TemporaryDirectory(prefix="gpufleet-chaos-") as tmp:
        root = Path(tmp)
        sandbox = Sandbox(root / "sandbox")
        replicas: Replicas | None = None
        try:
            sandbox.up(args.fleet, progress=lambda m: log(f"[sandbox] {m}"))
            kube = Kube(api_client(str(sandbox.kubeconfig)))
            kube.create_namespace(JOBS_NS)
            lease = f"--lease-duration={args.lease_duration}"

            def make(i: int) -> OperatorProcess:
                return OperatorProcess(
                    sandbox.kubeconfig, args.log_dir / f"operator-{i}.log", kube.coordination,
                    lease, f"--node-failure-grace={args.node_failure_grace}",
                )  # fmt: skip

            replicas = Replicas(make)
            replicas.start()
            record.leaders.append(replicas.leader().pid)
            if args.serving:
                start_serving(sandbox, kube)
            load = Load(kube, record, args.interval, args.seed)
            reverts = PhaseReverts(kube, JOBS_NS)
            reverts.informer.start()
            started = load.started
            checker = Checker(kube, record, started, args.takeover)
            watch = ServingWatch(kube, record, started)
            if args.serving:
                watch.start()
            faults = Faults(sandbox, kube, replicas, record, args)
            last_cleared = 0.0  # seconds into the run when the last fault had cleared
            load.start()
            checker.start()
            try:
                for at, kind in plan:
                    wait = at - (time.monotonic() - started)
                    if wait > 0:
                        time.sleep(wait)
                    log(f"fault {kind}")
                    try:
                        faults.run(kind)
                    except Exception as exc:
                        record.errors.append(f"{kind}: {exc}")
                        log(f"  the harness failed to carry out {kind}: {exc}")
                        traceback.print_exc()
                    last_cleared = time.monotonic() - started
                rest = args.duration - (time.monotonic() - started)
                if rest > 0:
                    time.sleep(rest)
                cleared = time.monotonic()
                load.creating.clear()
                log(f"faults done; waiting up to {args.bound}s for every job to run or finish")
                unsettled: list[str] = []
                while time.monotonic() - cleared < args.bound:
                    try:
                        unsettled = load.unsettled()
                    except Exception:
                        unsettled = ["(the API server did not answer)"]
                    if not unsettled:
                        break
                    time.sleep(2.0)
                settled_s = time.monotonic() - cleared
                recovered_s = watch.recovery(last_cleared, args.bound) if args.serving else None
                time.sleep(4.0)  # a last invariant check on the settled cluster
            finally:
                load.stop.set()
                reverts.stop.set()
                checker.stop.set()
                watch.stop.set()
                checker.join(10)
                load.join(10)
            serving = serving_state(kube) if args.serving else None
            if args.serving:
                try:
                    dump_serving(kube, sandbox, args.log_dir)
                except Exception as exc:  # what it could not save is not a result of the run
                    log(f"could not save the serving namespace's objects: {exc}")
            restarts = sandbox.status()["restarts"]
        finally:
            if replicas is not None:  # also on an interrupt: nothing of the run outlives it
                replicas.stop()
            sandbox.down(progress=lambda _: None)
    waits = [j.first_running_at - j.created for j in load.jobs.values() if j.first_running_at]
    return {
        "bench": "chaos",
        "duration_s": args.duration,
        "faults": record.faults,
        "faults_total": sum(record.faults.values()),
        "harness_errors": record.errors,
        "leader_pids": record.leaders,
        "jobs_created": len(load.jobs),
        "jobs_succeeded": sum(j.succeeded for j in load.jobs.values()),
        "jobs_ran": len(waits),
        "create_to_running_p50_s": round(statistics.median(waits), 1) if waits else None,
        "create_to_running_max_s": round(max(waits), 1) if waits else None,
        "lost_jobs": record.lost,
        "violations": record.violations,
        "violations_total": len(record.violations),
        "invariant_checks": checker.checks,
        "pods_reverted": reverts.reverted,
        "unsettled_after_bound": unsettled,
        "settled_in_s": round(settled_s, 1),
        "bound_s": args.bound,
        "takeover_s": args.takeover,
        "refused_polls": record.refused_polls,
        "refused_creates": record.refused_creates,
        "serving": serving,
        "serving_recovered_in_s": recovered_s,
        "serving_not_recovered": int(
            args.serving and (recovered_s is None or recovered_s > args.bound)
        ),
        "serving_timeline": watch.timeline,
        "sandbox_restarts": restarts,
        "load_average": os.getloadavg(),
    }


def report(out: dict[str, Any]) -> None:
    print(f"faults: {out['faults_total']} {out['faults']}; harness errors {out['harness_errors']}")
    print(f"jobs: {out['jobs_created']} created, {out['jobs_ran']} ran, "
          f"{out['jobs_succeeded']} succeeded; create -> Running p50 "
          f"{out['create_to_running_p50_s']}s max {out['create_to_running_max_s']}s")  # fmt: skip
    unsettled = len(out["unsettled_after_bound"])
    print(f"invariant checks {out['invariant_checks']}: {out['violations_total']} violations; "
          f"lost jobs {len(out['lost_jobs'])}; not Running/finished {out['bound_s']}s after the "
          f"faults: {unsettled} (settled in {out['settled_in_s']}s)")  # fmt: skip
    for v, at in out["violations"].items():
        print(f"  at {at}s: {v}")
    for job in out["unsettled_after_bound"]:
        print(f"  unsettled {job}")
    for pod, what in out["pods_reverted"].items():
        print(f"  finished pod {pod} {what}")
    if out["serving"] is not None:
        print(f"serving: {out['serving']}; Ready {out['serving_recovered_in_s']}s after the last "
              f"fault cleared; not Ready {out['bound_s']}s after it: "
              f"{out['serving_not_recovered']}")  # fmt: skip
    print(f"sandbox component restarts {out['sandbox_restarts']}")


def fault_kinds(text: str) -> tuple[str, ...]:
    """A comma-separated subset of FAULTS."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(FAULTS))
    if not kinds or unknown:
        known = ", ".join(FAULTS)
        raise argparse.ArgumentTypeError(f"unknown fault kinds {unknown or [text]}; known: {known}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=positive_int, default=600, help="seconds of faults")
    parser.add_argument("--kills", type=positive_int, default=20)
    parser.add_argument("--interval", type=positive_int, default=3, help="seconds between jobs")
    parser.add_argument("--outage", type=positive_int, default=10)
    parser.add_argument("--notready", type=positive_int, default=30)
    parser.add_argument("--bound", type=positive_int, default=180)
    parser.add_argument("--lease-duration", type=positive_int, default=15)
    parser.add_argument(
        "--takeover", type=positive_int, default=round(TAKEOVER_S),
        help="seconds a new leader has, from taking the Lease, to complete or restart the gangs "
        "a killed leader left partly bound",
    )  # fmt: skip
    parser.add_argument("--node-failure-grace", type=positive_int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fleet", type=Path, default=None)
    parser.add_argument("--no-serving", dest="serving", action="store_false")
    parser.add_argument(
        "--faults", type=fault_kinds, default=FAULTS,
        help=f"comma-separated fault kinds to inject (default all: {','.join(FAULTS)})",
    )  # fmt: skip
    parser.add_argument("--log-dir", type=output_dir, default=None, help="keep the operators' logs")
    args = parser.parse_args(argv)
    try:  # a bad fleet file: one line naming the file, the line and the field
        load_fleet(
            args.fleet or default_fleet_path(), check=sandbox_pool_check(load_default_configs())
        )
    except InputError as exc:
        return input_error_exit(PROG, exc)
    if args.log_dir is None:
        args.log_dir = Path(tempfile.mkdtemp(prefix="gpufleet-chaos-logs-"))
    out = run(args)
    report(out)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
