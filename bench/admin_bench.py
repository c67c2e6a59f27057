"""Admin API benchmark: latency of GET /fleet and POST /whatif on 1,000 simulated nodes, and the
dashboard's load-to-rendered time in a real headless Chromium.

The admin API is served by uvicorn over TLS on loopback exactly as in a cluster, on a live view
(the scheduler's `SchedulerCache` and `ViewBuilder`) filled with 1,000 GPU nodes as the sandbox
makes them (6,640 GPUs: H100, H100 and A100 with MIG, A100, L4, T4) and pods of TrainingJobs
built by the operator's builders, bound to about 70 % of the GPUs, plus 50 gangs waiting. No API
server is involved: the TokenReview/SubjectAccessReview adapter is replaced by one that allows
everything (in a cluster their answers are cached for 10 s, so a steady client pays for them
once per 10 s; measured apart by tests/integration/test_admin_auth.py).

Measured, sequentially from one client:
- GET /api/v1/fleet?limit=1000 (every node in one page, what the dashboard asks for);
- POST /api/v1/whatif of a 2 x 4 H100 TrainingJob (the core decides on the whole snapshot with
  the live policy: CP-SAT unless greedy admits everything);
- the dashboard: Chromium (Debian's, through chromedriver) loads `/` with a token already in
  the session, and the page records when its first complete render (fleet map and jobs table)
  happened, in ms since navigation start.

    python bench/admin_bench.py                 # ~2 minutes on 2 cores
    python bench/admin_bench.py --fleet-requests 50 --whatif-requests 20 --page-loads 3

Prints a table, with each request's CPU time beside its wall-clock time (the server runs in the
benchmark's process, so its CPU time over a request is what serving it cost, which a machine
shared with other work inflates far less than the wall clock) and the load average at start
and end; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpufleet.admin.auth import Access, RateLimiter, User
from gpufleet.admin.context import AdminContext
from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.nodes import NodeActions
from gpufleet.admin.policy import PolicyStore
from gpufleet.admin.server import AdminServer
from gpufleet.admin.tls import ensure_self_signed
from gpufleet.admin.wiring import policy_watch
from gpufleet.model.contract import names
from gpufleet.model.fleet import FleetSpec
from gpufleet.model.gpus import load_catalog
from gpufleet.model.migparted import load_default_configs
from gpufleet.operator import children
from gpufleet.operator.objects import TrainingJobObject
from gpufleet.sandbox.node_manifests import fleet_manifests
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.settings import AdminSettings, PlacementSettings

POOLS = [  # 1,000 nodes in the sandbox's proportions
    {"name": "h100", "count": 300, "gpuType": "H100-80GB", "gpusPerNode": 8},
    {"name": "h100-mig", "count": 60, "gpuType": "H100-80GB", "gpusPerNode": 8,
     "mig": {"strategy": "mixed", "config": "all-balanced"}},
    {"name": "a100", "count": 240, "gpuType": "A100-80GB", "gpusPerNode": 8},
    {"name": "a100-mig", "count": 60, "gpuType": "A100-80GB", "gpusPerNode": 8,
     "mig": {"strategy": "mixed", "config": "all-1g.10gb"}},
    {"name": "l4", "count": 170, "gpuType": "L4", "gpusPerNode": 4, "nvlinkDomainSize": 1},
    {"name": "t4", "count": 170, "gpuType": "T4", "gpusPerNode": 4, "nvlinkDomainSize": 1},
]  # fmt: skip
WHATIF = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "bench-what-if", "namespace": "bench"},
    "spec": {
        "replicas": 2,
        "gpusPerReplica": 4,
        "gpuTypes": [{"name": "H100-80GB"}],
        "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
    },
}


class AllowAll:
    """Every token is the bench user, who may do everything."""

    def authenticate(self, token: str) -> User | None:
        return User("bench", "", ("system:authenticated",))

    def authorize(self, user: User, access: Access) -> tuple[bool, str]:
        return True, ""


def _job(
    name: str, replicas: int, gpus: int | None, gpu_type: str, mig: str | None = None
) -> dict[str, Any]:
    size: dict[str, Any] = {"migProfile": mig} if mig else {"gpusPerReplica": gpus}
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": replicas, **size, "gpuTypes": [{"name": gpu_type}],
                 "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}},
        "status": {"phase": "Running", "gpuSeconds": 3600.0, "estimatedEnergyJoules": 1.5e6},
    }  # fmt: skip


def _bound(
    job: dict[str, Any], node: str, gpus: str, gpu_type: str, mig: str | None = None
) -> dict[str, Any]:
    pod = children.worker_pod(TrainingJobObject.of(job), 0)
    pod["metadata"]["uid"] = f"uid-pod-{job['metadata']['name']}"
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    annotations = pod["metadata"]["annotations"]
    annotations[names.ASSIGNED_GPUS] = gpus
    annotations[names.ASSIGNED_TYPE] = gpu_type
    if mig:
        annotations[names.ASSIGNED_MIG] = mig
    return pod


def build_cluster(
    seed: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes, pods and jobs: ~70 % of whole GPUs and of A100 1g.10gb slices held, 50 waiting."""
    rng = random.Random(seed)
    fleet = FleetSpec.model_validate({"nodePools": POOLS})
    nodes = fleet_manifests(fleet, load_default_configs())
    jobs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for node in nodes:
        node.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
        labels = node["metadata"]["labels"]
        if names.MIG_CONFIG_LABEL in labels:
            labels[names.MIG_STATE_LABEL] = "success"
        name = node["metadata"]["name"]
        gpu_type = next(p["gpuType"] for p in POOLS if name.startswith(p["name"] + "-")
                        and name.removeprefix(p["name"] + "-").isdigit())  # fmt: skip
        count = int(labels[names.GPU_COUNT_LABEL])
        if name.startswith("a100-mig"):
            for gpu in range(count):
                for start in range(7):
                    if rng.random() < 0.7:
                        job = _job(f"{name}-g{gpu}-s{start}", 1, None, gpu_type, "1g.10gb")
                        jobs.append(job)
                        pods.append(_bound(job, name, str(gpu), gpu_type, f"1g.10gb@{start}"))
            continue
        if name.startswith("h100-mig"):
            continue  # MIG layouts left free for what-ifs that need slices
        used = round(count * 0.7 + rng.uniform(-0.5, 0.5))
        if used:
            job = _job(f"{name}-job", 1, used, gpu_type)
            jobs.append(job)
            pods.append(_bound(job, name, ",".join(map(str, range(used))), gpu_type))
    for i in range(50):  # waiting gangs that compete in every what-if
        job = _job(f"waiting-{i}", 2, 8, "H100-80GB")
        job["status"] = {"phase": "Queued"}
        jobs.append(job)
        for r in range(2):
            pod = children.worker_pod(TrainingJobObject.of(job), r)
            pod["metadata"]["uid"] = f"uid-{job['metadata']['name']}-{r}"
            pod["status"] = {"phase": "Pending"}
            pods.append(pod)
    return nodes, pods, jobs


def live_view(nodes: list[Any], pods: list[Any], jobs: list[Any]) -> LiveFleet:
    cache = SchedulerCache()
    cache.replace_nodes(nodes)
    cache.replace_pods(pods)
    cache.configmap_event(
        "ADDED",
        {
            "metadata": {"name": names.MIG_CONFIGMAP_NAME},
            "data": {names.MIG_CONFIGMAP_KEY: yaml.safe_dump(load_default_configs())},
        },
    )
    store = JobStore()
    store.replace("TrainingJob", jobs)
    return LiveFleet(cache, store, load_catalog())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_requests(send: Any, count: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU milliseconds of each of `count` requests. The server runs in this
    process, so the process's CPU time over a request is what serving it cost (both sides),
    which a machine shared with other work does not inflate as it does the wall clock."""
    send()  # warm-up (first view build, OR-Tools import)
    wall, cpu = [], []
    for _ in range(count):
        started, cpu_started = time.perf_counter(), time.process_time()
        response = send()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
        response.raise_for_status()
    return wall, cpu


def dashboard_loads(url: str, loads: int) -> list[float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--ignore-certificate-errors",
                 "--window-size=1600,1400"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=Service(shutil.which("chromedriver") or "chromedriver"), options=options
    )
    try:
        driver.get(url + "/")
        driver.execute_script("sessionStorage.setItem('gpufleet-token', 'bench-token')")
        out = []
        for _ in range(loads):
            driver.get(url + "/")
            WebDriverWait(driver, 120).until(
                lambda d: d.execute_script("return document.body.dataset.rendered")
            )
            out.append(float(driver.execute_script("return document.body.dataset.rendered")))
        return out
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet-requests", type=int, default=100)
    parser.add_argument("--whatif-requests", type=int, default=50)
    parser.add_argument("--page-loads", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    loads = os.getloadavg()  # the machine may be shared: say how busy it was
    nodes, pods, jobs = build_cluster(args.seed)
    live = live_view(nodes, pods, jobs)
    workdir = Path(tempfile.mkdtemp(prefix="admin-bench-"))
    cert, key = ensure_self_signed(workdir / "tls")
    settings = AdminSettings(port=0, tls_cert_file=cert, tls_key_file=key)
    from kubernetes import client

    unreachable = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    context = AdminContext(
        settings=settings,
        live=live,
        reviewer=AllowAll(),
        limiter=RateLimiter(1e9, 10**9),
        nodes=NodeActions(unreachable, live),
        policy=policy_watch(settings, PlacementSettings()),
        policy_store=PolicyStore(unreachable, settings.namespace, settings.policy_configmap),
    )
    gpus = sum(int(n["metadata"]["labels"][names.GPU_COUNT_LABEL]) for n in nodes)
    with AdminServer(context) as server:
        url = f"https://127.0.0.1:{server.port}"
        import ssl

        verify = ssl.create_default_context(cafile=str(cert))
        headers = {"Authorization": "Bearer bench-token"}
        with httpx.Client(base_url=url, verify=verify, headers=headers, timeout=120) as http:
            size = len(http.get("/api/v1/fleet?limit=1000").content)
            fleet_ms, fleet_cpu = time_requests(lambda: http.get("/api/v1/fleet?limit=1000"),
                                     args.fleet_requests)  # fmt: skip
            whatif_ms, whatif_cpu = time_requests(lambda: http.post("/api/v1/whatif", json=WHATIF),
                                      args.whatif_requests)  # fmt: skip
            answer = http.post("/api/v1/whatif", json=WHATIF).json()
        page_ms = dashboard_loads(url, args.page_loads) if args.page_loads else []
    shutil.rmtree(workdir, ignore_errors=True)

    rows = [
        ("GET /fleet (1,000 nodes)", fleet_ms),
        ("GET /fleet CPU", fleet_cpu),
        ("POST /whatif", whatif_ms),
        ("POST /whatif CPU", whatif_cpu),
        ("dashboard load-to-rendered", page_ms),
    ]
    print(f"fleet: {len(nodes)} nodes, {gpus} GPUs, {len(pods)} pods, {len(jobs)} jobs; "
          f"/fleet body {size / 1e6:.1f} MB; what-if engine {answer['engine']}")  # fmt: skip
    print(f"{'measure':32} {'n':>4} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    result: dict[str, Any] = {
        "nodes": len(nodes),
        "gpus": gpus,
        "fleet_body_bytes": size,
        "load_average_1m": [round(loads[0], 1), round(os.getloadavg()[0], 1)],  # start, end
    }
    for label, values in rows:
        if not values:
            continue
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        print(f"{label:32} {len(values):>4} {p50:>9.1f} {p99:>9.1f} {max(values):>9.1f}")
        key = label.split(" (")[0].replace(" ", "_").replace("/", "").lower()
        result[key] = {"n": len(values), "p50_ms": round(p50, 1), "p99_ms": round(p99, 1)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
