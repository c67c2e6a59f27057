"""Live scheduler benchmark on one sandbox: job start latency and bind throughput.

In one sandbox run (a private control plane with a 130-node, 1,040-GPU kwok fleet):
1. latency: `kubectl apply` of a 64-worker TrainingJob (1 GPU per worker) until all 64 pods
   are Running, with `gpufleet operator` (operator + scheduler, one process) doing the work;
   repeated --runs times, the job deleted in between;
2. throughput: a backlog of 1,000 single-GPU pods, for the real kube-scheduler (default
   scheduler name) and for gpufleet (schedulerName: gpufleet), in the same sandbox, same node
   pool, same pods. A watch records when each pod is first seen bound. Two ways to hold the
   backlog back, both measured in every round:
   - pause: the scheduler's process is stopped (SIGSTOP) while the pods are created and
     continued (SIGCONT) once all are visible; timed from the continue to the last binding.
     Everything else is ready, so this is the scheduler's own rate of draining a backlog.
     It is the headline ratio.
   - cordon: every node of the pool is cordoned while the pods are created, then uncordoned;
     timed from the uncordon to the last binding. Here both schedulers follow the 130 node
     updates as they arrive, so this measures keeping up with capacity appearing.
   --rounds rounds, alternating which scheduler goes first; each ratio reported is the median
   of the rounds' ratios (the load of a shared machine drifts between two measurements). The
   scheduler measured second in a round is slower (the first one's 1,000 pods have just been
   deleted), so the default is an even number of rounds: each scheduler goes first as often.

    python bench/bind_bench.py              # ~6 minutes on 2 cores
    python bench/bind_bench.py --runs 3 --pods 500 --rounds 1

Prints a table; the last line is one JSON object.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from gpufleet.cliargs import OneLineParser, output_file, positive_int
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.informer import Informer
from gpufleet.scheduler.runtime import api_client
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

POOL = "bench"
FLEET = {
    "nodePools": [
        {"name": POOL, "count": 130, "gpuType": "L4", "gpusPerNode": 8, "nvlinkDomainSize": 1}
    ]
}


class PodClock:
    """Watches one namespace and records when each pod is first seen bound and Running."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self._stop = threading.Event()
        self._informer = Informer(
            f"bench-{namespace}",
            functools.partial(kube.core.list_namespaced_pod, namespace),
            self._on_list,
            self._on_event,
            self._stop,
        )

    def _seen(self, pod: dict[str, Any]) -> None:
        name, now = pod["metadata"]["name"], time.monotonic()
        if pod["spec"].get("nodeName"):
            self.bound.setdefault(name, now)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(name, now)

    def _on_list(self, items: list[dict[str, Any]]) -> None:
        for pod in items:
            self._seen(pod)

    def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._seen(pod)

    def __enter__(self) -> PodClock:
        self._informer.start()
        self._informer.synced.wait(30)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()


def measure_latency(sandbox: Sandbox, kube: Kube, workers: int, run: int) -> float:
    ns = f"bench-latency-{run}"
    kube.create_namespace(ns)
    manifest = yaml.safe_dump(training_job("bench", workers, 1, "L4"))
    with PodClock(kube, ns) as clock:
        started = time.monotonic()
        sandbox.kubectl("apply", "-n", ns, "-f", "-", input=manifest)
        wait_for(lambda: len(clock.running) >= workers, f"{workers} pods Running", 120)
        elapsed = max(clock.running.values()) - started
    kube.clean_namespace(ns, timeout=120)
    return elapsed


def plain_pod(name: str, scheduler: str | None, pool: str | None = POOL) -> Any:
    """A one-GPU pod for `scheduler` (None: kube-scheduler) on `pool` (None: any GPU node)."""
    spec: dict[str, Any] = {
        # The sandbox's GPU nodes carry the GPU Operator's taint.
        "tolerations": list(GPU_TOLERATIONS),
        "containers": [
            {
                "name": "w",
                "image": "registry.example/x:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
    if pool is not None:
        spec["nodeSelector"] = {"gpufleet.io/node-pool": pool}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _cordon(kube: Kube, nodes: list[str], on: bool) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: kube.core.patch_node(n, {"spec": {"unschedulable": on}}), nodes))


class Hold:
    """Holds a backlog back while it is created (`method` pause or cordon) and releases it."""

    def __init__(self, kube: Kube, method: str, scheduler_pid: int) -> None:
        self.kube, self.method, self.pid = kube, method, scheduler_pid
        self.nodes = [
            str(n.metadata.name)
            for n in kube.core.list_node(label_selector=f"gpufleet.io/node-pool={POOL}").items
            if n.metadata is not None
        ]

    def hold(self) -> None:
        if self.method == "pause":
            os.kill(self.pid, signal.SIGSTOP)
            return
        _cordon(self.kube, self.nodes, True)
        # Let both schedulers' watches deliver the cordon before the first pod exists.
        time.sleep(3)

    def release(self) -> None:
        if self.method == "pause":
            os.kill(self.pid, signal.SIGCONT)
        else:
            _cordon(self.kube, self.nodes, False)


def measure_throughput(
    kube: Kube, pods: int, scheduler: str | None, hold: Hold, tag: str, node_pool: str | None = POOL
) -> dict[str, float]:
    """Create `pods` while `hold` keeps the scheduler from placing them, release, and time
    until the last pod is bound: scheduling and binding only, not the pod-creation rate."""
    ns = f"bench-{tag}"
    kube.create_namespace(ns)
    hold.hold()
    released = False
    try:
        with PodClock(kube, ns) as clock, ThreadPoolExecutor(16) as pool:
            started = time.monotonic()
            list(
                pool.map(
                    lambda i: kube.core.create_namespaced_pod(
                        ns, plain_pod(f"p-{i:04d}", scheduler, node_pool), _preload_content=False
                    ),
                    range(pods),
                )
            )
            created = time.monotonic() - started
            wait_for(lambda: len(kube.pods(ns)) >= pods, "every pod visible", max(60.0, pods / 20))
            assert not clock.bound, "a pod was bound while the backlog was held"
            release_time = time.monotonic()
            hold.release()
            released = True
            # At least 5 pods a second (a loaded machine), and never less than five minutes.
            bound_by = max(300.0, pods / 5)
            wait_for(lambda: len(clock.bound) >= pods, f"{pods} pods bound by {tag}", bound_by)
            elapsed = max(clock.bound.values()) - release_time
    finally:
        if not released:  # a stopped scheduler must not outlive an error here
            hold.release()
    problems = invariants.check(kube.core)
    kube.clean_namespace(ns, timeout=max(180.0, pods / 10))
    return {
        "pods": pods,
        "create_s": round(created, 3),
        "bound_s": round(elapsed, 3),
        "pods_per_s": round(pods / elapsed, 1),
        "violations": len(problems),
    }


METHODS = ("pause", "cordon")
HEADINGS = {
    "pause": "waiting while the scheduler is stopped, continue -> last bound",
    "cordon": "waiting on a cordoned pool, uncordon -> last bound",
}


def report(method: str, rounds: list[dict[str, dict[str, float]]], pods: int) -> list[float]:
    """Print one method's rounds; return gpufleet's ratio over kube-scheduler per round."""
    ratios = [row["gpufleet"]["pods_per_s"] / row["kube_scheduler"]["pods_per_s"] for row in rounds]
    print(f"{pods} single-GPU pods {HEADINGS[method]}:")
    for r, row in enumerate(rounds):
        first = "kube-scheduler" if r % 2 == 0 else "gpufleet"
        print(f"  round {r + 1} ({first} first):")
        for name, side in (
            ("kube-scheduler", row["kube_scheduler"]),
            ("gpufleet", row["gpufleet"]),
        ):
            print(
                f"    {name:15s} {side['bound_s']:6.2f}s  {side['pods_per_s']:7.1f} pods/s  "
                f"(creating them took {side['create_s']:.2f}s; invariant violations "
                f"{side['violations']})"
            )
        print(f"    ratio gpufleet / kube-scheduler: {ratios[r]:.2f}")
    print(f"  median ratio over {len(rounds)} round(s): {statistics.median(ratios):.2f}")
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="bind_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=positive_int, default=5, help="latency repetitions")
    parser.add_argument("--workers", type=positive_int, default=64)
    parser.add_argument("--pods", type=positive_int, default=1000)
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=4,
        help="throughput rounds (each times both schedulers)",
    )
    parser.add_argument(
        "--operator-log", type=output_file, default=None, help="keep the operator's log (INFO) here"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        root = Path(tmp)
        fleet = root / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET))
        sandbox = Sandbox(root / "sandbox")
        try:
            sandbox.up(fleet, progress=lambda m: print(f"[sandbox] {m}", file=sys.stderr))
            kube = Kube(api_client(str(sandbox.kubeconfig)))
            level = "INFO" if args.operator_log else "WARNING"
            log = args.operator_log or root / "operator.log"
            # A lease longer than a paused backlog's creation, as for any process pause
            # shorter than the lease: the scheduler keeps its lease through the pause.
            operator = OperatorProcess(
                sandbox.kubeconfig,
                log,
                kube.coordination,
                f"--log-level={level}",
                "--lease-duration=60",
            )
            operator.start()
            try:
                latencies = [
                    measure_latency(sandbox, kube, args.workers, run) for run in range(args.runs)
                ]
                pids = {"kube_scheduler": sandbox.component_pid("kube-scheduler")}
                pids["gpufleet"] = operator.pid
                # Alternate which scheduler goes first: the shared machine's load drifts over
                # minutes, and a fixed order would charge the drift to one side.
                rounds: dict[str, list[dict[str, dict[str, float]]]] = {m: [] for m in METHODS}
                for r in range(args.rounds):
                    order = [("kube_scheduler", None), ("gpufleet", "gpufleet")]
                    for method in METHODS:
                        row = {}
                        for side, name in order if r % 2 == 0 else order[::-1]:
                            pid = pids[side]
                            assert pid is not None, f"{side} is not running"
                            hold = Hold(kube, method, pid)
                            tag = f"{method}-{side.replace('_', '-')}-{r}"
                            row[side] = measure_throughput(kube, args.pods, name, hold, tag)
                        rounds[method].append(row)
            finally:
                operator.stop()
        finally:
            sandbox.down(progress=lambda _: None)

    p50 = statistics.median(latencies)
    print(f"{args.workers}-worker TrainingJob, kubectl apply -> all Running ({args.runs} runs):")
    print("  " + "  ".join(f"{x:.2f}s" for x in latencies) + f"   p50 {p50:.2f}s")
    ratios = {m: report(m, rounds[m], args.pods) for m in METHODS}
    medians = {m: round(statistics.median(r), 3) for m, r in ratios.items()}
    print(
        json.dumps(
            {
                "bench": "bind",
                "workers": args.workers,
                "latency_s": [round(x, 3) for x in latencies],
                "latency_p50_s": round(p50, 3),
                "rounds": rounds,
                "throughput_ratios": {m: [round(x, 3) for x in r] for m, r in ratios.items()},
                "throughput_ratio": medians["pause"],
                "throughput_ratio_cordon": medians["cordon"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
