"""Trace loaders on the real vendored files: counts, ordering, filters, determinism, quirks."""

from __future__ import annotations

import itertools
from pathlib import Path

from gpufleet.model.gpus import Catalog
from gpufleet.sim.gavel_profiles import GavelProfile, gavel_scale
from gpufleet.sim.runner import ALIBABA_TYPE_MAP
from gpufleet.sim.traces.alibaba import load_alibaba_fleet, load_alibaba_pods, quantise_mig
from gpufleet.sim.traces.common import TraceJob
from gpufleet.sim.traces.philly import load_philly, parse_window, read_philly_rows


def test_philly_rows_match_the_data_reference(data_dir: Path) -> None:
    rows = read_philly_rows(data_dir / "traces" / "philly.csv")
    assert len(rows) == 82_247  # data.md §1 (trailing blank line skipped)
    arrivals = [r[1] for r in rows]
    assert arrivals == sorted(arrivals)
    assert str(arrivals[0]) == "2017-09-04 10:30:41"
    assert str(arrivals[-1]) == "2017-12-22 08:02:11"
    assert {r[3] for r in rows} == {1, 2, 4, 8, 12, 16, 24, 32, 64, 128}


def test_philly_selection_filters_and_is_deterministic(
    data_dir: Path, profile: GavelProfile
) -> None:
    path = data_dir / "traces" / "philly.csv"
    jobs = load_philly(path, profile, jobs=500, seed=3)
    again = load_philly(path, profile, jobs=500, seed=3)
    other = load_philly(path, profile, jobs=500, seed=4)
    assert len(jobs) == 500
    assert jobs == again
    assert [j.model for j in jobs] != [j.model for j in other]
    assert jobs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(jobs))
    for job in jobs:
        assert job.work_s >= 60.0
        assert job.work_s * job.num_gpus < 1000 * 3600
        assert job.gpus_per_replica == 1 and job.replicas == job.num_gpus
        assert job.model in profile.job_types(gavel_scale(job.num_gpus))
    assert len({j.job_id for j in jobs}) == 500


def test_philly_window_speedup_and_size_cap(data_dir: Path, profile: GavelProfile) -> None:
    path = data_dir / "traces" / "philly.csv"
    base = load_philly(path, profile, window="2017-10-01,2017-10-02")
    fast = load_philly(path, profile, window="2017-10-01,2017-10-02", arrival_speedup=4)
    assert 100 < len(base) == len(fast)
    assert base[-1].arrival_s < 86_400
    assert fast[-1].arrival_s == base[-1].arrival_s / 4
    # A job keeps its model class whatever window selects it (seeded by file row).
    wider = {j.job_id: j.model for j in load_philly(path, profile, window="2017-09-30,2017-10-03")}
    assert all(wider[j.job_id] == j.model for j in base)
    asked: list[int] = []

    def at_most_8(job: TraceJob) -> bool:
        asked.append(job.num_gpus)
        return job.num_gpus <= 8

    small = load_philly(path, profile, jobs=2000, keep=at_most_8)
    assert len(small) == 2000 and max(j.num_gpus for j in small) <= 8
    assert max(asked) > 8  # the filter saw (and left out) larger jobs
    elastic = load_philly(path, profile, jobs=2000, elastic_fraction=0.5)
    flexible = [j for j in elastic if j.min_replicas is not None]
    assert flexible and all(j.num_gpus > 1 and j.min_replicas == j.num_gpus // 2 for j in flexible)
    assert [j.model for j in elastic] == [j.model for j in load_philly(path, profile, jobs=2000)]
    start, end = parse_window("2017-10-01")
    assert start is not None and end is None


def test_mig_quantisation_buckets() -> None:
    # g/7 >= milli/1000 exactly; on the trace's values (multiples of 10) this matches the
    # buckets of data.md §2.1 (<=143 -> 1g, 144-286 -> 2g, 287-429 -> 3g, 430-571 -> 4g).
    values = (50, 140, 150, 280, 290, 420, 430, 570, 580, 990)
    assert [quantise_mig(m) for m in values] == [1, 1, 2, 2, 3, 3, 4, 4, None, None]


def test_alibaba_pods(data_dir: Path, profile: GavelProfile) -> None:
    trace = data_dir / "traces" / "alibaba-gpu-2023"
    pods = load_alibaba_pods(trace, profile, variant="default")
    assert len(pods) == 7_064  # GPU pods, data.md §2.1
    assert all(p.gpu_types is None for p in pods)  # no constraint in the default list
    multi = [p for p in pods if p.gpus_per_replica > 1]
    assert len(multi) == 16 + 15 + 44
    assert all(p.mig_g is None for p in multi)
    frac = [p for p in pods if p.mig_g is not None]
    assert len(frac) == 32 + 280 + 389 + 971  # 1g..4g buckets of data.md §2.1
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(pods))
    spec = load_alibaba_pods(trace, profile, variant="gpuspec10", type_map=ALIBABA_TYPE_MAP)
    constrained = [p for p in spec if p.extra["gpu_spec"]]
    assert len(constrained) == 732  # data.md §2.2
    t4_only = [p for p in constrained if p.extra["gpu_spec"] == "T4"]
    assert len(t4_only) == 355 and all(p.gpu_types == {"T4"} for p in t4_only)
    repeated = [p for p in constrained if p.extra["gpu_spec"] == "V100M16|V100M32"]
    assert repeated and all(p.gpu_types == {"V100-32GB"} for p in repeated)


def test_alibaba_node_list_as_fleet(data_dir: Path, catalog: Catalog) -> None:
    trace = data_dir / "traces" / "alibaba-gpu-2023"
    fleet = load_alibaba_fleet(trace, ALIBABA_TYPE_MAP)
    assert fleet.total_nodes == 1_213
    assert fleet.total_gpus == 6_212
    assert all(p.gpu_type in catalog for p in fleet.node_pools)
    small = load_alibaba_fleet(trace, ALIBABA_TYPE_MAP, scale=0.05)
    assert small.total_gpus < 6_212 / 10
