"""A pod spec as the API server's RuntimeClass admission leaves it (runtime_class.admitted):
what a move's new pods will carry before they are made."""

from __future__ import annotations

from typing import Any

from gpufleet.scheduler.runtime_class import admitted

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
