"""MIG requests: mig-parted entries per GPU, stable names, pruning of unused gpufleet configs,
and the recorded exact layout read back by the node adapter."""

from __future__ import annotations

from scheduler_builders import NodeBuilder

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import layout_annotation
from gpufleet.model.gpus import load_catalog
from gpufleet.model.mig import MigPlacement
from gpufleet.scheduler.mig_request import config_entries, config_name, merged_configs
from gpufleet.scheduler.nodes import to_core_node

CATALOG = load_catalog()
LAYOUTS = [None, (MigPlacement(0, "3g.40gb"), MigPlacement(4, "3g.40gb")), None]


def test_entries_name_each_gpu() -> None:
    assert config_entries(LAYOUTS) == [
        {"devices": [0], "mig-enabled": False},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [2], "mig-enabled": False},
    ]


def test_name_is_stable_and_layout_specific() -> None:
    assert config_name("a100-0", LAYOUTS) == config_name("a100-0", list(LAYOUTS))
    assert config_name("a100-0", LAYOUTS) != config_name("a100-0", [None, None, None])
    assert len(config_name("n" * 80, LAYOUTS)) <= 63


def test_merge_prunes_unused_gpufleet_configs_only() -> None:
    doc = {
        "version": "v1",
        "mig-configs": {"all-disabled": [], "gpufleet-old": [], "gpufleet-used": []},
    }
    merged = merged_configs(doc, "gpufleet-new", [], in_use=["gpufleet-used"])
    assert set(merged["mig-configs"]) == {"all-disabled", "gpufleet-used", "gpufleet-new"}


def test_requested_layout_is_read_back_exactly() -> None:
    layouts = [None, (MigPlacement(4, "3g.40gb"),)]
    name = config_name("a0", layouts)
    configs = {"mig-configs": {name: config_entries(layouts)}}
    raw = (
        NodeBuilder("a0", "A100-80GB", 2)
        .mig(name)
        .annotate(names.MIG_LAYOUT_ANNOTATION, layout_annotation(name, layouts))
        .obj()
    )
    node = to_core_node(raw, CATALOG, configs)
    assert node is not None
    assert [g.mig_layout for g in node.gpus] == layouts
