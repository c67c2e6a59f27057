"""The GPUQueue CRD, its admission policy and the default queue against the real kube-apiserver.

Aspects under test:
- the CRD is cluster-scoped with short name `gq` in category `gpufleet`; the default queue exists
  once the sandbox is up;
- a two-level hierarchy (department -> teams) is accepted, with the models' defaults filled in,
  and `kubectl get gq` shows the printer columns;
- a table of invalid queues, each refused with an error naming the field: by the schema
  (negative quota, unknown GPU type or MIG profile, lending above nominal, duplicates, bad
  weight and priority range, unknown fields, a queue as its own parent, a namespace selector
  breaking metav1's rules: bad operator, values with Exists or DoesNotExist, none with In or
  NotIn, bad label keys and values) and by the
  ValidatingAdmissionPolicy that compares a queue with the others (a child's quota above its
  parent's, for whole GPUs, for a MIG profile, or on a type the parent has none of; a parent
  lowered below a child's or dropping a child's resource; a two-queue parent cycle); nothing
  is stored;
- valid namespace selectors (empty, prefixed keys, empty values, every operator) are accepted
  and stored as written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpufleet.model.gpuqueue import DEFAULT_QUEUE, GPUQueue
from gpufleet.model.gpuqueue_policy import POLICY_NAME
from gpufleet.sandbox.control_plane import Sandbox

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
DEPT = f"dept-{SUFFIX}"
# The field path of a namespace selector's first expression in the API server's errors.
EXPR0 = "spec.namespaceSelector.matchExpressions[0]"
TEAM = f"team-{SUFFIX}"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def h100(nominal: int, **limits: int) -> dict[str, Any]:
    return {"gpuType": "H100-80GB", "nominal": nominal, **limits}


def expr(key: str, operator: str, values: list[str] | None) -> dict[str, Any]:
    """A namespaceSelector of one matchExpressions entry (`values` None: left out)."""
    entry: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        entry["values"] = values
    return {"matchExpressions": [entry]}


def _apply(sandbox: Sandbox, doc: dict[str, Any]) -> Any:
    return sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)


def _get(sandbox: Sandbox, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(sandbox.kubectl("get", "gq", name, "-o", "json").stdout)
    return out


@pytest.fixture(scope="module")
def hierarchy(sandbox: Sandbox) -> Iterator[None]:
    """A department with 16 H100s and 8 MIG slices, a team with half of them under it, deleted
    afterwards."""
    slices = {"gpuType": "A100-80GB", "migProfile": "3g.40gb"}
    dept = queue(DEPT, quotas=[h100(16, lendingLimit=8), {**slices, "nominal": 8}], weight=2)
    team = queue(
        TEAM,
        parent=DEPT,
        quotas=[h100(8, borrowingLimit=4), {**slices, "nominal": 4}],
        priorityRange={"min": 10, "max": 500},
    )  # fmt: skip
    for doc in (dept, team):
        result = _apply(sandbox, doc)
        assert result.returncode == 0, result.stderr
    yield
    sandbox.kubectl("delete", "gq", TEAM, DEPT, "--ignore-not-found", check=False)


def test_crd_is_cluster_scoped_with_short_name_and_category(sandbox: Sandbox) -> None:
    resources = sandbox.kubectl("api-resources", "--api-group=gpufleet.io", "-o", "wide").stdout
    line = next(row for row in resources.splitlines() if row.startswith("gpuqueues"))
    assert " gq " in f" {line} " and "false" in line.split() and "GPUQueue" in line
    assert "gpufleet" in line  # the category
    listed = sandbox.kubectl("get", "gpufleet", "-A").stdout
    assert f"gpuqueue.gpufleet.io/{DEFAULT_QUEUE}" in listed


def test_the_default_queue_exists_without_quota(sandbox: Sandbox) -> None:
    default = _get(sandbox, DEFAULT_QUEUE)
    assert default["spec"] == {"weight": 1.0}
    GPUQueue.model_validate(default)


def test_a_hierarchy_is_accepted_with_defaults_and_columns(
    sandbox: Sandbox, hierarchy: None
) -> None:
    team = _get(sandbox, TEAM)
    assert team["spec"]["weight"] == 1.0  # the schema's default
    assert team["spec"]["parent"] == DEPT
    parsed = GPUQueue.model_validate(team)
    assert parsed.spec.quotas is not None and parsed.spec.quotas[1].mig_profile == "3g.40gb"
    table = sandbox.kubectl("get", "gq", DEPT, TEAM).stdout.splitlines()
    assert table[0].split() == ["NAME", "PARENT", "WEIGHT", "ACTIVE", "RUNNING", "PENDING", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows[TEAM][1] == DEPT and rows[DEPT][1] == "2"


def test_the_policy_is_installed_and_bound(sandbox: Sandbox) -> None:
    policy = json.loads(
        sandbox.kubectl("get", "validatingadmissionpolicy", POLICY_NAME, "-o", "json").stdout
    )
    # The API server type-checked every expression against the GPUQueue schema.
    assert policy["status"].get("typeChecking", {}).get("expressionWarnings") in (None, [])
    sandbox.kubectl("get", "validatingadmissionpolicybinding", POLICY_NAME)


# (id, manifest, what the API server's error must name)
INVALID: list[Any] = [
    pytest.param(queue("neg", quotas=[h100(-1)]), "spec.quotas[0].nominal", id="negative-nominal"),
    pytest.param(queue("negb", quotas=[h100(2, borrowingLimit=-3)]),
                 "spec.quotas[0].borrowingLimit", id="negative-borrowing"),
    pytest.param(queue("negl", quotas=[h100(2, lendingLimit=-1)]),
                 "spec.quotas[0].lendingLimit", id="negative-lending"),
    pytest.param(queue("unknown", quotas=[{"gpuType": "B300", "nominal": 1}]),
                 "spec.quotas[0].gpuType", id="unknown-gpu-type"),
    pytest.param(queue("notmig", quotas=[{"gpuType": "T4", "migProfile": "1g.10gb", "nominal": 1}]),
                 "spec.quotas[0].migProfile", id="profile-not-on-type"),
    pytest.param(queue("badmig", quotas=[{"gpuType": "A100-80GB", "migProfile": "9g",
                                          "nominal": 1}]),
                 "spec.quotas[0].migProfile", id="unknown-profile"),
    pytest.param(queue("lend", quotas=[h100(2, lendingLimit=3)]),
                 "spec.quotas[0].lendingLimit", id="lending-above-nominal"),
    pytest.param(queue("dup", quotas=[h100(2), h100(3)]), "spec.quotas", id="duplicate-type"),
    pytest.param(queue("weight", weight=0), "spec.weight", id="zero-weight"),
    pytest.param(queue("prio", priorityRange={"min": 9, "max": 3}), "spec.priorityRange.min",
                 id="priority-range-reversed"),
    pytest.param(queue("prio2", priorityRange={"min": 2000}), "spec.priorityRange.min",
                 id="priority-above-max"),
    pytest.param(queue("extra", color="blue"), "spec.color", id="unknown-field"),
    pytest.param(queue("selfish", parent="selfish"), "spec.parent", id="own-parent"),
    pytest.param(queue("Upper"), "metadata.name", id="name-not-a-label"),
    # The namespace selector: metav1.LabelSelector's rules.
    pytest.param(queue("op", namespaceSelector=expr("team", "Equals", ["a"])),
                 f"{EXPR0}.operator", id="selector-bad-operator"),
    pytest.param(queue("exists", namespaceSelector=expr("team", "Exists", ["a"])),
                 f"{EXPR0}.values: Forbidden: values must be "
                 "empty when operator is Exists or DoesNotExist", id="selector-values-with-exists"),
    pytest.param(queue("dne", namespaceSelector=expr("team", "DoesNotExist", ["a"])),
                 f"{EXPR0}.values", id="selector-values-with-dne"),
    pytest.param(queue("inempty", namespaceSelector=expr("team", "In", [])),
                 f"{EXPR0}.values: Required value: values must "
                 "be non-empty when operator is In or NotIn", id="selector-in-without-values"),
    pytest.param(queue("notin", namespaceSelector=expr("team", "NotIn", None)),
                 f"{EXPR0}.values", id="selector-notin-no-values"),
    pytest.param(queue("badkey", namespaceSelector=expr("-team", "Exists", None)),
                 f"{EXPR0}.key", id="selector-bad-key"),
    pytest.param(queue("nokey", namespaceSelector={"matchExpressions": [{"operator": "Exists"}]}),
                 f"{EXPR0}.key", id="selector-missing-key"),
    pytest.param(queue("badval", namespaceSelector=expr("team", "In", ["a b"])),
                 f"{EXPR0}.values[0]", id="selector-bad-value"),
    pytest.param(queue("mlkey", namespaceSelector={"matchLabels": {"bad key": "a"}}),
                 "spec.namespaceSelector.matchLabels", id="selector-bad-label-key"),
    pytest.param(queue("mlval", namespaceSelector={"matchLabels": {"team": "-a"}}),
                 "spec.namespaceSelector.matchLabels.team", id="selector-bad-label-value"),
    pytest.param(queue("mlextra", namespaceSelector={"matchNames": ["a"]}),
                 "spec.namespaceSelector.matchNames", id="selector-unknown-field"),
    # The admission policy: one queue against another.
    pytest.param(queue(f"greedy-{SUFFIX}", parent=DEPT, quotas=[h100(32)]),
                 f"spec.quotas: the nominal quota exceeds parent {DEPT}'s for H100-80GB",
                 id="child-above-parent"),
    pytest.param(queue(f"greedy-mig-{SUFFIX}", parent=DEPT,
                       quotas=[{"gpuType": "A100-80GB", "migProfile": "3g.40gb", "nominal": 9}]),
                 f"spec.quotas: the nominal quota exceeds parent {DEPT}'s for A100-80GB/3g.40gb",
                 id="child-above-parent-mig-profile"),
    pytest.param(queue(f"greedy-t4-{SUFFIX}", parent=DEPT,
                       quotas=[{"gpuType": "T4", "nominal": 1}]),
                 f"spec.quotas: the nominal quota exceeds parent {DEPT}'s for T4",
                 id="child-quota-on-a-type-the-parent-lacks"),
    pytest.param(queue(DEPT, quotas=[h100(16, lendingLimit=8)]),
                 f"spec.quotas: the nominal quota is below child {TEAM}'s for "
                 "A100-80GB/3g.40gb", id="parent-drops-a-childs-mig-profile"),
    pytest.param(queue(DEPT, quotas=[h100(4)]),
                 f"spec.quotas: the nominal quota is below child {TEAM}'s for H100-80GB",
                 id="parent-below-child"),
    pytest.param(queue(DEPT, parent=TEAM, quotas=[h100(8)]),
                 f"spec.parent: parent cycle {DEPT} -> {TEAM} -> {DEPT}", id="two-queue-cycle"),
]  # fmt: skip


@pytest.mark.parametrize(("manifest", "field"), INVALID)
def test_invalid_queue_is_refused_naming_the_field(
    sandbox: Sandbox, hierarchy: None, manifest: dict[str, Any], field: str
) -> None:
    name = manifest["metadata"]["name"]
    before = sandbox.kubectl("get", "gq", name, "-o", "json", check=False)
    result = _apply(sandbox, manifest)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert field in result.stderr, result.stderr
    after = sandbox.kubectl("get", "gq", name, "-o", "json", check=False)
    if before.returncode == 0:  # an update refused: the stored object is unchanged
        assert json.loads(after.stdout)["spec"] == json.loads(before.stdout)["spec"]
    else:
        assert after.returncode != 0 and "NotFound" in after.stderr


def test_schema_refusals_are_refused_by_the_models_too() -> None:
    """The pydantic twins of the schema's rules (the policy's need other queues)."""
    for param in INVALID:
        manifest, field = param.values
        if field.startswith("spec.quotas: ") or field.startswith("spec.parent: parent cycle"):
            continue
        if field in ("metadata.name", "spec.parent"):
            continue  # rules on the object's name, checked by the API server only
        with pytest.raises(ValueError):
            GPUQueue.model_validate(manifest)


VALID_SELECTORS: list[Any] = [
    pytest.param({}, id="empty-selects-all"),
    pytest.param({"matchLabels": {"kubernetes.io/metadata.name": "team-a", "tier": ""}},
                 id="match-labels-prefixed-key-empty-value"),
    pytest.param({"matchLabels": {"team": "a"},
                  "matchExpressions": [{"key": "example.com/env", "operator": "In",
                                        "values": ["prod", "staging"]},
                                       {"key": "legacy", "operator": "DoesNotExist"},
                                       {"key": "gpu", "operator": "Exists", "values": []},
                                       {"key": "owner", "operator": "NotIn", "values": ["x"]}]},
                 id="every-operator"),
]  # fmt: skip


@pytest.mark.parametrize("selector", VALID_SELECTORS)
def test_a_valid_namespace_selector_is_accepted_and_kept(
    sandbox: Sandbox, selector: dict[str, Any]
) -> None:
    name = f"sel-{SUFFIX}"
    try:
        result = _apply(sandbox, queue(name, namespaceSelector=selector))
        assert result.returncode == 0, result.stderr
        stored = _get(sandbox, name)
        assert stored["spec"]["namespaceSelector"] == selector
        parsed = GPUQueue.model_validate(stored)
        assert parsed.spec.namespace_selector is not None
    finally:
        sandbox.kubectl("delete", "gq", name, "--ignore-not-found", check=False)


def test_a_missing_parent_is_accepted_queues_come_in_any_order(sandbox: Sandbox) -> None:
    child, parent = f"late-child-{SUFFIX}", f"late-parent-{SUFFIX}"
    try:
        assert _apply(sandbox, queue(child, parent=parent, quotas=[h100(2)])).returncode == 0
        assert _apply(sandbox, queue(parent, quotas=[h100(4)])).returncode == 0
        # Now the policy sees the parent: raising the child above it is refused.
        refused = _apply(sandbox, queue(child, parent=parent, quotas=[h100(5)]))
        assert refused.returncode != 0 and "exceeds parent" in refused.stderr
    finally:
        sandbox.kubectl("delete", "gq", child, parent, "--ignore-not-found", check=False)
