"""Per-tenant metrics against hand-computed values.

Aspects: Jain's index (equal, one-takes-all, a mixed case, bad input); the isolated time on
1/N of the fleet (mean speed over the fleet's GPUs, stretch beyond the slice); finish-time
fairness per job and per tenant, the worst tenant and Jain's index of 1/rho in a report; the
quota monitor's guarantee check (owed while another queue borrows for more than one cycle, not
owed beyond nominal) and limit check (a queue above nominal + borrowing limit).
"""

from __future__ import annotations

import math

import pytest

from gpufleet.core.demand import Gang, TypeOption
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.results import JobRecord, SimResult
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.tenant_metrics import QuotaMonitor, isolated_time_s, jain_index, tenant_report
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"
V100 = "V100-32GB"


def test_jain_index_hand_computed() -> None:
    assert jain_index([1.0, 1.0, 1.0, 1.0]) == 1.0
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == 0.25  # one tenant gets everything: 1/n
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(36 / 42)  # 6^2 / (3 x 14)
    assert math.isnan(jain_index([0.0, 0.0]))
    with pytest.raises(ValueError):
        jain_index([])
    with pytest.raises(ValueError):
        jain_index([1.0, -1.0])


class _Speeds(SpeedModel):
    """A speed model with fixed per-type speeds (the metric only asks `type_speed`)."""

    def __init__(self, speeds: dict[str, float]) -> None:
        self.speeds = speeds

    def type_speed(self, job: TraceJob, gpu_type: str) -> float:
        return self.speeds[gpu_type]


def _job(jid: str, work: float, gpus: int, queue: str) -> TraceJob:
    return TraceJob(jid, 0.0, work, replicas=gpus, gpus_per_replica=1, model=MODEL, queue=queue)


def test_isolated_time_uses_the_mean_speed_of_a_slice_and_stretches_big_jobs() -> None:
    speeds = _Speeds({"A": 2.0, "B": 1.0})
    fleet = {"A": 8, "B": 8}  # mean speed over the 16 GPUs: 1.5
    # 4 tenants: a 1/4 slice has 4 GPUs.
    assert isolated_time_s(_job("s", 3000.0, 2, "q"), speeds, fleet, 4) == 2000.0
    assert isolated_time_s(_job("b", 3000.0, 8, "q"), speeds, fleet, 4) == 4000.0  # 8 / 4
    with pytest.raises(ValueError):
        isolated_time_s(_job("s", 1.0, 1, "q"), speeds, fleet, 0)


def test_report_rho_worst_tenant_and_jain(catalog: Catalog, profile: GavelProfile) -> None:
    # 16 V100s (speed 1.0), tenants a and b: each job's 1/2 slice has 8 GPUs.
    jobs = [_job("a1", 100.0, 1, "a"), _job("a2", 300.0, 16, "a"), _job("b1", 50.0, 4, "b")]
    done = {"a1": 200.0, "a2": 900.0, "b1": 50.0}  # completion times (all arrive at 0)
    records = [JobRecord(j.job_id, 0.0, j.gpu_share, j.queue, 0.0, done[j.job_id]) for j in jobs]
    result = SimResult("p", 16, records, 0.0, 900.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    tree = QueueTree.build([QueueSpec("a"), QueueSpec("b")])
    report = tenant_report(
        result, jobs, SpeedModel(catalog, profile), {V100: 16}, QuotaMonitor(tree), {}
    )
    rows = {r.tenant: r for r in report.rows}
    # a1: 200 / 100 = 2; a2: T_iso = 300 x 16 / 8 = 600, 900 / 600 = 1.5; a: mean 1.75.
    assert rows["a"].rho == pytest.approx(1.75)
    assert rows["b"].rho == pytest.approx(1.0)  # 50 / 50
    assert (report.worst_tenant, report.worst_rho) == ("a", pytest.approx(1.75))
    # Jain of x = (4/7, 1): (11/7)^2 / (2 x 65/49) = 121 / 130.
    assert report.jain == pytest.approx(121 / 130)
    assert report.avg_jct_h == pytest.approx((200 + 900 + 50) / 3 / 3600)
    assert rows["a"].avg_jct_h == pytest.approx(550 / 3600)
    assert report.violations == 0


def test_report_without_a_finished_job_has_no_worst_tenant(
    catalog: Catalog, profile: GavelProfile
) -> None:
    # Every job beyond its queue's limit never runs: nothing to rank, and no crash.
    jobs = [_job("c1", 100.0, 8, "c")]
    records = [JobRecord("c1", 0.0, 8.0, "c")]
    result = SimResult("p", 16, records, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, unfinished=1)
    tree = QueueTree.build([QueueSpec("c")])
    report = tenant_report(
        result, jobs, SpeedModel(catalog, profile), {V100: 16}, QuotaMonitor(tree), {}
    )
    assert report.worst_tenant == "" and math.isnan(report.worst_rho)
    assert math.isnan(report.jain)
    assert [(r.tenant, r.jobs, r.completed) for r in report.rows] == [("c", 1, 0)]


def _snapshot(catalog: Catalog, tree: QueueTree, b_gangs: int) -> Snapshot:
    fleet = FleetSpec(node_pools=[NodePoolSpec(name="v", count=2, gpu_type=V100, gpus_per_node=8)])
    nodes = SimCluster(fleet, catalog).snapshot().nodes
    running = tuple(
        RunningGang(f"b{i}", V100, (ReplicaPlacement(f"v-{i}", tuple(range(8))),), queue="b")
        for i in range(b_gangs)
    )
    return Snapshot(catalog, nodes, running, queues=tree)


def _gang(gid: str, gpus: int) -> Gang:
    return Gang(gid, (TypeOption(V100),), gpus_per_replica=gpus, queue="a")


def test_monitor_counts_a_lender_waiting_while_its_quota_is_borrowed(catalog: Catalog) -> None:
    tree = QueueTree.build(
        [QueueSpec("a", quotas={V100: Quota(8)}), QueueSpec("b", quotas={V100: Quota(8)})]
    )
    monitor = QuotaMonitor(tree, grace_s=10.0)
    # b uses all 16 (borrows 8); a's 8-GPU gang is within a's nominal: owed. Within one cycle
    # of the decision that first found it owed, that is not yet a violation.
    monitor(10.0, _snapshot(catalog, tree, 2), [_gang("a-small", 8)])
    monitor(15.0, _snapshot(catalog, tree, 2), [_gang("a-small", 8)])
    assert monitor.owed_gangs == set()
    monitor(20.0, _snapshot(catalog, tree, 2), [_gang("a-small", 8)])
    assert monitor.owed_gangs == {"a-small"}
    # A 16-GPU gang is beyond a's nominal of 8: waiting for it breaks no guarantee.
    monitor(30.0, _snapshot(catalog, tree, 2), [_gang("a-big", 16)])
    monitor(60.0, _snapshot(catalog, tree, 2), [_gang("a-big", 16)])
    # b within its nominal (one gang): nobody borrows, so a's wait is a capacity matter.
    monitor(70.0, _snapshot(catalog, tree, 1), [_gang("a-late", 8)])
    monitor(90.0, _snapshot(catalog, tree, 1), [_gang("a-late", 8)])
    # Owed again after a decision that did not find it owed: the clock starts again.
    monitor(100.0, _snapshot(catalog, tree, 2), [_gang("a-small", 8)])
    assert monitor.owed_gangs == {"a-small"}
    assert (monitor.decisions, monitor.owed_decisions, monitor.limit_decisions) == (8, 1, 0)
    assert monitor.violations == 1
    assert monitor.examples == ["t=20s a-small: gang of a owed 8 x V100-32GB"]


def test_monitor_counts_a_queue_above_its_borrowing_limit(catalog: Catalog) -> None:
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={V100: Quota(8)}),
            QueueSpec("b", quotas={V100: Quota(8, borrowing_limit=4)}),
        ]
    )
    monitor = QuotaMonitor(tree)
    monitor(0.0, _snapshot(catalog, tree, 1), [])
    assert monitor.violations == 0
    monitor(10.0, _snapshot(catalog, tree, 2), [])  # b uses 16 > 8 + 4
    assert monitor.limit_decisions == 1 and monitor.violations == 1
    assert "queue b uses 16 x V100-32GB (limit 12)" in monitor.examples[0]
