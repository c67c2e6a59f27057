"""The snapshot adapter: nodes -> core nodes (type, domains, MIG layouts, schedulability),
bound pods -> running gangs (recorded and foreign placements, no double counting), pending pods
-> gangs (grouping, completeness, requirements from annotations), and the cache's state built
with its queues and namespace labels (`build_state`, shared by the loop and the what-if)."""

from __future__ import annotations

import json

import pytest
from scheduler_builders import NodeBuilder, PodBuilder

from gpufleet.core.demand import Topology, TypeOption
from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.model.mig import MigPlacement
from gpufleet.model.migparted import load_default_configs
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.cluster_view import ViewBuilder, build_view
from gpufleet.scheduler.nodes import layout_for_counts, to_core_node

CATALOG = load_catalog()
CONFIGS = load_default_configs()


def view(nodes: list[dict], pods: list[dict]):  # type: ignore[no-untyped-def]
    return build_view(CATALOG, nodes, pods, CONFIGS)


# --- nodes -----------------------------------------------------------------------------------


def test_whole_gpu_node_has_type_count_and_domains() -> None:
    node = to_core_node(NodeBuilder("h0", "H100-80GB", 8).domain(4).obj(), CATALOG, CONFIGS)
    assert node is not None
    assert node.gpu_type == "H100-80GB"
    assert node.gpu_count == 8
    assert node.domains() == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert all(g.mig_layout is None for g in node.gpus)
    assert node.schedulable


def test_domain_defaults_to_catalogue_when_label_missing() -> None:
    node = to_core_node(NodeBuilder("l0", "L4", 4).obj(), CATALOG, CONFIGS)
    assert node is not None
    assert len(node.domains()) == 4 // CATALOG["L4"].nvlink_domain_size


def test_mig_node_layout_from_config_counts() -> None:
    node = to_core_node(NodeBuilder("a0", "A100-80GB").mig("all-1g.10gb").obj(), CATALOG, CONFIGS)
    assert node is not None
    for gpu in node.gpus:
        assert gpu.mig_layout is not None
        assert [p.profile for p in gpu.mig_layout] == ["1g.10gb"] * 7


def test_mig_disabled_config_gives_whole_gpus() -> None:
    node = to_core_node(NodeBuilder("a0", "A100-80GB").mig("all-disabled").obj(), CATALOG, CONFIGS)
    assert node is not None and all(g.mig_layout is None for g in node.gpus)


def test_recorded_exact_layout_wins_when_counts_match() -> None:
    gpu = CATALOG["A100-80GB"]
    default = layout_for_counts(gpu, (("3g.40gb", 1),))
    assert default is not None and default[0].start == 0
    recorded = json.dumps({"config": "gpufleet-x", "gpus": {"2": ["3g.40gb@4"]}})
    configs = {
        "mig-configs": {
            "gpufleet-x": [
                {"devices": [2], "mig-enabled": True, "mig-devices": {"3g.40gb": 1}},
            ]
        }
    }
    raw = (
        NodeBuilder("a0", "A100-80GB")
        .mig("gpufleet-x")
        .annotate(names.MIG_LAYOUT_ANNOTATION, recorded)
        .obj()
    )
    node = to_core_node(raw, CATALOG, configs)
    assert node is not None
    assert node.gpus[2].mig_layout == (MigPlacement(4, "3g.40gb"),)
    assert node.gpus[0].mig_layout is None  # not named by the config: MIG stays off


@pytest.mark.parametrize(
    "builder",
    [
        pytest.param(NodeBuilder("n").not_ready(), id="not-ready"),
        pytest.param(NodeBuilder("n").cordoned(), id="cordoned"),
        pytest.param(NodeBuilder("n", "A100-80GB").mig("all-disabled", "pending"), id="mig-busy"),
    ],
)
def test_unschedulable_nodes(builder: NodeBuilder) -> None:
    node = to_core_node(builder.obj(), CATALOG, CONFIGS)
    assert node is not None and not node.schedulable


def test_non_gpu_node_is_ignored() -> None:
    raw = NodeBuilder("cpu").obj()
    raw["metadata"]["labels"] = {}
    assert to_core_node(raw, CATALOG, CONFIGS) is None


# --- running pods ----------------------------------------------------------------------------


def test_recorded_and_foreign_pods_never_share_a_gpu() -> None:
    nodes = [NodeBuilder("h0", "H100-80GB", 8).obj()]
    ours = PodBuilder("w0").gpus(2).gang("job", 1, 0).bound("h0", gpus="0,1").obj()
    foreign = PodBuilder("other").gpus(3).scheduler("default-scheduler").bound("h0").obj()
    v = view(nodes, [foreign, ours])
    by_id = {g.id: g for g in v.snapshot.running}
    assert by_id["default/job"].replicas[0].gpus == (0, 1)
    assert by_id["default/job"].preemptible
    foreign_gang = by_id["default/other#foreign"]
    assert foreign_gang.replicas[0].gpus == (2, 3, 4)
    assert not foreign_gang.preemptible


def test_conflicting_record_is_reassigned_and_overcommit_is_reported() -> None:
    nodes = [NodeBuilder("l0", "L4", 4).obj()]
    a = PodBuilder("a").gpus(2).bound("l0", gpus="0,1").obj()
    b = PodBuilder("b").gpus(2).bound("l0", gpus="1,2").obj()  # overlaps a: reassigned
    c = PodBuilder("c").gpus(1).scheduler("default-scheduler").bound("l0").obj()
    v = view(nodes, [a, b, c])
    used = [g for gang in v.snapshot.running for r in gang.replicas for g in r.gpus]
    assert sorted(used) == [0, 1, 2, 3]
    assert v.problems == ("default/c",)


def test_mig_pods_hold_their_instances() -> None:
    nodes = [NodeBuilder("a0", "A100-80GB").mig("all-1g.10gb").obj()]
    ours = PodBuilder("m").mig("1g.10gb").bound("a0", gpus="3", mig="1g.10gb@2").obj()
    foreign = PodBuilder("f").mig("1g.10gb").scheduler("default-scheduler").bound("a0").obj()
    v = view(nodes, [ours, foreign])
    by_id = {g.id: g for g in v.snapshot.running}
    assert by_id["default/pod:m"].replicas[0].mig == MigPlacement(2, "1g.10gb")
    assert by_id["default/pod:m"].replicas[0].gpus == (3,)
    assert by_id["default/f#foreign"].replicas[0].gpus == (0,)


def test_finished_pods_and_pods_on_unknown_nodes_hold_nothing() -> None:
    nodes = [NodeBuilder("h0").obj()]
    done = PodBuilder("done").gpus(8).bound("h0", gpus="0,1,2,3,4,5,6,7").phase("Succeeded")
    elsewhere = PodBuilder("x").gpus(1).bound("gone", gpus="0")
    v = view(nodes, [done.obj(), elsewhere.obj()])
    assert v.snapshot.running == ()


# --- pending gangs ---------------------------------------------------------------------------


def test_pending_gang_collects_its_pods_in_rank_order() -> None:
    nodes = [NodeBuilder("h0").obj()]
    pods = [
        PodBuilder(f"w{i}")
        .gpus(4)
        .gang("train", 2, i)
        .annotate(names.GPU_TYPES, "H100-80GB=1.0,A100-80GB=0.55")
        .annotate(names.PRIORITY, "100")
        .annotate(names.PREEMPTIBLE, "false")
        .annotate(names.TOPOLOGY, "nvlink-domain")
        .obj()
        for i in (1, 0)
    ]
    v = view(nodes, pods)
    assert len(v.pending) == 1
    pg = v.pending[0]
    assert pg.pods == ("default/w0", "default/w1")
    gang = pg.gang
    assert gang.id == "default/train"
    assert gang.replicas_min == gang.replicas_max == 2
    assert gang.gpus_per_replica == 4
    assert gang.acceptable == (TypeOption("H100-80GB", 1.0), TypeOption("A100-80GB", 0.55))
    assert gang.priority == 100 and not gang.preemptible
    assert gang.topology is Topology.NVLINK
    assert gang.max_slowdown is None


def test_a_gang_carries_the_slowdown_its_pods_accept_from_a_power_cap() -> None:
    pods = [PodBuilder("w0").gpus(1).annotate(names.MAX_SLOWDOWN, "20").obj()]
    (pg,) = view([NodeBuilder("h0").obj()], pods).pending
    assert pg.gang.max_slowdown == 0.2


def test_a_gang_carries_the_slowdown_its_pods_state_for_spread_placements() -> None:
    pods = [PodBuilder("w0").gpus(1).annotate(names.SPREAD_SLOWDOWN, "30").obj()]
    (pg,) = view([NodeBuilder("h0").obj()], pods).pending
    assert pg.gang.spread_speed == pytest.approx(0.7)


def test_incomplete_gang_is_held() -> None:
    pods = [PodBuilder("w0").gpus(1).gang("g", 3, 0).obj()]
    v = view([NodeBuilder("h0").obj()], pods)
    assert v.pending == ()
    assert "2 more pod" in v.held["default/g"]
    assert v.held_pods["default/g"] == ("default/w0",)


def test_gang_with_bound_members_offers_only_the_rest() -> None:
    pods = [
        PodBuilder("w0").gpus(1).gang("g", 2, 0).bound("h0", gpus="0").obj(),
        PodBuilder("w1").gpus(1).gang("g", 2, 1).obj(),
    ]
    v = view([NodeBuilder("h0").obj()], pods)
    assert [pg.pods for pg in v.pending] == [("default/w1",)]
    # The rest is offered under its own id, since the bound part is a running gang.
    assert [g.id for g in v.snapshot.running] == ["default/g"]
    assert v.pending[0].gang.id == "default/g#rest"


def test_mixed_requests_and_gpu_less_pods_are_held_with_reasons() -> None:
    pods = [
        PodBuilder("a0").gpus(1).gang("a", 2, 0).obj(),
        PodBuilder("a1").gpus(2).gang("a", 2, 1).obj(),
        PodBuilder("cpu").obj(),
    ]
    v = view([NodeBuilder("h0").obj()], pods)
    assert "different GPUs" in v.held["default/a"]
    assert "neither" in v.held["default/pod:cpu"]


def test_default_acceptable_types_are_those_present() -> None:
    pods = [PodBuilder("p").gpus(1).obj()]
    v = view([NodeBuilder("h0").obj(), NodeBuilder("l0", "L4", 4).obj()], pods)
    names_ = {o.gpu_type for o in v.pending[0].gang.acceptable}
    assert names_ == {"H100-80GB", "L4"}


def test_foreign_pending_pods_are_not_ours() -> None:
    pods = [PodBuilder("p").gpus(1).scheduler("default-scheduler").obj()]
    v = view([NodeBuilder("h0").obj()], pods)
    assert v.pending == () and not v.held


def test_the_configured_scheduler_name_decides_which_pods_are_ours() -> None:
    nodes = [NodeBuilder("h0").obj()]
    mine = PodBuilder("mine").gpus(1).scheduler("gpufleet-b").obj()
    default = PodBuilder("default").gpus(2).scheduler("gpufleet").bound("h0").obj()
    v = ViewBuilder(CATALOG, "gpufleet-b").build(nodes, [mine, default], CONFIGS)
    assert [pg.gang.id for pg in v.pending] == ["default/pod:mine"]
    # A pod naming another scheduler (even the default name) holds GPUs it cannot be asked
    # to give back: counted, never preemptible.
    (foreign,) = v.snapshot.running
    assert not foreign.preemptible and len(foreign.replicas[0].gpus) == 2


def test_the_state_is_built_with_its_queues_namespaces_and_extra_pods() -> None:
    """`build_state` is the view the loop and the admin API's what-if decide on: the cache's
    GPUQueues and namespace labels included, and extra pods as if they existed."""
    queue = {"metadata": {"name": "team"}, "spec": {"quotas": [{"gpuType": "H100-80GB",
                                                                "nominal": 8}]}}  # fmt: skip
    labels = {"team-a": {"tier": "gold"}}
    state = CachedState(
        [NodeBuilder("h0").obj()], [], dict(CONFIGS), queues=[queue], namespace_labels=labels
    )
    extra = PodBuilder("asked").gpus(1).obj()
    v = ViewBuilder(CATALOG).build_state(state, [extra])
    assert v.snapshot.queues is not None and "team" in v.snapshot.queues.queues
    assert v.snapshot.namespace_labels == labels
    assert [pg.gang.id for pg in v.pending] == ["default/pod:asked"]
    assert ViewBuilder(CATALOG).build_state(state).pending == ()


def test_gated_pods_wait_for_their_gates() -> None:
    gated = PodBuilder("p").gpus(1).obj()
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    v = view([NodeBuilder("h0").obj()], [gated])
    assert v.pending == () and not v.held


def test_elastic_gang_may_take_fewer_replicas_than_pods() -> None:
    pods = [PodBuilder(f"e{i}").gpus(1).gang("e", 2, i).obj() for i in range(4)]
    (pg,) = view([NodeBuilder("h0").obj()], pods).pending
    assert (pg.gang.replicas_min, pg.gang.replicas_max) == (2, 4)


def test_elastic_growth_room_is_opportunistic_and_on_the_running_type() -> None:
    pods = [
        PodBuilder("e0").gpus(1).gang("e", 2, 0).bound("l0", gpus="0").obj(),
        PodBuilder("e1").gpus(1).gang("e", 2, 1).bound("l0", gpus="1").obj(),
        PodBuilder("e2").gpus(1).gang("e", 2, 2).annotate(names.PRIORITY, "5").obj(),
        PodBuilder("e3").gpus(1).gang("e", 2, 3).annotate(names.PRIORITY, "5").obj(),
    ]
    v = view([NodeBuilder("h0").obj(), NodeBuilder("l0", "L4", 4).obj()], pods)
    (pg,) = v.pending
    assert pg.gang.id == "default/e#rest"
    assert (pg.gang.replicas_min, pg.gang.replicas_max) == (1, 2)
    assert pg.gang.priority == 0  # growing never preempts
    assert pg.gang.type_names() == ("L4",)


def test_elastic_growth_room_is_valued_on_the_jobs_curve_from_its_running_count() -> None:
    curve = "1,1.9,2.6,3.1"
    pods = [
        PodBuilder(f"e{i}").gpus(1).gang("e", 1, i).annotate(names.SCALING, curve).obj()
        for i in range(4)
    ]
    for i in (0, 1):
        pods[i] = PodBuilder(f"e{i}").gpus(1).gang("e", 1, i).bound("l0", gpus=str(i)).obj()
    (pg,) = view([NodeBuilder("l0", "L4", 4).obj()], pods).pending
    assert pg.gang.id == "default/e#rest" and pg.gang.grows_from == 2
    assert pg.gang.scaling == (1.0, 1.9, 2.6, 3.1)
    assert pg.gang.speedup(1) == pytest.approx(0.7)  # the third replica's gain


def test_a_pending_elastic_gang_carries_its_curve_and_a_short_one_is_ignored() -> None:
    pods = [
        PodBuilder(f"e{i}").gpus(1).gang("e", 1, i).annotate(names.SCALING, "1,1.5,1.8").obj()
        for i in range(3)
    ]
    (pg,) = view([NodeBuilder("h0").obj()], pods).pending
    assert pg.gang.scaling == (1.0, 1.5, 1.8) and pg.gang.grows_from == 0
    short = [
        PodBuilder(f"s{i}").gpus(1).gang("s", 1, i).annotate(names.SCALING, "1,1.5").obj()
        for i in range(3)
    ]
    (pg,) = view([NodeBuilder("h0").obj()], short).pending
    assert pg.gang.scaling == ()


def test_the_rest_of_a_gang_bound_below_its_size_is_no_growth() -> None:
    pods = [
        PodBuilder("g0").gpus(1).gang("g", 3, 0).bound("l0", gpus="0").obj(),
        *(
            PodBuilder(f"g{i}").gpus(1).gang("g", 3, i).annotate(names.SCALING, "1,2,3").obj()
            for i in (1, 2)
        ),
    ]
    (pg,) = view([NodeBuilder("l0", "L4", 4).obj()], pods).pending
    assert pg.gang.id == "default/g#rest" and pg.gang.replicas_min == 2
    assert (pg.gang.grows_from, pg.gang.scaling) == (0, ())


def test_replicas_beyond_the_minimum_are_preemptible_one_by_one() -> None:
    pods = [
        PodBuilder(f"e{i}")
        .gpus(1)
        .gang("e", 2, i)
        .bound("l0", gpus=str(i))
        .annotate(names.PRIORITY, "5")
        .annotate(names.PREEMPTIBLE, "false")
        .obj()
        for i in range(4)
    ]
    v = view([NodeBuilder("l0", "L4", 4).obj()], pods)
    by_id = {g.id: g for g in v.snapshot.running}
    assert set(by_id) == {"default/e", "default/e#extra-2", "default/e#extra-3"}
    assert len(by_id["default/e"].replicas) == 2 and not by_id["default/e"].preemptible
    assert by_id["default/e#extra-3"].preemptible and by_id["default/e#extra-3"].priority == 0
    assert v.running_pods["default/e#extra-3"] == ("default/e3",)


# --- the incremental builder -------------------------------------------------------------------


def test_reused_builder_equals_a_fresh_build_as_the_cluster_changes() -> None:
    """The live loop's `ViewBuilder` reuses what it read of unchanged objects; after every
    kind of change (a pod bound, a gang's last pod created, a node cordoned, a pod deleted,
    a foreign pod arriving, MIG configs replaced) its view equals a view built from scratch."""
    builder = ViewBuilder(CATALOG)
    nodes = {
        "h0": NodeBuilder("h0").obj(),
        "l0": NodeBuilder("l0", "L4", 4).obj(),
        "a0": NodeBuilder("a0", "A100-80GB").mig("all-1g.10gb").obj(),
    }
    pods = {
        "g0": PodBuilder("g0").gpus(2).gang("g", 2, 0).obj(),
        "s0": PodBuilder("s0").gpus(1).bound("l0", gpus="0").obj(),
        "m0": PodBuilder("m0").mig("1g.10gb").obj(),
    }
    configs: dict[str, object] = dict(CONFIGS)

    def check() -> None:
        got = builder.build(list(nodes.values()), list(pods.values()), configs)
        assert got == build_view(CATALOG, list(nodes.values()), list(pods.values()), configs)

    check()
    check()  # nothing changed: everything reused
    pods["g1"] = PodBuilder("g1").gpus(2).gang("g", 2, 1).obj()  # gang complete
    check()
    pods["g0"] = PodBuilder("g0").gpus(2).gang("g", 2, 0).bound("h0", gpus="0,1").obj()
    check()  # partly bound: its rest is offered on the running type
    pods["g1"] = PodBuilder("g1").gpus(2).gang("g", 2, 1).bound("h0", gpus="2,3").obj()
    check()
    nodes["l0"] = NodeBuilder("l0", "L4", 4).cordoned().obj()
    check()
    pods["f0"] = PodBuilder("f0").gpus(1).scheduler("default-scheduler").bound("l0").obj()
    check()  # foreign pod fills what is left on l0
    del pods["s0"]
    check()  # ... and moves to GPU 0 once s0 is gone
    configs = dict(CONFIGS)
    check()
    assert builder.facts(pods.values())["default/g0"].pod is pods["g0"]
