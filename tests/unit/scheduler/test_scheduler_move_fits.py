"""A moved gang's recreated pods are bound to its reserved placement only if a placement of the
core could be bound there: its node still takes them (not cordoned, no taint they do not
tolerate, their CPU to spare), and what they take of the node's CPU is counted before the
cycle's other placements. Otherwise the reservation is dropped and the gang is decided afresh,
with the core's pending reason when it fits nowhere.

`long` (one pod, 4 GPUs, 6 CPUs) runs on the L4 node and moves to the A100 node (8 GPUs,
10 CPUs); its old pod goes, and the operator recreates it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.core.decision import GangPlacement
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.eligibility import NodeFacts
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.mover import held
from tests.unit.scheduler.scheduler_builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.scheduler_fakes import Clock, FakeBinder, load, scheduler
from tests.unit.scheduler.test_scheduler_moves import TYPES, long_pod


def _cpu(obj: dict[str, Any], cpu: str) -> dict[str, Any]:
    obj["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return obj


def _node(
    name: str, gpu_type: str, gpus: int, taint: bool = False, cordon: bool = False
) -> dict[str, Any]:
    b = NodeBuilder(name, gpu_type, gpus)
    node = (b.cordoned() if cordon else b).obj()
    node["status"]["allocatable"] = {"cpu": "10", "memory": "1Ti", "ephemeral-storage": "1Ti"}
    if taint:
        node["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    return node


def _nodes(taint: bool = False, cordon: bool = False) -> list[dict[str, Any]]:
    return [_node("l4-0", "L4", 4), _node("a100-0", "A100-80GB", 8, taint, cordon)]


def _moved() -> tuple[Scheduler, SchedulerCache, FakeBinder, Clock]:
    """long moved to the A100 node, its old pod gone, not yet recreated."""
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), [_cpu(long_pod(), "6")])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    assert sched.mover.reserved["ns/long"].replicas[0].node == "a100-0"
    load(cache, _nodes(), [])
    clock.t += 1
    sched.run_cycle()
    assert "ns/long" in sched.mover.reserved
    return sched, cache, binder, clock


def _recreated() -> dict[str, Any]:
    return _cpu(long_pod(uid="u2", bound=False), "6")


def _foreign(name: str, node: str, cpu: str, gpus: str | None = None) -> dict[str, Any]:
    b = PodBuilder(name, "ns").scheduler("default-scheduler")
    if gpus is not None:
        b = b.gpus(len(gpus.split(",")))
    return _cpu(b.bound(node, gpus).obj(), cpu)


def test_a_moved_gang_is_not_bound_on_a_node_now_short_of_cpu() -> None:
    sched, cache, binder, clock = _moved()
    # Another scheduler's pod without GPUs takes 8 of the A100 node's 10 CPUs meanwhile.
    load(cache, _nodes(), [_foreign("web", "a100-0", "8"), _recreated()])
    clock.t += 1
    report = sched.run_cycle()
    # Before: bound on its reserved A100 GPUs, asking the node for 6 CPUs it no longer had.
    # Now the reservation is dropped and the core places it afresh: back on the free L4s.
    assert "ns/long" not in sched.mover.reserved
    assert report.bound == ["ns/long"] and binder.bound["ns/long-0"].node == "l4-0"


def test_a_moved_gang_is_not_bound_on_a_node_tainted_during_the_move() -> None:
    sched, cache, binder, clock = _moved()
    # The A100 node is tainted meanwhile, and a pod of another scheduler took the L4s: the gang
    # fits nowhere, and its pods say why.
    l4s = _foreign("l4-user", "l4-0", "1", gpus="0,1,2,3")
    load(cache, _nodes(taint=True), [l4s, _recreated()])
    clock.t += 1
    report = sched.run_cycle()
    # Before: bound on the tainted node, which a placement of the core never is.
    assert report.bound == [] and binder.bound == {}
    assert "ns/long" not in sched.mover.reserved
    assert "TaintToleration" in report.pending["ns/long"]
    assert "maintenance" in report.pending["ns/long"]
    # Its pods say too that it had a placement, and why that was dropped, while it waits.
    dropped = "its move's reservation on a100-0 was dropped: its pods may no longer use a100-0"
    assert dropped in report.pending["ns/long"]
    clock.t += 1
    assert dropped in sched.run_cycle().pending["ns/long"]
    # Once the L4s are free it is placed there, and the reason is forgotten.
    load(cache, _nodes(taint=True), [_recreated()])
    clock.t += 1
    assert sched.run_cycle().bound == ["ns/long"]
    assert sched.mover.explain({"ns/long": "Unschedulable: x"}) == {"ns/long": "Unschedulable: x"}


def test_a_moved_gang_is_not_bound_on_a_node_cordoned_during_the_move() -> None:
    sched, cache, binder, clock = _moved()
    load(cache, _nodes(cordon=True), [_recreated()])
    clock.t += 1
    report = sched.run_cycle()
    # Before: bound on the cordoned node. Now placed afresh, on the free L4s.
    assert "ns/long" not in sched.mover.reserved
    assert report.bound == ["ns/long"] and binder.bound["ns/long-0"].node == "l4-0"


def test_a_fresh_gang_beside_a_moved_gang_bound_now_counts_its_cpu() -> None:
    sched, cache, binder, clock = _moved()
    # A gang arriving as long's pod is recreated fits the A100 node's other 4 GPUs and, alone,
    # its 10 CPUs; with long's 6 CPUs bound in the same cycle it does not: it waits.
    late = PodBuilder("late-0", "ns").gang("late", 1, 0).gpus(4)
    late = late.annotate(names.GPU_TYPES, "A100-80GB")
    load(cache, _nodes(), [_recreated(), _cpu(late.obj(), "6")])
    clock.t += 1
    report = sched.run_cycle()
    # Before: both bound, 12 CPUs asked of 10.
    assert report.bound == ["ns/long"] and set(binder.bound) == {"ns/long-0"}
    assert binder.bound["ns/long-0"].node == "a100-0"
    assert "NodeResourcesFit" in report.pending["ns/late"]


def test_held_says_why_a_reservation_is_dropped_and_takes_the_cpu_of_one_kept() -> None:
    sched, cache, _, clock = _moved()
    reserved = sched.mover.reservations
    load(cache, _nodes(), [_recreated()])
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    shown, kept, dropped, _ = held(reserved, view, clock(), 60.0)
    assert set(kept) == {"ns/long"} and dropped == {}
    assert shown.free["a100-0"].cpu == view.free["a100-0"].cpu - 6000
    load(cache, _nodes(), [_foreign("web", "a100-0", "8"), _recreated()])
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    shown, kept, dropped, _ = held(reserved, view, clock(), 60.0)
    assert kept == {} and shown.free == view.free
    assert "a100-0" in dropped["ns/long"]


def _late(priority: int, name: str = "late") -> dict[str, Any]:
    """A gang of one pod of 4 A100 GPUs asking 6 CPUs."""
    b = PodBuilder(f"{name}-0", "ns").gang(name, 1, 0).gpus(4)
    b = b.annotate(names.GPU_TYPES, "A100-80GB")
    return _cpu(b.annotate(names.PRIORITY, str(priority)).obj(), "6")


def test_a_gang_is_not_bound_on_the_cpu_a_moved_gang_will_need() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), [_cpu(long_pod(), "6")])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    # long's old pod still exits; late (of a higher priority: no gang may take a move's
    # reservation) fits the A100 node's other 4 GPUs and its 10 CPUs alone, not beside the 6
    # long's pod will ask there.
    load(cache, _nodes(), [_cpu(long_pod(), "6"), _late(50)])
    clock.t += 1
    report = sched.run_cycle()
    # Before: late bound on a100-0, and long, short of CPU at its rebind, decided afresh.
    assert binder.bound == {}
    assert "NodeResourcesFit" in report.pending["ns/late"]
    # long's pod is recreated: it is bound on its reservation; late still waits.
    load(cache, _nodes(), [_recreated(), _late(50)])
    clock.t += 1
    assert sched.run_cycle().bound == ["ns/long"]
    assert binder.bound["ns/long-0"].node == "a100-0"


def _owned(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` as a worker of TrainingJob `long` (its controller)."""
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "name": "long",
            "uid": "job-1",
            "controller": True,
        }
    ]
    return pod


def test_a_move_keeps_the_cpu_its_jobs_current_template_asks_not_its_old_pods() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    # long's job template was changed to 6 CPUs since its pod (3 CPUs) was made: the pods the
    # operator recreates after the move ask 6.
    binder.templates["ns/long"] = {
        "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "6"}}}]}
    }
    load(cache, _nodes(), [_owned(_cpu(long_pod(), "3"))])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    assert sched.mover.reservations["ns/long"].requests.cpu == 6000
    # While long's old pod exits, late (6 CPUs) fits the A100 node's other 4 GPUs and its 10
    # CPUs beside the 3 the old pod asks, not beside the 6 the new one will.
    load(cache, _nodes(), [_owned(_cpu(long_pod(), "3")), _late(50)])
    clock.t += 1
    report = sched.run_cycle()
    # Before: late bound on a100-0 (3 CPUs kept), and long, short of CPU at its rebind,
    # decided afresh.
    assert binder.bound == {}, report.bound
    assert "NodeResourcesFit" in report.pending["ns/late"]
    load(cache, _nodes(), [_owned(_recreated()), _late(50)])
    clock.t += 1
    assert sched.run_cycle().bound == ["ns/long"]
    assert binder.bound["ns/long-0"].node == "a100-0"


def test_a_move_keeps_its_old_pods_cpu_when_its_jobs_template_cannot_be_read() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), [_owned(_cpu(long_pod(), "3"))])  # the job's template not there
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    assert sched.mover.reservations["ns/long"].requests.cpu == 3000


def _with_runtime(spec: dict[str, Any], name: str | None, cpu: str | None) -> dict[str, Any]:
    """`spec` (a pod's or template's spec) naming RuntimeClass `name`, with overhead `cpu`."""
    if name is not None:
        spec["runtimeClassName"] = name
    if cpu is not None:
        spec["overhead"] = {"cpu": cpu}
    return spec


def _class(cpu: str | None = None, **scheduling: Any) -> dict[str, Any]:
    """A RuntimeClass with `cpu` of pod overhead and `scheduling` (nodeSelector, tolerations)."""
    out: dict[str, Any] = {"handler": "h"}
    if cpu is not None:
        out["overhead"] = {"podFixed": {"cpu": cpu}}
    if scheduling:
        out["scheduling"] = scheduling
    return out


@pytest.mark.parametrize(
    ("template_class", "classes", "cpu"),
    [
        # Another RuntimeClass (overhead 2 CPUs): its overhead, as the API server will set it.
        ("kata", {"kata": _class("2"), "gvisor": _class("1")}, 5000),
        # The same one, its overhead edited since the old pod was made (1 -> 2 CPUs): read
        # again, as the API server will set it on the new pod.
        ("gvisor", {"gvisor": _class("2")}, 5000),
        # The same one, unchanged.
        ("gvisor", {"gvisor": _class("1")}, 4000),
        # The same one, its overhead taken off since.
        ("gvisor", {"gvisor": _class()}, 3000),
        # None now: no overhead.
        (None, {}, 3000),
        # A RuntimeClass without overhead: none.
        ("runc", {"runc": _class()}, 3000),
        # Unreadable (the API unreachable): the old pod's, logged.
        ("kata", None, 4000),
    ],
)
def test_a_moves_cpu_ask_has_the_overhead_of_the_runtime_class_its_template_names(
    template_class: str | None, classes: dict[str, dict[str, Any]] | None, cpu: int
) -> None:
    # long's pod (3 CPUs) runs under RuntimeClass gvisor (1 CPU of overhead); the template it
    # is recreated from names `template_class`.
    sched, _, _ = _long_under_gvisor(template_class, classes)
    assert sched.run_cycle().moved == ["ns/long"]
    # Once: the old pod's overhead always (4 CPUs); then the old pod's for the same name.
    assert sched.mover.reservations["ns/long"].requests.cpu == cpu


def _long_under_gvisor(
    template_class: str | None,
    classes: dict[str, dict[str, Any]] | None,
    nodes: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    **options: Any,
) -> tuple[Scheduler, FakeBinder, Clock]:
    """long (3 CPUs) on the L4 node under RuntimeClass gvisor (1 CPU of overhead; its pod
    carrying `tolerations`), its template naming `template_class`; the RuntimeClasses
    `classes`; the A100 node free (`nodes`, else `_nodes()`); `options`: the scheduler's."""
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    template = {"containers": [{"name": "m", "resources": {"requests": {"cpu": "3"}}}]}
    binder.templates["ns/long"] = {"spec": _with_runtime(template, template_class, None)}
    binder.runtime_classes = classes
    pod = _owned(_cpu(long_pod(), "3"))
    _with_runtime(pod["spec"], "gvisor", "1")
    if tolerations is not None:
        pod["spec"]["tolerations"] = tolerations
    load(cache, nodes or _nodes(), [pod])
    return scheduler(cache, binder, clock=clock, **options), binder, clock


def _pair(uid: str, bound: bool) -> list[dict[str, Any]]:
    """pair: two pods of 2 GPUs each asking 3 CPUs, like long on the L4 node when `bound`."""
    out = []
    for rank, gpus in enumerate(("0,1", "2,3")):
        b = PodBuilder(f"pair-{rank}", "ns").gang("pair", 2, rank).gpus(2)
        b = b.annotate(names.GPU_TYPES, TYPES).annotate(names.CHECKPOINT, "signal=2")
        if bound:
            b = b.bound("l4-0", gpus).annotate(names.ASSIGNED_TYPE, "L4")
        pod = _cpu(b.obj(), "3")
        pod["metadata"]["uid"] = f"{uid}-{rank}"
        if bound:
            started = datetime.now(UTC) - timedelta(seconds=600)
            pod["status"]["startTime"] = format_time(started)
        out.append(pod)
    return out


def test_a_moved_gang_is_not_bound_on_the_cpu_a_waiting_preemptor_will_need() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), _pair("u1", bound=True))
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/pair"]
    assert {r.node for r in sched.mover.reserved["ns/pair"].replicas} == {"a100-0"}
    load(cache, _nodes(), [])  # its old pods gone, not yet recreated
    clock.t += 1
    sched.run_cycle()
    # hi (priority 10) waits for a pod on the A100 node's other 4 GPUs, which are planned for
    # it, with 5 of the node's 10 CPUs for its pod (nominated.py): pair (priority 0) may not
    # take them. Each of pair's recreated pods (3 CPUs) fits beside them; both together not.
    victim = _foreign("x", "a100-0", "0", gpus="4,5,6,7")
    hi = _cpu(_late(10, "hi"), "5")
    plan = GangPlacement("ns/hi", "A100-80GB", (ReplicaPlacement("a100-0", (4, 5, 6, 7)),))
    load(cache, _nodes(), [victim, hi, *_pair("u2", bound=False)])
    cache.nominate("ns/hi", frozenset({"ns/x"}), placement=plan)
    clock.t += 1
    report = sched.run_cycle()
    # Before: bound on a100-0, 6 CPUs beside hi's 5 of 10. Now its reservation is dropped and
    # the core places it afresh, on the free L4s.
    assert "ns/pair" not in sched.mover.reserved
    assert report.bound == ["ns/pair"], (report.pending, sched.mover.dropped)
    assert {binder.bound[f"ns/pair-{r}"].node for r in (0, 1)} == {"l4-0"}


def test_a_nominated_gang_is_not_bound_at_the_end_of_its_wait_on_the_cpu_a_move_needs() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), [_cpu(long_pod(), "6")])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    assert sched.mover.reserved["ns/long"].replicas[0].gpus == (0, 1, 2, 3)
    # long's old pod still exits. hi's wait for the A100 node's other 4 GPUs has ended (the
    # pod it waited for is gone): its pod (6 CPUs) fits the node's 10 CPUs alone, not beside
    # the 6 long's pod will ask there, which no gang may take.
    hi = _late(10, "hi")
    plan = GangPlacement("ns/hi", "A100-80GB", (ReplicaPlacement("a100-0", (4, 5, 6, 7)),))
    load(cache, _nodes(), [_cpu(long_pod(), "6"), hi])
    cache.nominate("ns/hi", frozenset({"ns/x"}), placement=plan)
    assert cache.state().nominations["ns/hi"].ready
    clock.t += 1
    report = sched.run_cycle()
    # Before: hi bound on a100-0 at the end of its wait (its check ran before the move's
    # reservation was kept), and long, short of CPU at its rebind, decided afresh.
    assert binder.bound == {}, report.bound
    assert "NodeResourcesFit" in report.pending["ns/hi"]
    # Its message says its hold was given up, and for which move (before: the core's reason
    # alone, as if it had never had a placement).
    assert (
        "its hold on a100-0 was given up at the end of its wait: its pods together need more "
        "cpu than a100-0 has to spare beside what moved gang ns/long is promised there; it is "
        "decided afresh"
    ) in report.pending["ns/hi"], report.pending["ns/hi"]
    # long's pod is recreated: it is bound on its reservation; hi still waits.
    load(cache, _nodes(), [_recreated(), hi])
    clock.t += 1
    assert sched.run_cycle().bound == ["ns/long"]
    assert binder.bound["ns/long-0"].node == "a100-0"
    assert "ns/hi" not in binder.bound


def test_where_refit_and_the_core_part_a_move_bound_the_same_cycle() -> None:
    # Whether `nominated.refit` (the second check of a hold bound at the end of its wait, once
    # the moves' reservations are known) can disagree with the core: it can, for one cycle,
    # when the move is bound in the same cycle. long's old pod is gone and its pod recreated,
    # and hi's wait for the A100 node's other 4 GPUs ends, in one cycle: `hold` bound hi (6 of
    # the node's 10 CPUs); `refit` gives the hold up beside long's 6, bound now. The core,
    # which counts a gang bound now on CPU only through the post-decision check (not in the
    # nodes a gang may use), places hi there again; that check (`overcommitted`) holds it:
    # nothing is over-committed, and hi says both why. The next cycle sees long's pod bound
    # and leaves the node out.
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), [_cpu(long_pod(), "6")])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    hi = _late(10, "hi")
    plan = GangPlacement("ns/hi", "A100-80GB", (ReplicaPlacement("a100-0", (4, 5, 6, 7)),))
    load(cache, _nodes(), [_recreated(), hi])
    cache.nominate("ns/hi", frozenset({"ns/x"}), placement=plan)
    assert cache.state().nominations["ns/hi"].ready
    clock.t += 1
    report = sched.run_cycle()
    assert report.bound == ["ns/long"] and binder.bound["ns/long-0"].node == "a100-0"
    assert report.pending["ns/hi"].startswith(
        "NodeResourcesFit: its pods together need more cpu than a100-0 has to spare; its hold "
        "on a100-0 was given up at the end of its wait"
    )
    clock.t += 1
    report = sched.run_cycle()
    assert "ns/hi" not in binder.bound
    assert "NodeResourcesFit: 1 node does not have the cpu to spare" in report.pending["ns/hi"]


def _pooled(taint: bool = False) -> list[dict[str, Any]]:
    """`_nodes`, labelled pool=l4 and pool=a100."""
    out = _nodes(taint=taint)
    for node, pool in zip(out, ("l4", "a100"), strict=True):
        node["metadata"].setdefault("labels", {})["pool"] = pool
    return out


@pytest.mark.parametrize(
    ("classes", "template_selector"),
    [
        # kata (named by the template since the old pod was made) selects pool=l4: its new pods
        # could not run on the A100 node.
        ({"kata": _class(nodeSelector={"pool": "l4"})}, None),
        # kata selects pool=a100, the template pool=l4: the API server would refuse its pods.
        ({"kata": _class(nodeSelector={"pool": "a100"})}, {"pool": "l4"}),
        # kata is gone: the API server would refuse its pods.
        ({}, None),
    ],
)
def test_a_move_is_not_started_where_its_recreated_pods_could_not_run(
    classes: dict[str, dict[str, Any]], template_selector: dict[str, str] | None
) -> None:
    sched, binder, clock = _long_under_gvisor("kata", classes, _pooled(), move_unfit_recheck_s=40.0)
    if template_selector is not None:
        binder.templates["ns/long"]["spec"]["nodeSelector"] = template_selector
    # Before: long moved to the A100 node (its old pod passes there), and its recreated pods,
    # refused or not fitting it, lost the reservation.
    assert sched.run_cycle().moved == []
    assert binder.moved == []
    assert binder.runtime_class_reads == ["kata"]
    # Not chosen again each cycle (its moves kept to the nodes those pods could use) ...
    clock.t += 1
    assert sched.run_cycle().moved == []
    assert binder.runtime_class_reads == ["kata"]
    # ... until they are read again, after the setting's seconds.
    clock.t += 38
    assert sched.run_cycle().moved == []
    assert binder.runtime_class_reads == ["kata"]
    clock.t += 1
    assert sched.run_cycle().moved == []
    assert binder.runtime_class_reads == ["kata", "kata"]


def test_no_move_is_started_for_a_job_being_deleted() -> None:
    # long's TrainingJob is being deleted: nothing would recreate its pods, so a move would
    # only hold the A100 node's GPUs idle for the reservation's time (before, it was started
    # from the old pod's spec, and the reservation kept the next job off the node).
    sched, binder, _ = _long_under_gvisor("gvisor", {"gvisor": _class("1")})
    binder.gone.add("ns/long")
    assert sched.run_cycle().moved == []
    assert binder.moved == [] and "ns/long" not in sched.mover.reservations
    # The same job still there: the move is made.
    sched, binder, _ = _long_under_gvisor("gvisor", {"gvisor": _class("1")})
    assert sched.run_cycle().moved == ["ns/long"]


def test_a_move_is_started_where_its_runtime_classs_scheduling_lets_its_pods_run() -> None:
    # kata selects pool=a100: the A100 node matches. Or the A100 node is tainted and the old
    # pod tolerates it by a toleration its template lacks (one the operator adds, or its
    # RuntimeClass's, which admission adds again): so will the new pods.
    tolerate = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    for template_class, classes in (
        ("kata", {"kata": _class(nodeSelector={"pool": "a100"})}),
        ("gvisor", {"gvisor": _class("1", tolerations=tolerate)}),
    ):
        nodes = _pooled(taint=template_class == "gvisor")
        sched, _, _ = _long_under_gvisor(template_class, classes, nodes, tolerate)
        # Without the old pod's tolerations: not moved (the taint not tolerated).
        assert sched.run_cycle().moved == ["ns/long"], template_class


def test_a_move_kept_to_fit_reads_no_node_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # long's move refused (kata selects pool=l4) and kept to the nodes its pods could use: the
    # check reuses what the cycle's node filters read of each node (one lookup per node),
    # rather than reading every node again each cycle. Before, each cycle read both nodes
    # again (4 reads over these two cycles, not 0).
    sched, binder, clock = _long_under_gvisor(
        "kata", {"kata": _class(nodeSelector={"pool": "l4"})}, _pooled()
    )
    assert sched.run_cycle().moved == []
    reads: list[str] = []
    real = NodeFacts.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type[NodeFacts], node: dict[str, Any]) -> NodeFacts:
        reads.append(node["metadata"]["name"])
        return real(cls, node)  # type: ignore[no-any-return]

    monkeypatch.setattr(NodeFacts, "of", classmethod(counted))
    for _ in range(2):
        clock.t += 1
        assert sched.run_cycle().moved == []
    assert reads == []
    # Still kept off the A100 node: the move is not chosen (nor its RuntimeClass read) again.
    assert binder.runtime_class_reads == ["kata"]


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MAINTENANCE = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("operator_adds", "moved"),
    [
        # The operator adds the GPU toleration only: the maintenance toleration long's pod has
        # came from its template, which has dropped it since, so the new pods will not have it.
        # Before, it was counted (kept from the old pod): long was moved, and its recreated
        # pods, not tolerating the A100 node's taint, lost the reservation at the rebind.
        ([GPU_TOLERATION], []),
        # The operator adds it itself (its setting operator.pod_tolerations): the new pods
        # will have it.
        ([GPU_TOLERATION, MAINTENANCE], ["ns/long"]),
        # Not known (no operator in this process): the old pods' tolerations are kept.
        (None, ["ns/long"]),
    ],
)
def test_a_toleration_the_template_dropped_is_not_counted_on_a_moves_target(
    operator_adds: list[dict[str, str]] | None, moved: list[str]
) -> None:
    nodes = _pooled(taint=True)  # the A100 node tainted maintenance:NoSchedule
    sched, binder, _ = _long_under_gvisor(
        "gvisor",
        {"gvisor": _class("1")},
        nodes,
        [GPU_TOLERATION, MAINTENANCE],
        pod_tolerations=operator_adds,
    )
    assert sched.run_cycle().moved == moved
    assert [key for key, _ in binder.moved] == [f"{g}-0" for g in moved]


def test_a_toleration_admission_adds_for_the_gpus_asked_is_counted_on_a_moves_target() -> None:
    # The A100 node is tainted nvidia.com/gpu; the operator adds no toleration (its setting
    # empty), and long's pod tolerates the taint by the toleration the API server's
    # ExtendedResourceToleration gave it for the nvidia.com/gpu it asks: its new pods, asking
    # the same, will get it again. A toleration of another key (`maintenance`) is not kept.
    nodes = _nodes()
    nodes[1]["spec"]["taints"] = [GPU_TAINT]
    sched, _, _ = _long_under_gvisor(
        "gvisor", {"gvisor": _class("1")}, nodes, [GPU_TOLERATION], pod_tolerations=[]
    )
    assert sched.run_cycle().moved == ["ns/long"]
    nodes[1]["spec"]["taints"] = [GPU_TAINT, {"key": "maintenance", "effect": "NoSchedule"}]
    sched, _, _ = _long_under_gvisor(
        "gvisor",
        {"gvisor": _class("1")},
        nodes,
        [GPU_TOLERATION, MAINTENANCE],
        pod_tolerations=[],
    )
    assert sched.run_cycle().moved == []
