"""A small end-to-end simulation per policy on real trace slices, and the CLI entry point.

Aspects: every policy (gpufleet's three through the core `place`, and the four baselines) runs a
queueing Philly slice to completion with consistent metrics; an Alibaba slice with fractional
(MIG) pods and type constraints completes on a MIG fleet (under kube-like, exactly the pods that
the fleet's fixed MIG layouts can host); `gpufleet simulate` writes its report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pytest

from gpufleet.core.demand import Gang
from gpufleet.model.fleet import load_fleet
from gpufleet.model.inventory import Node
from gpufleet.sim.engine import gang_for_job
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.policies import POLICY_NAMES
from gpufleet.sim.results import summarise
from gpufleet.sim.runner import Workload, load_workload, run_policy
from gpufleet.sim.simulate_command import default_fleet_path, main
from gpufleet.sim.speed import SpeedModel


@pytest.fixture(scope="module")
def philly_slice(data_dir: Path) -> Workload:
    fleet = load_fleet(default_fleet_path("hetero-256.yaml"))
    # 150 jobs arriving 20x faster than in the trace: enough to make some of them queue.
    return load_workload("philly", fleet, jobs=150, seed=7, arrival_speedup=20, data_dir=data_dir)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_each_policy_completes_a_philly_slice(name: str, philly_slice: Workload) -> None:
    fleet = load_fleet(default_fleet_path("hetero-256.yaml"))
    result = run_policy(name, fleet, philly_slice, seed=7)
    s = summarise(result)
    assert result.unfinished == 0
    assert s["completed"] == len(philly_slice.jobs) == 150
    assert 0 < s["median_jct_h"] <= s["p99_jct_h"]
    assert s["avg_queueing_h"] >= 0
    assert 0 < s["utilisation"] <= 1
    assert s["energy_kwh"] > 0 and s["avg_power_kw"] > 0
    assert result.busy_gpu_s == pytest.approx(sum(j.busy_gpu_s for j in result.jobs))
    assert result.place_calls > 0
    assert not math.isnan(s["avg_jct_h"])


def _kube_can_host(gang: Gang, nodes: Iterable[Node]) -> bool:
    """Whether some node could ever run one pod of `gang` with its MIG layout as it is: enough
    whole-mode GPUs, or an instance of the pod's profile (kube-scheduler never repartitions)."""
    for node in nodes:
        if node.gpu_type not in gang.type_names():
            continue
        if gang.mig_profile is None:
            if sum(1 for g in node.gpus if g.mig_layout is None) >= gang.gpus_per_replica:
                return True
        elif any(i.profile == gang.mig_profile for g in node.gpus for i in g.mig_layout or ()):
            return True
    return False


@pytest.mark.parametrize("name", ["balanced", "fifo-binpack", "kube"])
def test_alibaba_slice_with_mig_and_constraints(name: str, data_dir: Path) -> None:
    fleet = load_fleet(default_fleet_path("alibaba-mig-256.yaml"))
    work = load_workload("alibaba", fleet, jobs=300, seed=1, arrival_speedup=50, data_dir=data_dir)
    assert any(j.mig_g for j in work.jobs) and any(j.gpu_types for j in work.jobs)
    result = run_policy(name, fleet, work)
    never: set[str] = set()
    if name == "kube":
        # Every A100/H100 starts all-balanced (3g+2g+1g+1g) and kube-scheduler keeps it so:
        # 4g pods and whole-GPU pods restricted to those types can never start; all else must.
        nodes = SimCluster(fleet, work.catalog).nodes.values()
        types = [work.catalog[t] for t in sorted({p.gpu_type for p in fleet.node_pools})]
        speed = SpeedModel(work.catalog, work.profile)
        never = {
            j.job_id for j in work.jobs if not _kube_can_host(gang_for_job(j, types, speed), nodes)
        }
        assert never  # the slice has such pods, so this checks something
    assert {j.job_id for j in result.jobs if j.completion_s is None} == never
    assert result.unfinished == len(never)
    assert summarise(result)["completed"] == 300 - len(never)


def test_cli_writes_json_markdown_and_plots(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "simulate",
            "--trace",
            "philly",
            "--policies",
            "kube,balanced",
            "--jobs",
            "60",
            "--seed",
            "2",
            "--load",
            "10",
            "--out",
            str(out),
            "--data-dir",
            str(data_dir),
        ]
    )
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    assert [p["policy"] for p in doc["policies"]] == ["kube", "balanced"]
    assert doc["meta"]["jobs"] == 60
    assert "| kube |" in (out / "results.md").read_text()
    for png in ("jct_cdf.png", "energy.png", "utilisation.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_cli_rejects_unknown_policy(tmp_path: Path) -> None:
    code = main(["simulate", "--trace", "philly", "--policies", "nope", "--out", str(tmp_path)])
    assert code == 2
