"""The CRD generator, without a cluster.

Aspects under test:
- drift: the committed crds/*.yaml and the Helm chart's helm/gpufleet/crds/*.yaml are exactly
  what the generator produces, and `--check` fails on a missing, edited or stray file;
- CRD metadata: group, version, scope, names, short names, category, status subresource,
  printer columns whose JSON paths exist in the schema;
- structural schema: every node has a type, every property a description, no construct the API
  server refuses in a structural schema (anyOf, $ref, nullable, additionalProperties beside
  properties), list-map keys that are required;
- CEL: the cross-field rules exist where they should, have a message and a fieldPath, and only
  name fields that the object they sit on has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model.crdgen import crd_documents, crd_filename, main, render_yaml
from gpufleet.model.mig_profiles import MIG_PROFILE_NAMES

REPO_ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = REPO_ROOT / "crds"
CRD_DIRS = [CRD_DIR, REPO_ROOT / "helm" / "gpufleet" / "crds"]

DOCS = {doc["spec"]["names"]["kind"]: doc for doc in crd_documents()}


def _root(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = DOCS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below `node`, with a dotted path (`[]` for list items)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _at(node: dict[str, Any], dotted: str) -> dict[str, Any]:
    for name in dotted.strip(".").split("."):
        node = node["properties"][name]
    return node


# -- drift ------------------------------------------------------------------------------------


@pytest.mark.parametrize("crd_dir", CRD_DIRS, ids=["crds", "helm-chart"])
@pytest.mark.parametrize("kind", sorted(DOCS))
def test_committed_crd_matches_the_generator(kind: str, crd_dir: Path) -> None:
    doc = DOCS[kind]
    committed = (crd_dir / crd_filename(doc)).read_text(encoding="utf-8")
    assert committed == render_yaml(doc), "regenerate with: python -m gpufleet.model.crdgen"


@pytest.mark.parametrize("crd_dir", CRD_DIRS, ids=["crds", "helm-chart"])
def test_committed_crd_files_are_exactly_the_generated_ones(crd_dir: Path) -> None:
    generated = {crd_filename(doc) for doc in crd_documents()}
    assert generated == {
        "trainingjobs.gpufleet.io.yaml",
        "servingjobs.gpufleet.io.yaml",
        "gpuqueues.gpufleet.io.yaml",
    }
    assert generated == {p.name for p in crd_dir.glob("*.yaml")}


def test_default_run_writes_and_checks_both_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--check"]) == 1
    assert main([]) == 0
    assert main(["--check"]) == 0
    for crd_dir in ("crds", "helm/gpufleet/crds"):
        assert {p.name for p in (tmp_path / crd_dir).iterdir()} == {
            crd_filename(doc) for doc in crd_documents()
        }


def test_check_mode_fails_on_a_stray_file_and_writing_removes_it(tmp_path: Path) -> None:
    assert main(["--out-dir", str(tmp_path)]) == 0
    (tmp_path / "gpuclusters.gpufleet.io.yaml").write_text("kind: CustomResourceDefinition\n")
    assert main(["--check", "--out-dir", str(tmp_path)]) == 1
    assert main(["--out-dir", str(tmp_path)]) == 0
    assert main(["--check", "--out-dir", str(tmp_path)]) == 0
    assert not (tmp_path / "gpuclusters.gpufleet.io.yaml").exists()


def test_committed_yaml_parses_back_to_the_documents() -> None:
    for doc in crd_documents():
        assert yaml.safe_load((CRD_DIR / crd_filename(doc)).read_text(encoding="utf-8")) == doc


def test_check_mode_fails_on_missing_then_passes_after_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check", "--out-dir", str(tmp_path)]) == 1
    assert list(tmp_path.iterdir()) == []  # --check writes nothing
    assert "crdgen" in capsys.readouterr().err
    assert main(["--out-dir", str(tmp_path)]) == 0
    assert main(["--check", "--out-dir", str(tmp_path)]) == 0
    for doc in crd_documents():
        assert (tmp_path / crd_filename(doc)).read_text() == render_yaml(doc)


def test_check_mode_fails_on_an_edited_file(tmp_path: Path) -> None:
    assert main(["--out-dir", str(tmp_path)]) == 0
    target = tmp_path / "trainingjobs.gpufleet.io.yaml"
    target.write_text(target.read_text().replace("maximum: 1000", "maximum: 2000"))
    assert main(["--check", "--out-dir", str(tmp_path)]) == 1
    assert main(["--out-dir", str(tmp_path)]) == 0  # regenerating repairs it
    assert main(["--check", "--out-dir", str(tmp_path)]) == 0


def test_generated_text_starts_with_a_do_not_edit_header() -> None:
    for doc in crd_documents():
        assert render_yaml(doc).startswith("# Generated by `python -m gpufleet.model.crdgen`")


# -- CRD metadata -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plural", "short", "scope"),
    [
        ("TrainingJob", "trainingjobs", "tj", "Namespaced"),
        ("ServingJob", "servingjobs", "sj", "Namespaced"),
        ("GPUQueue", "gpuqueues", "gq", "Cluster"),
    ],
)
def test_names_scope_and_version(kind: str, plural: str, short: str, scope: str) -> None:
    doc = DOCS[kind]
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["metadata"]["name"] == f"{plural}.gpufleet.io"
    spec = doc["spec"]
    assert spec["group"] == "gpufleet.io"
    assert spec["scope"] == scope
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "shortNames": [short],
        "categories": ["gpufleet"],
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        ("TrainingJob", ["Phase", "Replicas", "GPUs/Replica", "MIG", "GPU Type", "Age"]),
        ("ServingJob", ["Phase", "Ready", "Prefill", "Decode", "Server", "Age"]),
        ("GPUQueue", ["Parent", "Weight", "Active", "Running", "Pending", "Age"]),
    ],
)
def test_printer_columns(kind: str, columns: list[str]) -> None:
    printed = DOCS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    default_view = [c["name"] for c in printed if c.get("priority", 0) == 0]
    assert default_view == columns
    root = _root(kind)
    for column in printed:
        assert column["description"]
        path = column["jsonPath"]
        if path.startswith(".metadata."):
            continue
        # Strip a filter such as [?(@.type=="Ready")] and check the field path exists.
        fields = re.sub(r"\[\?\(.*?\)\]", "", path).strip(".").split(".")
        node = root
        for name in fields:
            node = node["items"] if node.get("type") == "array" else node
            assert name in node["properties"], f"{kind} column {column['name']}: {path}"
            node = node["properties"][name]
        expected = {"integer": "integer", "string": "string", "number": "number"}[column["type"]]
        assert node["type"] == expected, f"{kind} column {column['name']} type"


# -- structural schema ------------------------------------------------------------------------

FORBIDDEN_KEYS = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "nullable", "const"}


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_schema_is_structural(kind: str) -> None:
    for path, node in _walk(_root(kind)):
        assert "type" in node or path == "", f"{kind}{path}: no type"
        assert not FORBIDDEN_KEYS & node.keys(), f"{kind}{path}: {FORBIDDEN_KEYS & node.keys()}"
        if "properties" in node:
            assert "additionalProperties" not in node, f"{kind}{path}"
            assert set(node.get("required", [])) <= set(node["properties"]), f"{kind}{path}"
        if node.get("type") == "object" and path.startswith((".spec", ".status")):
            open_ended = node.get("x-kubernetes-preserve-unknown-fields") or (
                "additionalProperties" in node
            )
            assert "properties" in node or open_ended, f"{kind}{path}: object without fields"
        if node.get("exclusiveMinimum") is not None:
            assert node["exclusiveMinimum"] is True and "minimum" in node, f"{kind}{path}"


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_every_field_has_a_description(kind: str) -> None:
    missing = []
    for path, node in _walk(_root(kind)):
        for name, child in node.get("properties", {}).items():
            if f"{path}.{name}" == ".metadata":
                continue  # the API server supplies ObjectMeta's own documentation
            if not child.get("description", "").strip():
                missing.append(f"{path}.{name}")
    assert missing == []


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_list_map_keys_are_required(kind: str) -> None:
    seen = 0
    for path, node in _walk(_root(kind)):
        if node.get("x-kubernetes-list-type") == "map":
            seen += 1
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item.get("required", []) or "default" in item["properties"][key]
            assert "maxItems" in node, f"{kind}{path}: unbounded list"
    assert seen >= (1 if kind == "GPUQueue" else 2)


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_every_string_and_list_a_cel_rule_may_read_is_bounded(kind: str) -> None:
    """Unbounded strings or lists under a CEL rule blow the API server's cost estimate."""
    for path, node in _walk(_root(kind)):
        if not path.startswith(".spec"):
            continue
        if node.get("type") == "array":
            assert "maxItems" in node, f"{kind}{path}"
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, f"{kind}{path}"


def test_pod_template_is_kept_but_needs_containers() -> None:
    for kind, at in [
        ("TrainingJob", ".spec.template"),
        ("ServingJob", ".spec.prefill.template"),
        ("ServingJob", ".spec.server.template"),
    ]:
        template = _at(_root(kind), at)
        assert template["x-kubernetes-embedded-resource"] is False
        assert template["required"] == ["spec"]
        assert template["properties"]["metadata"]["x-kubernetes-preserve-unknown-fields"] is True
        pod = template["properties"]["spec"]
        assert pod["x-kubernetes-preserve-unknown-fields"] is True
        assert pod["required"] == ["containers"]
        containers = pod["properties"]["containers"]
        assert containers["minItems"] == 1
        assert containers["items"]["required"] == ["name", "image"]


def test_mig_profile_enum_is_the_known_profile_names() -> None:
    paths = [
        ("TrainingJob", ".spec.migProfile"),
        ("ServingJob", ".spec.prefill.migProfile"),
        ("ServingJob", ".spec.decode.migProfile"),
        ("ServingJob", ".spec.server.migProfile"),
    ]
    for kind, at in paths:
        assert _at(_root(kind), at)["enum"] == list(MIG_PROFILE_NAMES)


@pytest.mark.parametrize(
    ("kind", "at", "bounds"),
    [
        ("TrainingJob", ".spec.replicas", {"minimum": 1, "maximum": 1024}),
        ("TrainingJob", ".spec.gpusPerReplica", {"minimum": 1, "maximum": 16}),
        ("TrainingJob", ".spec.priority", {"minimum": 0, "maximum": 1000, "default": 0}),
        ("TrainingJob", ".spec.queue", {"default": "default", "maxLength": 63}),
        ("TrainingJob", ".spec.topology", {"default": "none"}),
        ("TrainingJob", ".spec.runPolicy.backoffLimit", {"minimum": 0, "default": 3}),
        ("ServingJob", ".spec.server.minReplicas", {"minimum": 1, "default": 1}),
        ("ServingJob", ".spec.slo.ttftP90Seconds", {"minimum": 0, "exclusiveMinimum": True}),
        ("ServingJob", ".spec.autoscaling.scaleDown.stabilizationWindowSeconds", {"default": 300}),
    ],
)
def test_bounds_and_defaults(kind: str, at: str, bounds: dict[str, Any]) -> None:
    node = _at(_root(kind), at)
    assert {key: node.get(key) for key in bounds} == bounds


def test_nested_defaults_apply_to_an_omitted_parent() -> None:
    # The API server applies nested defaults only inside an object that exists, so objects
    # whose fields all have defaults default to {} themselves.
    spec = _root("TrainingJob")["properties"]["spec"]["properties"]
    assert spec["energy"]["default"] == {}
    assert spec["runPolicy"]["default"] == {}
    autoscaling = _root("ServingJob")["properties"]["spec"]["properties"]["autoscaling"]
    assert autoscaling["properties"]["scaleUp"]["default"] == {}


@pytest.mark.parametrize(
    ("kind", "at", "values"),
    [
        ("TrainingJob", ".spec.topology", ["none", "sameNode", "nvlinkDomain"]),
        ("TrainingJob", ".spec.energy.preference", ["performance", "balanced", "energy"]),
        (
            "TrainingJob",
            ".status.phase",
            ["Queued", "Admitted", "Running", "Succeeded", "Failed", "Preempted", "Suspended"],
        ),
        ("ServingJob", ".status.phase", ["Pending", "Progressing", "Ready", "Degraded", "Failed"]),
    ],
)
def test_enums(kind: str, at: str, values: list[str]) -> None:
    assert _at(_root(kind), at)["enum"] == values


# -- CEL --------------------------------------------------------------------------------------


def _rules(kind: str, at: str) -> dict[str, dict[str, str]]:
    node = _at(_root(kind), at)
    return {rule["rule"]: rule for rule in node.get("x-kubernetes-validations", [])}


def _rules_anywhere(kind: str) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    for path, node in _walk(_root(kind)):
        for rule in node.get("x-kubernetes-validations", []):
            yield path, node, rule


@pytest.mark.parametrize(
    ("kind", "at"),
    [
        ("TrainingJob", ".spec"),
        ("ServingJob", ".spec.prefill"),
        ("ServingJob", ".spec.decode"),
        ("ServingJob", ".spec.server"),
    ],
)
def test_gpus_and_mig_profile_are_exclusive_and_one_is_required(kind: str, at: str) -> None:
    rules = _rules(kind, at)
    both = rules["!(has(self.gpusPerReplica) && has(self.migProfile))"]
    assert both["fieldPath"] == ".migProfile" and "mutually exclusive" in both["message"]
    neither = rules["has(self.gpusPerReplica) || has(self.migProfile)"]
    assert neither["fieldPath"] == ".gpusPerReplica" and neither["reason"] == "FieldValueRequired"


@pytest.mark.parametrize(
    ("kind", "at"),
    [
        ("TrainingJob", ".spec.elastic"),
        ("ServingJob", ".spec.prefill"),
        ("ServingJob", ".spec.server"),
    ],
)
def test_min_replicas_not_above_max(kind: str, at: str) -> None:
    rules = [r for t, r in _rules(kind, at).items() if "self.minReplicas <= self.maxReplicas" in t]
    assert len(rules) == 1
    assert rules[0]["fieldPath"] == ".minReplicas"


def test_serving_pool_shape_rules() -> None:
    rules = _rules("ServingJob", ".spec")
    paths = sorted(r["fieldPath"] for r in rules.values())
    standby = [f".autoscaling.standby.{p}{f}" for p in ("decode", "prefill", "server")
               for f in ("", ".replicas")]  # fmt: skip
    shape = [".autoscaling.capacity.gpuType", ".decode", ".prefill", ".server", ".server", ".slo"]
    assert paths == sorted([*shape, *standby])


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_every_rule_has_a_message_and_names_an_existing_field(kind: str) -> None:
    count = 0
    for path, node, rule in _rules_anywhere(kind):
        count += 1
        assert set(rule) <= {"rule", "message", "fieldPath", "reason"}
        assert rule["message"].strip(), f"{kind}{path}: {rule['rule']}"
        target = node
        for name in rule["fieldPath"].lstrip(".").split("."):  # a field of `node`, or nested
            assert name in target.get("properties", {}), f"{kind}{path}: {rule['fieldPath']}"
            target = target["properties"][name]
        assert rule.get("reason", "FieldValueInvalid") in {
            "FieldValueInvalid",
            "FieldValueRequired",
            "FieldValueForbidden",
            "FieldValueDuplicate",
        }
    assert count >= {"TrainingJob": 5, "ServingJob": 10, "GPUQueue": 5}[kind]


# Macros, and the Kubernetes list library's functions the rules call on a list.
CEL_LIST_MACROS = {"all", "exists", "exists_one", "map", "filter", "isSorted"}


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_rules_only_read_fields_that_exist(kind: str) -> None:
    """Every `self.a.b` a rule reads resolves in the schema (a typo would fail CRD creation)."""
    for path, node, rule in _rules_anywhere(kind):
        text = rule["rule"]
        assert text.count("(") == text.count(")"), text
        for chain in re.findall(r"self((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", text):
            target = node
            for name in chain.strip(".").split("."):
                collection = target.get("type") == "array" or "additionalProperties" in target
                if collection and name in CEL_LIST_MACROS:
                    break  # `self.list.exists(...)`, `self.map.all(k, ...)`: a macro, not a field
                assert name in target.get("properties", {}), f"{kind}{path}: {text}"
                target = target["properties"][name]
        # String literals compared with a field must be among that field's enum values.
        for field, literal in re.findall(r"self\.(\w+) != '([^']*)'", text):
            assert literal in node["properties"][field]["enum"], f"{kind}{path}: {text}"
