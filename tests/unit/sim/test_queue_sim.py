"""Replays with tenants: borrowing while a tenant is idle, reclaim when it returns.

Aspects: with two tenants of 8 nominal V100s each on a 16-GPU fleet, gpufleet (the core with
queues) and the Kueue-like baseline let one tenant borrow the idle tenant's 8 GPUs, then give
them back within one scheduler cycle when the lender's job arrives, by preempting one whole
borrowing gang (which finishes later, having kept its progress); no quota violation is counted;
the Gavel-style tenant baseline, which has no quotas, gives the lender its share at its next
round. Property (hypothesis): on random small workloads of three tenants with borrowing limits,
gpufleet and the Kueue-like baseline never exceed a limit and finish every job that fits
its queue's limit.
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.policies import ROUND_S
from gpufleet.sim.runner import Workload
from gpufleet.sim.tenant_run import run_tenants
from gpufleet.sim.tenants import TenantSetup, tenant_setup
from gpufleet.sim.traces.common import TraceJob, default_data_dir

MODEL = "ResNet-50 (batch size 64)"
V100 = "V100-32GB"
FLEET = FleetSpec(node_pools=[NodePoolSpec(name="v", count=2, gpu_type=V100, gpus_per_node=8)])


def _job(jid: str, queue: str, arrival: float, work: float, gpus: int) -> TraceJob:
    return TraceJob(
        jid, arrival, work, replicas=gpus, gpus_per_replica=1, model=MODEL, queue=queue,
        same_node=gpus > 1,
    )  # fmt: skip


def _borrow_then_reclaim(catalog: Catalog, profile: GavelProfile, policy: str) -> None:
    setup = tenant_setup({"a": 1.0, "b": 1.0, "idle": 0.0}, FLEET)
    assert setup.nominal("a") == setup.nominal("b") == {V100: 8}
    jobs = [
        _job("b1", "b", 0.0, 20_000.0, 8),
        _job("b2", "b", 0.0, 20_000.0, 8),
        _job("a1", "a", 500.0, 1_000.0, 8),
    ]
    run = run_tenants(policy, FLEET, Workload("test", jobs, profile, catalog), setup)
    rec = {r.job_id: r for r in run.result.jobs}
    # b borrows a's idle nominal quota: both of b's gangs start at once.
    assert rec["b1"].first_start_s == rec["b2"].first_start_s == 0.0
    # a's job starts at the next cycle (10 s), by reclaim: one whole gang of b is preempted.
    assert rec["a1"].first_start_s is not None and rec["a1"].first_start_s <= 510.0
    assert sorted(rec[b].preemptions for b in ("b1", "b2")) == [0, 1]
    victim = "b1" if rec["b1"].preemptions else "b2"
    other = "b2" if victim == "b1" else "b1"
    assert rec[victim].completion_s is not None and rec[other].completion_s is not None
    # The victim kept its progress: it waited for a's job (1,000 s) and paid the restart.
    assert rec[victim].completion_s > rec[other].completion_s
    assert rec[victim].completion_s <= 20_000.0 + 1_000.0 + 10.0 + 60.0 + 10.0
    assert run.report.violations == 0
    assert run.result.unfinished == 0


def test_gpufleet_borrows_and_reclaims(catalog: Catalog, profile: GavelProfile) -> None:
    _borrow_then_reclaim(catalog, profile, "gpufleet")


def test_kueue_like_borrows_and_reclaims(catalog: Catalog, profile: GavelProfile) -> None:
    _borrow_then_reclaim(catalog, profile, "kueue")


def test_gavel_tenants_gives_the_lender_its_share_at_the_next_round(
    catalog: Catalog, profile: GavelProfile
) -> None:
    setup = tenant_setup({"a": 1.0, "b": 1.0}, FLEET)
    jobs = [
        _job("b1", "b", 0.0, 20_000.0, 8),
        _job("b2", "b", 0.0, 20_000.0, 8),
        _job("a1", "a", 500.0, 1_000.0, 8),
    ]
    run = run_tenants("gavel-tenants", FLEET, Workload("test", jobs, profile, catalog), setup)
    rec = {r.job_id: r for r in run.result.jobs}
    assert rec["a1"].first_start_s is not None
    assert rec["a1"].first_start_s <= 500.0 + ROUND_S + 10.0
    assert rec["b1"].preemptions + rec["b2"].preemptions >= 1


def _limited_setup() -> TenantSetup:
    quotas = {"a": (8, 4), "b": (4, 8), "c": (4, 0)}  # (nominal, borrowing limit)
    specs = [
        QueueSpec(q, quotas={V100: Quota(n, borrowing_limit=lim)}) for q, (n, lim) in quotas.items()
    ]
    return TenantSetup(QueueTree.build(specs), {q: 1 / 3 for q in quotas}, None)


@lru_cache(maxsize=1)
def _data() -> tuple[Catalog, GavelProfile]:
    profile = GavelProfile.load(
        default_data_dir() / "profiles" / "gavel_simulation_throughputs.json"
    )
    return load_catalog(), profile


@pytest.mark.parametrize("policy", ["gpufleet", "kueue"])
@settings(max_examples=10, deadline=None)
@example(spec=[("c", 0, 100, 8)])  # nothing can run: the report must still be made
@given(
    spec=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.integers(0, 3000),
            st.integers(100, 5000),
            st.sampled_from([1, 2, 4, 8]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_no_limit_is_ever_exceeded(policy: str, spec: list[tuple[str, int, int, int]]) -> None:
    catalog, profile = _data()
    jobs = [_job(f"j{i}", q, float(t), float(w), g) for i, (q, t, w, g) in enumerate(spec)]
    run = run_tenants(policy, FLEET, Workload("test", jobs, profile, catalog), _limited_setup())
    assert run.report.limit_decisions == 0, run.report.examples
    # A job beyond its queue's nominal + borrowing limit (c: 4 GPUs) can never run; all
    # others finish.
    ceiling = {"a": 12, "b": 12, "c": 4}
    assert run.result.unfinished == sum(1 for q, _, _, g in spec if g > ceiling[q])
