"""Node eligibility filters (scheduler/eligibility.py), without a cluster.

Aspects under test:
- tolerations: Equal and Exists, an empty key with Exists tolerating every taint, an effect
  that must match when given; NoSchedule and NoExecute exclude, PreferNoSchedule does not;
- nodeSelector and required node affinity: In, NotIn, Exists, DoesNotExist, Gt, Lt, matchFields
  on the node name, terms ORed and requirements ANDed, an absent label;
- resources: CPU, memory and ephemeral storage requests (init containers, overhead) against
  allocatable minus the pods bound there; terminal pods free what they held;
- the outcome: allowed nodes (None when none is out or only cordoned ones are), the pending
  reason naming each filter with its count, largest first;
- `overcommitted`: replicas of one gang, or gangs of one decision, that together exceed a node;
- the snapshot hook: an offered gang carries `allowed_nodes`, the view the outcomes.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler import eligibility
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.eligibility import (
    Eligibility,
    NodeFacts,
    Resources,
    constraints,
    overcommitted,
    pod_requests,
    static_rejection,
)
from gpufleet.scheduler.pods import facts

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(
    name: str,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    cordoned: bool = False,
    cpu: str = "16",
    memory: str = "64Gi",
) -> dict[str, Any]:
    base = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
    }
    return {
        "metadata": {"name": name, "labels": base | (labels or {})},
        "spec": {"taints": taints or [], "unschedulable": cordoned},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "ephemeral-storage": "100Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    node_name: str | None = None,
    requests: dict[str, str] | None = None,
    gpus: int = 1,
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if requests:
        resources["requests"] = requests
    body: dict[str, Any] = {
        "schedulerName": "gpufleet",
        "containers": [{"name": "main", "resources": resources}],
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {}, "annotations": {}},
        "spec": body,
        "status": {"phase": phase},
    }


def verdict(node_obj: dict[str, Any], **spec: Any) -> tuple[str, str] | None:
    return static_rejection(constraints(pod("p", **spec)), NodeFacts.of(node_obj))


# -- taints and tolerations ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "taint", "excluded"),
    [
        pytest.param([], GPU_TAINT, True, id="none"),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Exists"}], GPU_TAINT, False, id="exists"
        ),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}],
            GPU_TAINT,
            False,
            id="equal",
        ),
        pytest.param(
            [{"key": "nvidia.com/gpu", "value": "absent", "effect": "NoSchedule"}],
            GPU_TAINT,
            True,
            id="equal-other-value",
        ),
        pytest.param([{"operator": "Exists"}], GPU_TAINT, False, id="empty-key-exists-all"),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}],
            GPU_TAINT,
            True,
            id="other-effect",
        ),
        pytest.param(
            [], {"key": "dedicated", "value": "infer", "effect": "NoExecute"}, True, id="noexecute"
        ),
        pytest.param([], {"key": "x", "effect": "PreferNoSchedule"}, False, id="prefer-only"),
    ],
)
def test_taints_exclude_unless_tolerated(
    tolerations: list[dict[str, str]], taint: dict[str, str], excluded: bool
) -> None:
    why = verdict(node("n", taints=[taint]), tolerations=tolerations)
    assert (why is not None) is excluded
    if excluded:
        assert why is not None and why[0] == "TaintToleration"


def test_taint_detail_is_written_as_kubectl_does() -> None:
    assert verdict(node("n", taints=[GPU_TAINT])) == (
        "TaintToleration",
        "nvidia.com/gpu=present:NoSchedule",
    )
    assert verdict(node("n", taints=[{"key": "gpu", "effect": "NoExecute"}])) == (
        "TaintToleration",
        "gpu:NoExecute",
    )


# -- selector and affinity ----------------------------------------------------------------------


def _affinity(*terms: list[dict[str, Any]], fields: bool = False) -> dict[str, Any]:
    key = "matchFields" if fields else "matchExpressions"
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{key: t} for t in terms]
            }
        }
    }


POOL_A = node("a0", labels={"pool": "a", "gen": "9"})
POOL_B = node("b0", labels={"pool": "b", "gen": "7"})
UNLABELLED = node("c0")


@pytest.mark.parametrize(
    ("expression", "passing"),
    [
        pytest.param({"key": "pool", "operator": "In", "values": ["a"]}, {"a0"}, id="in"),
        pytest.param(
            {"key": "pool", "operator": "NotIn", "values": ["a"]}, {"b0", "c0"}, id="notin"
        ),
        pytest.param({"key": "pool", "operator": "Exists"}, {"a0", "b0"}, id="exists"),
        pytest.param({"key": "pool", "operator": "DoesNotExist"}, {"c0"}, id="doesnotexist"),
        pytest.param({"key": "gen", "operator": "Gt", "values": ["8"]}, {"a0"}, id="gt"),
        pytest.param({"key": "gen", "operator": "Lt", "values": ["8"]}, {"b0"}, id="lt"),
        pytest.param({"key": "gen", "operator": "Gt", "values": ["x"]}, set(), id="gt-not-int"),
    ],
)
def test_required_affinity_operators(expression: dict[str, Any], passing: set[str]) -> None:
    affinity = _affinity([expression])
    out = {
        n["metadata"]["name"]
        for n in (POOL_A, POOL_B, UNLABELLED)
        if not verdict(n, affinity=affinity)
    }
    assert out == passing


def test_affinity_terms_are_ored_and_expressions_anded() -> None:
    either = _affinity(
        [{"key": "pool", "operator": "In", "values": ["a"]}],
        [{"key": "gen", "operator": "Lt", "values": ["8"]}],
    )
    both = _affinity(
        [
            {"key": "pool", "operator": "Exists"},
            {"key": "gen", "operator": "Gt", "values": ["8"]},
        ]
    )
    names = (POOL_A, POOL_B, UNLABELLED)
    assert [verdict(n, affinity=either) is None for n in names] == [True, True, False]
    assert [verdict(n, affinity=both) is None for n in names] == [True, False, False]
    assert verdict(POOL_B, affinity=both) == ("NodeAffinity", "required node affinity")


def test_match_fields_select_by_node_name() -> None:
    by_name = _affinity([{"key": "metadata.name", "operator": "In", "values": ["b0"]}], fields=True)
    assert verdict(POOL_B, affinity=by_name) is None
    assert verdict(POOL_A, affinity=by_name) is not None


def test_node_selector_needs_every_label() -> None:
    assert verdict(POOL_A, nodeSelector={"pool": "a"}) is None
    assert verdict(POOL_A, nodeSelector={"pool": "a", "gen": "7"}) == (
        "NodeAffinity",
        "nodeSelector",
    )
    assert verdict(UNLABELLED, nodeSelector={"pool": "a"}) == ("NodeAffinity", "nodeSelector")


# -- resources ------------------------------------------------------------------------------------


def test_requests_sum_containers_and_take_the_largest_init_container() -> None:
    p = pod("p", requests={"cpu": "500m", "memory": "1Gi"})
    p["spec"]["containers"].append({"name": "side", "resources": {"requests": {"cpu": "1.5"}}})
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "4"}}}]
    p["spec"]["overhead"] = {"memory": "128Mi"}
    assert pod_requests(p) == Resources(cpu=4000, memory=(1024 + 128) * 2**20)


def _evaluate(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], gang_pod: dict[str, Any]
) -> eligibility.Outcome:
    all_facts = {f.key: f for f in map(facts, [*pods, gang_pod])}
    outcomes, _ = Eligibility().evaluate(nodes, all_facts, {"ns/g": gang_pod})
    return outcomes["ns/g"]


def test_a_node_without_cpu_to_spare_is_out_until_its_pod_finishes() -> None:
    nodes = [node("n0", cpu="8"), node("n1", cpu="8")]
    busy = pod("busy", node_name="n0", requests={"cpu": "6"})
    asking = pod("g-0", requests={"cpu": "4", "memory": "1Gi"})
    outcome = _evaluate(nodes, [busy], asking)
    assert outcome.allowed == frozenset({"n1"})
    assert outcome.summary() == "NodeResourcesFit: 1 node does not have the cpu to spare"
    busy["status"]["phase"] = "Succeeded"
    assert _evaluate(nodes, [busy], asking).allowed is None


def test_summary_names_every_filter_with_counts_largest_first() -> None:
    nodes = [node(f"t{i}", taints=[GPU_TAINT]) for i in range(3)]
    nodes += [node("cordoned", cordoned=True), node("other", labels={"pool": "b"})]
    nodes += [node("good", labels={"pool": "a"})]
    outcome = _evaluate(nodes, [], pod("g-0", nodeSelector={"pool": "a"}))
    assert outcome.allowed == frozenset({"good", "cordoned"})
    assert outcome.summary() == (
        "TaintToleration: 3 nodes have a taint the job does not tolerate: "
        "nvidia.com/gpu=present:NoSchedule; NodeAffinity: 1 node does not match the job's "
        "nodeSelector; NodeUnschedulable: 1 node is cordoned"
    )
    assert outcome.reason("NoEligibleNode: x") == f"NoEligibleNode: x ({outcome.summary()})"


def test_only_cordoned_nodes_out_leaves_the_gang_unrestricted() -> None:
    outcome = _evaluate([node("n0"), node("n1", cordoned=True)], [], pod("g-0"))
    assert outcome.allowed is None
    assert outcome.summary() == "NodeUnschedulable: 1 node is cordoned"
    assert _evaluate([node("n0")], [], pod("g-0")).summary() == ""


def test_overcommitted_finds_gangs_that_do_not_fit_together() -> None:
    requests = Resources(cpu=3000)
    outcome = eligibility.Outcome(None, {}, requests)
    free = {"n0": Resources(cpu=8000, memory=1, ephemeral=1)}

    def placed(gid: str, replicas: int) -> GangPlacement:
        reps = tuple(ReplicaPlacement("n0", (i,)) for i in range(replicas))
        return GangPlacement(gid, "H100-80GB", reps)

    decision = Decision(placements=(placed("a", 2), placed("b", 1), placed("c", 3)))
    outcomes = {"a": outcome, "b": outcome, "c": outcome}
    held = overcommitted(decision, outcomes, free)
    # a takes 6 of 8 cores; b (3 more) does not fit; c needs 9 on its own.
    assert set(held) == {"b", "c"}
    assert held["c"] == "NodeResourcesFit: its pods together need more cpu than n0 has to spare"
    assert overcommitted(decision, outcomes, free, skip=["a"]) == {"c": held["c"]}


def test_snapshot_offers_gangs_with_their_allowed_nodes() -> None:
    nodes = [node("h0", labels={"pool": "a"}), node("h1", labels={"pool": "b"})]
    pinned = pod("pinned", nodeSelector={"pool": "b"})
    anywhere = pod("anywhere")
    view = build_view(load_catalog(), nodes, [pinned, anywhere], {})
    gangs = {pg.gang.id: pg.gang for pg in view.pending}
    assert gangs["ns/pod:pinned"].allowed_nodes == frozenset({"h1"})
    assert gangs["ns/pod:anywhere"].allowed_nodes is None
    assert view.eligibility["ns/pod:pinned"].rejected == {("NodeAffinity", "nodeSelector"): 1}
    assert view.free["h0"] == Resources(cpu=16000, memory=64 * 2**30, ephemeral=100 * 2**30)


def test_reservations_of_a_later_call_add_to_those_of_an_earlier_one() -> None:
    # A nominated gang's hold keeps 4 of n0's 10 CPUs (nominated.py), then a moved gang's
    # reservation 3 more (mover.py): a gang asking 4 CPUs a pod fits beside either alone, not
    # beside both; both stay in what its placement is checked against (`available`).
    free = {"n0": Resources(cpu=10_000), "n1": Resources(cpu=10_000)}
    outcome = eligibility.Outcome(None, {}, Resources(cpu=4_000))
    hold = eligibility.Reservation("hi", 10, {"n0": Resources(cpu=4_000)})
    moved = eligibility.Reservation("long", 2**63, {"n0": Resources(cpu=3_000)})
    first = eligibility.reserve(outcome, "late", 0, free, [hold])
    assert first.allowed is None
    both = eligibility.reserve(first, "late", 0, free, [moved])
    # Before: the second call forgot the hold (reserved 3 CPUs) and n0 stayed allowed.
    assert both.reserved == {"n0": Resources(cpu=7_000)}
    assert both.allowed == frozenset({"n1"})
    assert eligibility.available(free, both)["n0"] == Resources(cpu=3_000)
