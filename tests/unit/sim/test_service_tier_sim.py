"""The simulator feeds the core's service tier (core/service_tier.py) with queues.

Aspects: every gang carries the GPU-seconds its job has received (a running gang its current
run included, a pending one its earlier runs, a running job's room to grow the job's); a job
preempted and re-queued keeps its
attained service; with the tier a short job of a tenant evicts its own tenant's long job that
has run past the threshold, and the long job finishes after it; without the tier (None) it
waits behind it; with interval checkpoints the eviction waits while the long job's work since
its last checkpoint is not paid back (the core's price of lost work, fed by the simulator's
progress); a running gang the tier evicted carries how many times it did and how long its
current run has lasted, so that with a limit on re-evictions the tier's second eviction of the
long job waits until it has run the limit; the Kueue-like baseline is the same replay either
way; the core's validator, run on each decision of a replay (`CheckedPlace`, the queue bench's
`--validate`), finds nothing in the core's decisions with the limit and flags a place function
that ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.checked import CheckedPlace
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.results import SimResult
from gpufleet.sim.runner import Workload, speed_model
from gpufleet.sim.tenant_run import run_tenants
from gpufleet.sim.tenants import tenant_setup
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"
V100 = "V100-32GB"
FLEET = FleetSpec(node_pools=[NodePoolSpec(name="v", count=1, gpu_type=V100, gpus_per_node=8)])
THETA = 1800.0


def _jobs() -> list[TraceJob]:
    """Tenant a's long 8-GPU job, then at 5,000 s (40,000 GPU-s later) its short one."""
    return [
        TraceJob(
            "long",
            0.0,
            20_000.0,
            replicas=8,
            gpus_per_replica=1,
            model=MODEL,
            queue="a",
            same_node=True,
        ),
        TraceJob(
            "short",
            5_000.0,
            1_000.0,
            replicas=8,
            gpus_per_replica=1,
            model=MODEL,
            queue="a",
            same_node=True,
        ),
    ]


@dataclass
class Recorder:
    """The core's place, recording what each decision saw of the gangs' attained service."""

    policy: Policy
    seen: list[tuple[float, str, bool, float]] = field(default_factory=list)
    # (now, running gang, its tier evictions, its run so far) for gangs the tier evicted.
    history: list[tuple[float, str, int, float]] = field(default_factory=list)
    sim: Simulation | None = None

    def __call__(self, snapshot: Snapshot, pending: list[Gang], policy: Policy) -> Decision:
        now = self.sim.now if self.sim is not None else 0.0
        self.seen += [(now, r.id, True, r.attained_gpu_s) for r in snapshot.running]
        self.history += [
            (now, r.id, r.tier_evictions, r.run_s) for r in snapshot.running if r.tier_evictions
        ]
        self.seen += [(now, g.id, False, g.attained_gpu_s) for g in pending]
        return self.decide(snapshot, pending, policy)

    def decide(self, snapshot: Snapshot, pending: list[Gang], policy: Policy) -> Decision:
        return place(snapshot, pending, policy)


class Limitless(Recorder):
    """A place function that ignores the limit on re-evictions (a fault the validator finds)."""

    def decide(self, snapshot: Snapshot, pending: list[Gang], policy: Policy) -> Decision:
        return place(snapshot, pending, replace(policy, service_tier_rerun_s=None))


def _replay(
    catalog: Catalog,
    profile: GavelProfile,
    theta: float | None,
    jobs: list[TraceJob] | None = None,
    resize: bool = False,
    checkpoint_interval_s: float | None = None,
    round_s: float | None = None,
    rerun_s: float | None = None,
    recorder_type: type[Recorder] = Recorder,
) -> tuple[SimResult, Recorder, CheckedPlace]:
    workload = Workload("test", jobs or _jobs(), profile, catalog)
    setup = tenant_setup({"a": 1.0}, FLEET)
    policy = Policy(
        solver=SolverSettings(engine=Engine.GREEDY),
        service_tier_gpu_s=theta,
        service_tier_rerun_s=rerun_s,
    )
    recorder = recorder_type(policy)
    checked = CheckedPlace(recorder)
    sim = Simulation(
        SimCluster(FLEET, catalog),
        workload.jobs,
        SimPolicy("gpufleet", checked, policy, round_s=round_s, resize=resize),
        speed_model(FLEET, workload),
        SimSettings(queues=setup.tree, checkpoint_interval_s=checkpoint_interval_s),
    )
    recorder.sim = sim
    return sim.run(), recorder, checked


def test_a_short_job_evicts_its_tenants_served_long_job(
    catalog: Catalog, profile: GavelProfile
) -> None:
    result, recorder, _ = _replay(catalog, profile, THETA)
    rec = {r.job_id: r for r in result.jobs}
    assert rec["short"].first_start_s == pytest.approx(5_000.0, abs=10.0)
    assert rec["long"].preemptions == 1 and rec["short"].preemptions == 0
    assert rec["long"].completion_s is not None and rec["short"].completion_s is not None
    assert rec["long"].completion_s > rec["short"].completion_s
    # Running: 8 GPUs x its run time so far, at the short job's arrival.
    running = [a for t, gid, run, a in recorder.seen if gid == "long" and run and t >= 5_000.0]
    assert running[0] == pytest.approx(8 * 5_000.0, rel=0.01)
    # Re-queued after the eviction: it keeps what it received (and is not fresh again).
    back = [a for t, gid, run, a in recorder.seen if gid == "long" and not run and t > 0.0]
    assert back and min(back) == pytest.approx(running[0], rel=0.01)
    assert all(a == 0.0 for _, gid, run, a in recorder.seen if gid == "short" and not run)


@pytest.mark.parametrize(
    ("interval_s", "start_s"),
    [
        pytest.param(None, 5_000.0, id="on-a-signal"),
        pytest.param(2_000.0, 5_000.0, id="1000-s-unsaved"),
        pytest.param(6_000.0, 6_000.0, id="5000-s-unsaved"),
    ],
)
def test_a_tier_eviction_waits_for_the_long_jobs_checkpoint(
    catalog: Catalog, profile: GavelProfile, interval_s: float | None, start_s: float
) -> None:
    """At 5,000 s the long job is expected to run 5,000 s more (no job has completed: its run
    so far) and is worth half the short one (8 GPUs each), so the eviction gains 4 GPUs' work
    over 5,000 s against 4 x (60 s restart + the run since its last checkpoint): taken with
    1,000 s unsaved, not with 5,000 s; at its checkpoint at 6,000 s nothing is unsaved. A
    checkpoint is no event of the simulator: rounds of 100 s re-decide while the short one
    waits."""
    result, _, _ = _replay(catalog, profile, THETA, checkpoint_interval_s=interval_s, round_s=100.0)
    rec = {r.job_id: r for r in result.jobs}
    assert rec["long"].preemptions == 1
    assert rec["short"].first_start_s == pytest.approx(start_s, abs=110.0)


AGAIN = TraceJob(
    "again", 6_500.0, 1_000.0, replicas=8, gpus_per_replica=1, model=MODEL, queue="a",
    same_node=True,
)  # fmt: skip


@pytest.mark.parametrize("rerun_s", [None, 1_800.0], ids=["no-limit", "limit"])
def test_the_tiers_second_eviction_waits_for_the_limit(
    catalog: Catalog, profile: GavelProfile, rerun_s: float | None
) -> None:
    """The long job is evicted for `short` at 5,000 s and runs again from about 6,060 s (the
    short job's 1,000 s, then a 60 s restart); `again` (fresh) arrives at 6,500 s. Without a
    limit it evicts the long job at once; with 1,800 s, once the long job's run reaches it
    (rounds of 100 s re-decide meanwhile)."""
    result, recorder, checked = _replay(
        catalog, profile, THETA, [*_jobs(), AGAIN], round_s=100.0, rerun_s=rerun_s
    )
    assert checked.decisions > 0 and checked.problems == 0
    rec = {r.job_id: r for r in result.jobs}
    assert rec["long"].preemptions == 2
    # Every decision while it runs again sees one tier eviction and its run since about 6,060 s.
    seen = [(t, n, r) for t, gid, n, r in recorder.history if gid == "long"]
    assert seen and all(n == 1 for _, n, _ in seen)
    assert all(t - r == pytest.approx(6_060.0, abs=10.0) for t, _, r in seen)
    back = seen[0][0] - seen[0][2]
    # What the core saw of the long job's run at the second eviction's decision.
    start = rec["again"].first_start_s
    assert start is not None
    run_s = next(r for t, _, r in seen if t >= start)
    if rerun_s is None:
        assert start == pytest.approx(6_500.0, abs=10.0)
        assert run_s < 500.0
    else:
        assert start >= back + rerun_s - 10.0
        assert start == pytest.approx(back + rerun_s, abs=210.0) and run_s >= rerun_s


def test_the_validator_on_each_decision_flags_a_place_that_ignores_the_limit(
    catalog: Catalog, profile: GavelProfile
) -> None:
    result, _, checked = _replay(
        catalog, profile, THETA, [*_jobs(), AGAIN], round_s=100.0, rerun_s=1_800.0,
        recorder_type=Limitless,
    )  # fmt: skip
    assert {r.job_id: r.preemptions for r in result.jobs}["long"] == 2
    assert checked.problems == 1
    assert checked.examples == [
        "long evicted by the service tier again for again after 440 s of its run, under the "
        "limit of 1800 s"
    ]


def test_a_running_jobs_room_to_grow_carries_the_jobs_service(
    catalog: Catalog, profile: GavelProfile
) -> None:
    """An elastic job that got 2 of its 4 replicas (6 GPUs held by `big`) offers its room to
    grow as `el#rest`; at the next decision (`late` arrives) that gang carries el's service."""
    jobs = [
        TraceJob("big", 0.0, 20_000.0, replicas=6, gpus_per_replica=1, model=MODEL, queue="a"),
        TraceJob(
            "el", 0.0, 20_000.0, replicas=4, gpus_per_replica=1, model=MODEL, queue="a",
            min_replicas=1,
        ),
        TraceJob("late", 1_000.0, 100.0, replicas=8, gpus_per_replica=1, model=MODEL, queue="a"),
    ]  # fmt: skip
    _, recorder, _ = _replay(catalog, profile, THETA, jobs, resize=True)
    rest = [(t, a) for t, gid, run, a in recorder.seen if gid == "el#rest" and not run]
    later = [a for t, a in rest if t >= 1_000.0]
    assert later and later[0] == pytest.approx(2 * 1_000.0, rel=0.05)


def test_without_the_tier_the_short_job_waits(catalog: Catalog, profile: GavelProfile) -> None:
    result, _, _ = _replay(catalog, profile, None)
    rec = {r.job_id: r for r in result.jobs}
    assert rec["long"].preemptions == 0
    assert rec["short"].first_start_s is not None and rec["short"].first_start_s >= 20_000.0


def test_the_kueue_like_baseline_ignores_the_tier(catalog: Catalog, profile: GavelProfile) -> None:
    workload = Workload("test", _jobs(), profile, catalog)
    setup = tenant_setup({"a": 1.0}, FLEET)
    runs = [
        run_tenants("kueue", FLEET, workload, setup, service_tier_gpu_s=theta)
        for theta in (THETA, None)
    ]
    assert runs[0].result.jobs == runs[1].result.jobs
    assert {r.job_id: r.preemptions for r in runs[0].result.jobs} == {"long": 0, "short": 0}
