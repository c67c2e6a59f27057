"""Soak: many short TrainingJobs through the live system; the operator's memory over time and
whether every job finished.

One private sandbox with a kwok fleet of --nodes 8-GPU nodes (scale_bench.py's mix: H100, A100,
L4; or --fleet), one `gpufleet operator`, and --jobs TrainingJobs of whole GPUs (1-4 workers of
1-8 GPUs, priorities 0-2) created at --rate a second; each runs 5-15 s (--runtime), then the
harness marks its pods Succeeded as a finished container would (chaos.py's `Load`: only pods
bound and Running), and the operator removes the job 60 s after it finished
(ttlSecondsAfterFinished). The operator's resident memory and the API server's request rates
are sampled.

A job is finished when it was seen Succeeded; lost when it disappeared before that; unfinished
jobs are listed with their phase and their pods' phases, and pods seen Succeeded then Running
again (kwok writing late, a harness fault) apart. Memory growth is the slope of a least-squares
line through the samples of the second half of the run (MiB per hour), next to the first, the
largest and the last sample.

    python bench/soak.py                                  # 10,000 jobs on 1,000 nodes
    python bench/soak.py --jobs 1000 --nodes 200 --rate 2
    python bench/soak.py --jobs 600 --nodes 200 --rate 3 --runtime 150 200   # many in flight

Prints a summary; the last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from chaos import JOBS_NS, Load, PhaseReverts, Record, Shape
from scale_bench import RssSampler, default_fleet

from gpufleet.cliargs import (
    OneLineParser,
    input_error_exit,
    output_file,
    positive_float,
    positive_int,
)
from gpufleet.model.contract import names
from gpufleet.model.fleet import load_fleet
from gpufleet.model.input_error import InputError
from gpufleet.model.migparted import load_default_configs
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.node_manifests import sandbox_pool_check
from gpufleet.scheduler.runtime import api_client
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess

PROG = "soak.py"
SHAPES: tuple[Shape, ...] = (
    ("L4", 1, 4), ("L4", 4, 2), ("A100-80GB", 2, 2), ("A100-80GB", 8, 1),
    ("H100-80GB", 1, 4), ("H100-80GB", 4, 2), ("H100-80GB", 8, 1),
)  # fmt: skip


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


# apiserver_request_total{...} value: one counter per verb, resource and subresource.
_REQUEST_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def api_requests(api: Any) -> dict[str, float]:
    """Requests the API server has answered so far, by "VERB resource[/subresource]" (from its
    own /metrics), so the rates of the operator's calls can be told apart: the harness lists
    jobs and pods but never GETs one job nor writes a job's status."""
    request = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    text = api.call_api(*request).read().decode()
    counts: dict[str, float] = {}
    for match in _REQUEST_LINE.finditer(text):
        labels = dict(_LABEL.findall(match["labels"]))
        sub = labels.get("subresource")
        key = f"{labels.get('verb')} {labels.get('resource')}{'/' + sub if sub else ''}"
        counts[key] = counts.get(key, 0.0) + float(match["value"])
    return counts


def request_rates(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    """The operator's main calls a second between two `api_requests` samples, and all calls."""

    def rate(key: str | None) -> float:
        if key is None:
            return (sum(after.values()) - sum(before.values())) / seconds
        return (after.get(key, 0.0) - before.get(key, 0.0)) / seconds

    keys = ("GET trainingjobs", "PATCH trainingjobs/status", "PATCH trainingjobs",
            "POST pods", "DELETE pods")  # fmt: skip
    return ", ".join(f"{k} {rate(k):.1f}/s" for k in keys) + f"; all {rate(None):.0f}/s"


def unfinished_jobs(kube: Kube, load: Load) -> list[str]:
    """Jobs not seen Succeeded and still there: each with its phase, whether the harness
    marked its pods finished, and its pods' phases."""
    phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase")
              for j in kube.jobs(JOBS_NS)}  # fmt: skip
    pods: dict[str, list[str]] = {}
    for pod in kube.pods(JOBS_NS):
        job = (pod["metadata"].get("labels") or {}).get(names.TRAININGJOB_LABEL, "")
        gone = " deleting" if pod["metadata"].get("deletionTimestamp") else ""
        pods.setdefault(job, []).append(
            f"{pod['metadata']['name']}={(pod.get('status') or {}).get('phase')}{gone}"
        )
    return [
        f"{name}: {phases.get(name)}, finish sent {job.finished_sent}, pods "
        f"{' '.join(sorted(pods.get(name, [])))}"
        for name, job in sorted(load.jobs.items())
        if not job.succeeded and not job.gone
    ]


def run(args: Any) -> dict[str, Any]:
    record = Record()
    with tempfile.TemporaryDirectory(prefix="gpufleet-soak-") as tmp:
        root = Path(tmp)
        fleet = args.fleet or root / "fleet.yaml"
        if args.fleet is None:
            fleet.write_text(yaml.safe_dump(default_fleet(args.nodes)))
        spec = load_fleet(fleet)
        sandbox = Sandbox(root / "sandbox")
        try:
            sandbox.up(fleet, progress=lambda m: print(f"[sandbox] {m}", file=sys.stderr))
            kube = Kube(api_client(str(sandbox.kubeconfig)))
            kube.create_namespace(JOBS_NS)
            operator = OperatorProcess(
                sandbox.kubeconfig, args.operator_log or root / "operator.log",
                kube.coordination, "--lease-duration=60", "--node-failure-grace=600",
            )  # fmt: skip
            reverts = PhaseReverts(kube, JOBS_NS)
            reverts.informer.start()
            try:
                operator.start(timeout=600)
                with RssSampler(operator) as rss:
                    rate = 1 / args.rate
                    runs = (args.runtime[0], args.runtime[1])
                    load = Load(kube, record, rate, args.seed, SHAPES, runs, args.jobs,
                                args.creators)  # fmt: skip
                    started = time.monotonic()
                    calls = [(started, api_requests(kube.core.api_client))]
                    load.start()
                    polls = 0
                    # --bound counts from the last creation (later than planned when the
                    # API server is slower than --rate), at most 4x the planned creation time.
                    deadline = started + args.jobs / args.rate + args.bound
                    latest = started + 4 * args.jobs / args.rate + args.bound
                    while time.monotonic() < deadline:
                        if load.creating.is_set():
                            deadline = min(latest, max(deadline, time.monotonic() + args.bound))
                        time.sleep(5.0)
                        polls += 1
                        done = [j for j in load.snapshot() if j.succeeded or j.gone]
                        if len(load.jobs) >= args.jobs and len(done) >= args.jobs:
                            break
                        if polls % 12 == 0:
                            now = time.monotonic() - started
                            calls.append((time.monotonic(), api_requests(kube.core.api_client)))
                            (t0, c0), (t1, c1) = calls[-2:]
                            print(f"{now:6.0f}s: {len(load.jobs)} created, {len(done)} done, "
                                  f"RSS {rss.now():.0f} MiB; API {request_rates(c0, c1, t1 - t0)}",
                                  flush=True)  # fmt: skip
                    elapsed = time.monotonic() - started
                    calls.append((time.monotonic(), api_requests(kube.core.api_client)))
                    load.stop.set()
                    load.join(10)
                    violations = invariants.final_check(kube.core)
                    unfinished = unfinished_jobs(kube, load)
                    samples = list(rss.samples)
            finally:
                reverts.stop.set()
                operator.stop()
        finally:
            sandbox.down(progress=lambda _: None)
    jobs = load.jobs.values()
    half = [(t, v) for t, v in samples if t >= samples[-1][0] / 2] if samples else []
    per_second = slope(half) if len(half) > 2 else 0.0
    jobs_per_second = len(load.jobs) / elapsed if elapsed else 0.0
    return {
        "bench": "soak",
        "nodes": spec.total_nodes,
        "jobs_asked": args.jobs,
        "jobs_created": len(load.jobs),
        "jobs_succeeded": sum(j.succeeded for j in jobs),
        "jobs_lost": record.lost,
        "jobs_unfinished": sum(not j.succeeded and not j.gone for j in jobs),
        "elapsed_s": round(elapsed),
        "jobs_per_s": round(jobs_per_second, 2),
        "rss_first_mib": round(samples[0][1]) if samples else None,
        "rss_max_mib": round(max(v for _, v in samples)) if samples else None,
        "rss_last_mib": round(samples[-1][1]) if samples else None,
        "rss_slope_second_half_mib_per_hour": round(per_second * 3600, 1),
        "rss_samples": [(round(t), round(v)) for t, v in samples[::30]],
        "violations": violations,
        "unfinished": unfinished,
        "pods_reverted": reverts.reverted,
        "refused_creates": record.refused_creates,
        "api_requests_per_s": request_rates(calls[0][1], calls[-1][1], calls[-1][0] - calls[0][0]),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=positive_int, default=10000)
    parser.add_argument("--nodes", type=positive_int, default=1000)
    parser.add_argument("--fleet", type=Path, default=None, help="a fleet file instead of --nodes")
    parser.add_argument("--rate", type=positive_float, default=5.0, help="jobs created a second")
    parser.add_argument("--bound", type=positive_int, default=600,
                        help="seconds after the last creation for every job to finish")  # fmt: skip
    parser.add_argument("--creators", type=positive_int, default=4,
                        help="threads creating jobs, each at its planned time")  # fmt: skip
    parser.add_argument("--runtime", type=positive_int, nargs=2, default=[5, 15],
                        metavar=("SHORTEST", "LONGEST"),
                        help="seconds each job runs, drawn between the two")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--operator-log", type=output_file, default=None)
    args = parser.parse_args(argv)
    if args.fleet is not None:
        try:  # a bad fleet file: one line naming the file, the line and the field
            load_fleet(args.fleet, check=sandbox_pool_check(load_default_configs()))
        except InputError as exc:
            return input_error_exit(PROG, exc)
    out = run(args)
    print(f"soak: {out['jobs_created']} jobs on {out['nodes']} nodes in {out['elapsed_s']}s "
          f"({out['jobs_per_s']}/s): {out['jobs_succeeded']} succeeded, "
          f"{len(out['jobs_lost'])} lost, {out['jobs_unfinished']} unfinished")  # fmt: skip
    print(f"operator RSS: first {out['rss_first_mib']} MiB, max {out['rss_max_mib']} MiB, last "
          f"{out['rss_last_mib']} MiB; second-half slope "
          f"{out['rss_slope_second_half_mib_per_hour']} MiB/hour; invariant violations "
          f"{len(out['violations'])}")  # fmt: skip
    for line in out["unfinished"]:
        print(f"  unfinished {line}")
    for pod, what in out["pods_reverted"].items():
        print(f"  finished pod {pod} {what}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
