"""A pod spec as the operator makes it and the API server's admission leaves it
(runtime_class.operator_made, admitted, defaulted): what a move's new pods will carry before
they are made."""

from __future__ import annotations

from typing import Any

from gpufleet.scheduler.runtime_class import admitted, defaulted, operator_made

KATA: dict[str, Any] = {
    "metadata": {"name": "kata"},
    "handler": "kata",
    "overhead": {"podFixed": {"cpu": "250m"}},
    "scheduling": {
        "nodeSelector": {"pool": "kata"},
        "tolerations": [{"key": "sandboxed", "operator": "Exists"}],
    },
}


def test_the_runtime_classs_overhead_selector_and_tolerations_are_added() -> None:
    spec = {
        "runtimeClassName": "kata",
        "nodeSelector": {"zone": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "containers": [],
    }
    assert admitted(spec, KATA) == {
        "runtimeClassName": "kata",
        "nodeSelector": {"zone": "a", "pool": "kata"},
        "tolerations": [
            {"key": "gpu", "operator": "Exists"},
            {"key": "sandboxed", "operator": "Exists"},
        ],
        "containers": [],
        "overhead": {"cpu": "250m"},
    }
    # The template is not changed; a toleration it has already is not added twice.
    assert spec["nodeSelector"] == {"zone": "a"}
    again = {**spec, "tolerations": [{"key": "sandboxed", "operator": "Exists"}]}
    assert admitted(again, KATA)["tolerations"] == [{"key": "sandboxed", "operator": "Exists"}]  # type: ignore[index]


def test_a_pod_admission_would_refuse_is_said_so() -> None:
    clash = {"runtimeClassName": "kata", "nodeSelector": {"pool": "runc"}}
    assert admitted(clash, KATA) == (
        "its RuntimeClass kata selects nodes with pool=kata, its pod template pool=runc: the API "
        "server would refuse its pods"
    )
    assert admitted({"runtimeClassName": "kata"}, None) == (
        "its RuntimeClass kata is gone: the API server would refuse its pods"
    )


def test_a_spec_naming_no_runtime_class_keeps_its_fields_and_has_no_overhead() -> None:
    spec = {"nodeSelector": {"zone": "a"}, "overhead": {"cpu": "1"}}
    assert admitted(spec, None) == {"nodeSelector": {"zone": "a"}}
    assert admitted({"runtimeClassName": "runc"}, {"handler": "runc"}) == {
        "runtimeClassName": "runc"
    }


GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
OLD_TEMPLATES = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}


def _asking_gpus(tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "4"}
    return {"containers": [{"resources": {"limits": limits}}], "tolerations": tolerations}


def test_the_operator_appends_its_tolerations_and_an_old_pods_are_dropped() -> None:
    template = {"containers": [], "tolerations": [{"key": "own", "operator": "Exists"}]}
    old = _asking_gpus([{"key": "own", "operator": "Exists"}, OLD_TEMPLATES])
    # The template's, then the operator's; the old pod's `maintenance` (its template's then,
    # dropped since) is not kept.
    made = operator_made(template, [GPU], old)
    assert made["tolerations"] == [{"key": "own", "operator": "Exists"}, GPU]
    # ExtendedResourceToleration's for the GPUs the old pod asks is kept from it (the plugin
    # may be on); not one of that form for a resource not asked.
    other = {"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"}
    made = operator_made(template, [], _asking_gpus([GPU, other]))
    assert made["tolerations"] == [{"key": "own", "operator": "Exists"}, GPU]
    # The operator's setting not known: every toleration of the old pod is kept.
    made = operator_made(template, None, old)
    assert made["tolerations"] == [{"key": "own", "operator": "Exists"}, OLD_TEMPLATES]
    assert "tolerations" not in operator_made({"containers": []}, [], {})


def test_default_toleration_seconds_adds_what_the_pod_does_not_tolerate() -> None:
    not_ready = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    unreachable = {**not_ready, "key": "node.kubernetes.io/unreachable"}
    assert defaulted({"containers": []})["tolerations"] == [not_ready, unreachable]
    own = {**not_ready, "tolerationSeconds": 60}
    assert defaulted({"tolerations": [own]})["tolerations"] == [own, unreachable]
    every = {"operator": "Exists"}  # every key, every effect
    assert defaulted({"tolerations": [every]})["tolerations"] == [every]
    no_schedule = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    assert defaulted({"tolerations": [no_schedule]})["tolerations"] == [
        no_schedule,
        not_ready,
        unreachable,
    ]
