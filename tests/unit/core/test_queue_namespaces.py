"""Queues that take jobs from some namespaces only (GPUQueue spec.namespaceSelector).

Aspects, with both engines: a gang from a namespace the queue's selector takes is placed; one
from another namespace waits with QueueNotAllowed naming the queue, the namespace and the
requirement it fails, takes no quota (it reclaims nothing, even within the queue's nominal
quota, and leaves the GPUs to others) and is no demand in the queue's status; a namespace whose
labels are unknown is refused until they are known; no selector, an empty one, or a gang
without a namespace (the simulator's) is not restricted; relabelling the namespace admits the
waiting gang at the next decision; the decision validator reports a gang placed from a
namespace its queue does not take; on random queue cases (hypothesis, both engines) no gang from
a namespace its queue does not take is placed or preempts, and every decision keeps the rules.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.admission import namespace_refusal
from gpufleet.core.decision import Decision, GangPlacement, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.label_selector import LabelSelector, Requirement, SelectorOperator
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queue_report import queue_report
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang
from tests.unit.core.test_placement_properties import FAST
from tests.unit.core.test_queue_properties import contended, queued

H100 = "H100-80GB"
ENGINES = pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT], ids=str)
TEAM_A_ONLY = LabelSelector.build({"team": "a"})
LABELS = {"ns-a": {"team": "a"}, "ns-b": {"team": "b"}}


def queues(selector: LabelSelector | None = TEAM_A_ONLY) -> QueueTree:
    return QueueTree.build(
        (
            QueueSpec("qa", quotas={H100: Quota(8)}, namespace_selector=selector),
            QueueSpec("qb", quotas={H100: Quota(8)}),
        )
    )


def with_labels(snapshot: Snapshot, labels: dict[str, dict[str, str]]) -> Snapshot:
    return replace(snapshot, namespace_labels=labels)


def in_ns(g: Gang, namespace: str | None) -> Gang:
    return replace(g, namespace=namespace)


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine = Engine.GREEDY) -> Decision:
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@ENGINES
def test_only_the_selected_namespace_is_placed_the_other_waits_naming_why(engine: Engine) -> None:
    snapshot = with_labels(cluster().nodes_of("h", H100, 2).queues(queues()).build(), LABELS)
    pending = [
        in_ns(gang("a0", gpus=4, queue="qa"), "ns-a"),
        in_ns(gang("b0", gpus=4, queue="qa"), "ns-b"),
    ]
    decision = decide(snapshot, pending, engine)
    assert decision.admitted_ids == {"a0"}
    reason = decision.pending_for("b0")
    assert reason is not None and reason.reason is PendingReason.QUEUE_NOT_ALLOWED
    assert reason.message == (
        "queue qa does not take jobs from namespace ns-b: its labels fail team=a "
        "(namespaceSelector team=a)"
    )


@ENGINES
def test_a_refused_gang_takes_no_quota_and_reclaims_nothing(engine: Engine) -> None:
    # qb borrows all of qa's nominal 8; a gang of qa within that nominal would reclaim it by
    # preemption, but it comes from a namespace qa does not take.
    snapshot = with_labels(
        cluster()
        .nodes_of("h", H100, 2)
        .run("qb0", "h0", tuple(range(8)), queue="qb")
        .run("qb1", "h1", tuple(range(8)), queue="qb")
        .queues(queues())
        .build(),
        LABELS,
    )
    outsider = in_ns(gang("b0", gpus=8, queue="qa"), "ns-b")
    decision = decide(snapshot, [outsider], engine)
    assert decision.admitted_ids == set() and decision.preemptions == ()
    reason = decision.pending_for("b0")
    assert reason is not None and reason.reason is PendingReason.QUEUE_NOT_ALLOWED
    # The same gang from the team's namespace does reclaim.
    insider = in_ns(gang("a0", gpus=8, queue="qa"), "ns-a")
    reclaimed = decide(snapshot, [insider], engine)
    assert reclaimed.admitted_ids == {"a0"} and len(reclaimed.preemptions) == 1


def test_a_refused_gang_is_no_demand_in_the_queue_status() -> None:
    snapshot = with_labels(cluster().nodes_of("h", H100, 1).queues(queues()).build(), LABELS)
    outsider = in_ns(gang("b0", gpus=4, queue="qa"), "ns-b")
    insider = in_ns(gang("a0", gpus=2, queue="qa"), "ns-a")
    figures = queue_report(snapshot, [outsider, insider])["qa"]
    assert figures.pending == 1
    assert [(r.resource, r.pending) for r in figures.resources] == [(H100, 2)]
    alone = queue_report(snapshot, [outsider])["qa"]
    assert alone.pending == 0 and alone.fair_share == 0.0


def test_unknown_namespace_labels_refuse_until_known_then_relabelling_admits() -> None:
    snapshot = cluster().nodes_of("h", H100, 1).queues(queues()).build()
    pending = [in_ns(gang("n0", queue="qa"), "ns-new")]
    reason = decide(snapshot, pending).pending_for("n0")
    assert reason is not None and reason.reason is PendingReason.QUEUE_NOT_ALLOWED
    assert reason.message == (
        "queue qa takes jobs from some namespaces only, and the labels of namespace ns-new are "
        "not known yet"
    )
    assert decide(with_labels(snapshot, {"ns-new": {"team": "b"}}), pending).admitted_ids == set()
    relabelled = with_labels(snapshot, {"ns-new": {"team": "a"}})
    assert decide(relabelled, pending).admitted_ids == {"n0"}


@pytest.mark.parametrize(
    "selector",
    [None, LabelSelector()],
    ids=["no-selector", "empty-selector"],
)
def test_no_or_an_empty_selector_takes_every_namespace(selector: LabelSelector | None) -> None:
    snapshot = cluster().nodes_of("h", H100, 1).queues(queues(selector)).build()
    pending = [in_ns(gang("x0", queue="qa"), "anywhere"), in_ns(gang("x1", queue="qa"), "ns-b")]
    assert decide(snapshot, pending).admitted_ids == {"x0", "x1"}


def test_a_gang_without_namespace_is_not_checked() -> None:
    snapshot = cluster().nodes_of("h", H100, 1).queues(queues()).build()
    assert decide(snapshot, [gang("s0", queue="qa")]).admitted_ids == {"s0"}


def test_an_expression_selector_names_every_failed_requirement() -> None:
    selector = LabelSelector.build(
        {"team": "a"},
        [
            Requirement("env", SelectorOperator.IN, frozenset({"prod", "staging"})),
            Requirement("frozen", SelectorOperator.DOES_NOT_EXIST),
        ],
    )
    labels = {"ns-x": {"team": "a", "env": "dev", "frozen": "yes"}}
    snapshot = with_labels(
        cluster().nodes_of("h", H100, 1).queues(queues(selector)).build(), labels
    )
    reason = decide(snapshot, [in_ns(gang("x0", queue="qa"), "ns-x")]).pending_for("x0")
    assert reason is not None and reason.message == (
        "queue qa does not take jobs from namespace ns-x: its labels fail "
        "env in (prod,staging),!frozen (namespaceSelector team=a,env in (prod,staging),!frozen)"
    )


def test_the_validator_reports_a_gang_placed_from_a_namespace_not_taken() -> None:
    snapshot = with_labels(cluster().nodes_of("h", H100, 1).queues(queues()).build(), LABELS)
    placed = Decision(placements=(GangPlacement("b0", H100, (ReplicaPlacement("h0", (0,)),)),))
    outsider = in_ns(gang("b0", queue="qa"), "ns-b")
    problems = decision_problems(snapshot, [outsider], placed)
    assert "b0 placed from a namespace its queue does not take" in problems
    unknown = in_ns(gang("b0", queue="qa"), "ns-unlabelled")
    assert "b0 placed from a namespace its queue does not take" in decision_problems(
        snapshot, [unknown], placed
    )
    insider = in_ns(gang("b0", queue="qa"), "ns-a")
    assert decision_problems(snapshot, [insider], placed) == []


TEAMS = st.sampled_from(("a", "b"))


def _team_selector(team: str) -> LabelSelector:
    return LabelSelector.build({"team": team})


@st.composite
def with_namespaces(draw: st.DrawFn) -> tuple[Snapshot, list[Gang]]:
    """A random queue case whose queues may take one team's namespaces only, and whose gangs
    come from namespaces of either team, or of one whose labels are unknown."""
    snapshot, pending = draw(contended() | queued())
    assert snapshot.queues is not None
    specs = [
        replace(spec, namespace_selector=draw(st.none() | TEAMS.map(_team_selector)))
        for spec in snapshot.queues.queues.values()
    ]
    labels = {"ns-a": {"team": "a"}, "ns-b": {"team": "b"}}
    namespaces = st.sampled_from(("ns-a", "ns-b", "ns-unknown"))
    gangs = [replace(g, namespace=draw(namespaces)) for g in pending]
    tree = QueueTree.build(specs)
    return replace(snapshot, queues=tree, namespace_labels=labels), gangs


@FAST
@given(case=with_namespaces(), engine=st.sampled_from(list(Engine)))
def test_no_gang_from_a_namespace_not_taken_is_placed_or_preempts(
    case: tuple[Snapshot, list[Gang]], engine: Engine
) -> None:
    snapshot, pending = case
    decision = decide(snapshot, pending, engine)  # the validator checks namespaces too
    assert snapshot.queues is not None
    refused = {g.id for g in pending if namespace_refusal(snapshot, g) is not None}
    assert not refused & decision.admitted_ids
    assert not refused & {p.for_gang for p in decision.preemptions}
    for gang_id in refused:
        reason = decision.pending_for(gang_id)
        assert reason is not None and reason.reason in (
            PendingReason.QUEUE_NOT_ALLOWED,
            PendingReason.QUEUE_NOT_FOUND,  # an unusable queue is refused first
        )
