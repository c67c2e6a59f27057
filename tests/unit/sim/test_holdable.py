"""Jobs no node of the fleet can ever hold: the test per gang shape, and how a run reports them.

Aspects: same-node gangs wider than every node, replicas wider than every node or NVLink
domain, gangs larger than all GPUs of any one acceptable type (a gang runs on one type), MIG
gangs needing more slices than the type's GPUs hold, and that jobs which fit are kept;
`gpufleet simulate` leaves the dropped jobs out of the replay, counts only kept jobs toward
`--jobs`, and reports them in results.json, results.md, under the table and in one warning line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.core.demand import Gang, Topology, TypeOption
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.holdable import why_unholdable
from gpufleet.sim.simulate_command import main

Pool = tuple[str, int, int, int | None]  # GPU type, nodes, GPUs per node, NVLink domain size


def _fleet(*pools: Pool) -> FleetSpec:
    """Pools of (GPU type, nodes, GPUs per node, NVLink domain size)."""
    return FleetSpec(
        node_pools=[
            NodePoolSpec(name=f"p{i}", count=n, gpu_type=t, gpus_per_node=g, nvlink_domain_size=d)
            for i, (t, n, g, d) in enumerate(pools)
        ]
    )


def _gang(*types: str, replicas: int = 1, gpus: int = 1, **extra: object) -> Gang:
    return Gang(
        id="g",
        acceptable=tuple(TypeOption(t) for t in types),
        replicas_min=replicas,
        replicas_max=replicas,
        gpus_per_replica=gpus,
        **extra,  # type: ignore[arg-type]  # topology / mig_profile, per case
    )


HOLDABLE = [
    ("same-node-fits", _gang("T4", replicas=4, topology=Topology.SAME_NODE), [("T4", 1, 4, None)]),
    ("spread-over-nodes", _gang("T4", replicas=16), [("T4", 4, 4, None)]),
    ("one-type-of-two", _gang("T4", "L4", replicas=8), [("T4", 1, 4, None), ("L4", 2, 4, None)]),
    (
        "nvlink-domain-fits",
        _gang("H100-80GB", gpus=4, topology=Topology.NVLINK),
        [("H100-80GB", 1, 8, 4)],
    ),
    (
        "mig-slices",
        _gang("A100-80GB", replicas=7, mig_profile="1g.10gb"),
        [("A100-80GB", 1, 1, None)],
    ),
]

UNHOLDABLE = [
    (
        "same-node-too-wide",
        _gang("T4", replicas=8, topology=Topology.SAME_NODE),
        [("T4", 4, 4, None), ("H100-80GB", 1, 8, None)],  # only the H100 node is wide enough
        "needs 8 GPUs on one node; the largest node of an acceptable type has 4",
    ),
    (
        "replica-too-wide",
        _gang("T4", replicas=2, gpus=8),
        [("T4", 8, 4, None)],
        "needs 8 GPUs per replica on one node",
    ),
    (
        "nvlink-domain-too-small",
        _gang("H100-80GB", gpus=4, topology=Topology.NVLINK),
        [("H100-80GB", 2, 8, 2)],
        "on one NVLink domain; the largest NVLink domain of an acceptable type has 2",
    ),
    (
        "more-than-one-type-holds",
        _gang("T4", "L4", replicas=12),
        [("T4", 2, 4, None), ("L4", 2, 4, None)],  # 16 GPUs in all, but 8 of each type
        "needs 12 GPUs of one type (12 x 1); the fleet holds at most 8",
    ),
    (
        "type-not-in-fleet",
        _gang("H200-141GB"),
        [("T4", 2, 4, None)],
        "the largest node of an acceptable type has 0",
    ),
    (
        "mig-slices-too-many",
        _gang("A100-80GB", replicas=8, mig_profile="1g.10gb"),
        [("A100-80GB", 1, 1, None)],
        "needs 8 1g.10gb slices of one type; the fleet holds 7",
    ),
]


@pytest.mark.parametrize(("gang", "pools"), [c[1:] for c in HOLDABLE], ids=[c[0] for c in HOLDABLE])
def test_jobs_that_fit_are_kept(gang: Gang, pools: list[Pool], catalog: Catalog) -> None:
    assert why_unholdable(gang, _fleet(*pools), catalog) is None


@pytest.mark.parametrize(
    ("gang", "pools", "reason"), [c[1:] for c in UNHOLDABLE], ids=[c[0] for c in UNHOLDABLE]
)
def test_jobs_that_never_fit_say_why(
    gang: Gang, pools: list[Pool], reason: str, catalog: Catalog
) -> None:
    found = why_unholdable(gang, _fleet(*pools), catalog)
    assert found is not None and reason in found


def test_simulate_drops_reports_and_does_not_count_them(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    (data / "traces").mkdir(parents=True)
    (data / "profiles").symlink_to(data_dir / "profiles")
    gpus = [1, 4, 2, 16, 1, 2, 1]  # 4 (same node) and 16 cannot fit on two 2-GPU nodes
    (data / "traces" / "philly.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        + "".join(f"2017-10-03 10:{i:02d}:00,300.0,{g},0,vc\n" for i, g in enumerate(gpus))
    )
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("nodePools:\n  - {name: v, count: 2, gpuType: V100-32GB, gpusPerNode: 2}\n")
    out = tmp_path / "out"
    inputs = ["--trace", "philly", "--data-dir", str(data), "--fleet", str(fleet), "--jobs", "4"]
    code = main(
        ["simulate", *inputs, "--policies", "fifo-binpack", "--out", str(out), "--no-plots"],
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["jobs"] == 4  # the first four jobs that fit: rows 0, 2, 4, 5
    assert doc["policies"][0]["completed"] == 4
    assert doc["meta"]["dropped_jobs"] == doc["dropped"]["count"] == 2
    dropped = {d["job_id"]: d for d in doc["dropped"]["jobs"]}
    assert set(dropped) == {"philly-00001", "philly-00003"}
    assert "4 GPUs on one node" in dropped["philly-00001"]["reason"]
    assert dropped["philly-00003"]["gpus"] == 16
    assert "16 GPUs of one type" in dropped["philly-00003"]["reason"]
    assert "- philly-00003 (16 GPUs): needs 16 GPUs" in (out / "results.md").read_text()
    assert "2 job(s) dropped: no node of the fleet can ever hold them" in captured.out
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("gpufleet simulate: warning: 2 job(s) dropped")
    assert "philly-00001: needs 4 GPUs on one node" in warnings[0]
