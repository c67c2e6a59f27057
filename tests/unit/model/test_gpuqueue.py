"""The GPUQueue model, its admission policy documents and the chart's copy of them.

Aspects: a valid two-level queue parses with its defaults; the pydantic twins of the schema's
rules refuse what the API server refuses; the MIG rule lists each MIG-capable type's own
profiles; the policy compares a queue with one other queue per evaluation and admits when no
queue exists yet; the chart's template is the generated one and keeps what it installs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model.gpuqueue import GPU_TYPE_NAMES, GPUQueue, GPUQueueSpec, QueueQuota
from gpufleet.model.gpuqueue_policy import (
    CHART_TEMPLATE,
    POLICY_NAME,
    chart_template,
    default_queue,
    queue_policy_documents,
)
from gpufleet.model.gpus import load_catalog

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_a_queue_parses_with_defaults() -> None:
    spec = GPUQueueSpec.model_validate(
        {"parent": "dept", "quotas": [{"gpuType": "H100-80GB", "nominal": 8}]}
    )
    assert spec.weight == 1.0 and spec.priority_range is None
    [quota] = spec.quotas or []
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (8, None, None)
    assert GPUQueue.model_validate(default_queue()).spec.quotas is None


@pytest.mark.parametrize(
    "quota",
    [
        pytest.param({"gpuType": "H100-80GB", "nominal": -1}, id="negative"),
        pytest.param({"gpuType": "B300", "nominal": 1}, id="unknown-type"),
        pytest.param({"gpuType": "T4", "migProfile": "1g.10gb", "nominal": 1}, id="no-mig"),
        pytest.param(
            {"gpuType": "A100-40GB", "migProfile": "3g.40gb", "nominal": 1}, id="other-class"
        ),
        pytest.param({"gpuType": "L4", "nominal": 2, "lendingLimit": 3}, id="lend-above"),
        pytest.param({"gpuType": "L4", "nominal": 2, "spare": 3}, id="unknown-field"),
    ],
)
def test_bad_quotas_are_refused(quota: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        QueueQuota.model_validate(quota)


def test_duplicate_quotas_and_reversed_priority_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="one quota only"):
        GPUQueueSpec.model_validate({"quotas": [{"gpuType": "L4", "nominal": 1}] * 2})
    with pytest.raises(ValueError, match="min must be less"):
        GPUQueueSpec.model_validate({"priorityRange": {"min": 5, "max": 1}})
    # The same type once whole and once per profile is two resources.
    GPUQueueSpec.model_validate(
        {
            "quotas": [
                {"gpuType": "A100-80GB", "nominal": 4},
                {"gpuType": "A100-80GB", "migProfile": "3g.40gb", "nominal": 2},
            ]
        }
    )


def test_gpu_types_are_the_catalogues_and_mig_profiles_their_own() -> None:
    catalog = load_catalog()
    assert catalog.names == GPU_TYPE_NAMES
    for gpu in catalog:
        for profile in gpu.mig_profiles:
            QueueQuota(gpu_type=gpu.name, mig_profile=profile.name, nominal=1)


def test_policy_compares_a_queue_with_each_other_queue() -> None:
    policy, binding = queue_policy_documents()
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == POLICY_NAME
    assert policy["spec"]["paramKind"] == {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue"}
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    assert binding["spec"]["validationActions"] == ["Deny"]
    messages = [v["messageExpression"] for v in policy["spec"]["validations"]]
    assert [m.split(":")[0].strip("'") for m in messages] == [
        "spec.parent",
        "spec.quotas",
        "spec.quotas",
    ]


def test_chart_template_is_generated_and_keeps_what_it_installs() -> None:
    assert (REPO_ROOT / CHART_TEMPLATE).read_text(encoding="utf-8") == chart_template()
    body = "\n".join(line for line in chart_template().splitlines() if not line.startswith("{{"))
    docs = [d for d in yaml.safe_load_all(body) if d]
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "GPUQueue",
    ]
    for doc in docs:
        assert doc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
