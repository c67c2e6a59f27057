"""gpufleet's CRDs against the sandbox's real kube-apiserver.

Aspects under test:
- the CRDs are installed and established, with their short names and category;
- every manifest in examples/ is accepted by plain `kubectl apply`, and the API server fills in
  the same defaults as the pydantic models;
- `kubectl get` shows the printer columns, including values written through the status
  subresource, and the status schema is enforced;
- `kubectl explain` shows the models' field descriptions;
- a table of invalid manifests, each rejected by the API server with an error naming the field.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model.crdgen import crd_documents
from gpufleet.model.gpuqueue import GPUQueue
from gpufleet.model.servingjob import ServingJob, ServingJobSpec
from gpufleet.model.trainingjob import TrainingJob, TrainingJobSpec
from gpufleet.sandbox.control_plane import Sandbox

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
MODELS: dict[str, type[TrainingJob] | type[ServingJob] | type[GPUQueue]] = {
    "TrainingJob": TrainingJob,
    "ServingJob": ServingJob,
    "GPUQueue": GPUQueue,
}


@pytest.fixture(scope="module")
def namespace(sandbox: Sandbox) -> Iterator[str]:
    """A namespace of this module's own, deleted afterwards."""
    name = f"crd-test-{uuid.uuid4().hex[:8]}"
    sandbox.kubectl("create", "namespace", name)
    yield name
    sandbox.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


def _without_false_embedded(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: _without_false_embedded(value)
            for key, value in node.items()
            if not (key == "x-kubernetes-embedded-resource" and value is False)
        }
    if isinstance(node, list):
        return [_without_false_embedded(item) for item in node]
    return node


def _get(sandbox: Sandbox, namespace: str, kind: str, name: str) -> dict[str, Any]:
    out = sandbox.kubectl("get", "-n", namespace, kind.lower(), name, "-o", "json").stdout
    obj: dict[str, Any] = json.loads(out)
    return obj


# -- installation -----------------------------------------------------------------------------


def test_crds_are_established(sandbox: Sandbox) -> None:
    for doc in crd_documents():
        crd = json.loads(
            sandbox.kubectl("get", "crd", doc["metadata"]["name"], "-o", "json").stdout
        )
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True"
        assert conditions.get("NamesAccepted") == "True"
        # The stored schema is the generated one, less `x-kubernetes-embedded-resource: false`,
        # which the API server drops as the default it is.
        stored = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        generated = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert stored == _without_false_embedded(generated)


def test_short_names_and_category_resolve(sandbox: Sandbox, namespace: str) -> None:
    for resource in ("tj", "sj", "trainingjobs", "servingjobs", "gpufleet"):
        result = sandbox.kubectl("get", resource, "-n", namespace, check=False)
        assert result.returncode == 0, result.stderr


# -- examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_accepted_with_the_models_defaults(
    sandbox: Sandbox, namespace: str, path: Path
) -> None:
    result = sandbox.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
    doc = _load(path)
    stored = _get(sandbox, namespace, doc["kind"], doc["metadata"]["name"])
    # The API server's structural defaulting and the pydantic defaults agree.
    expected = MODELS[doc["kind"]].model_validate(doc).spec
    assert stored["spec"] == expected.model_dump(by_alias=True, exclude_none=True, mode="json")


def test_all_examples_apply_together_and_again(sandbox: Sandbox, namespace: str) -> None:
    # `kubectl apply -f examples/` as a user would, twice: the second run changes nothing.
    first = sandbox.kubectl("apply", "-n", namespace, "-f", str(REPO_ROOT / "examples"))
    assert first.stdout.count("gpufleet.io/") == len(EXAMPLES)
    second = sandbox.kubectl("apply", "-n", namespace, "-f", str(REPO_ROOT / "examples"))
    assert second.stdout.count("unchanged") == len(EXAMPLES)


# -- kubectl get / explain --------------------------------------------------------------------


def test_get_shows_printer_columns(sandbox: Sandbox, namespace: str) -> None:
    sandbox.kubectl("apply", "-n", namespace, "-f", str(REPO_ROOT / "examples"))
    out = sandbox.kubectl("get", "tj,sj", "-n", namespace).stdout
    tables = [block for block in out.strip().split("\n\n") if block.strip()]
    assert len(tables) == 2
    tj_header, sj_header = (table.splitlines()[0].split() for table in tables)
    assert tj_header == ["NAME", "PHASE", "REPLICAS", "GPUS/REPLICA", "MIG", "GPU", "TYPE", "AGE"]
    assert sj_header == ["NAME", "PHASE", "READY", "PREFILL", "DECODE", "SERVER", "AGE"]
    assert "trainingjob.gpufleet.io/llama-finetune" in tables[0]
    assert "servingjob.gpufleet.io/llama-8b-code" in tables[1]
    wide = sandbox.kubectl("get", "tj", "-n", namespace, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[:3] == ["NAME", "QUEUE", "PRIORITY"]
    row = next(line for line in wide.splitlines() if line.startswith("bert-mig "))
    assert "3g.40gb" in row.split()


def test_status_subresource_feeds_the_columns(sandbox: Sandbox, namespace: str) -> None:
    sandbox.kubectl(
        "apply", "-n", namespace, "-f", str(REPO_ROOT / "examples" / "trainingjob-gang-h100.yaml")
    )
    status = {
        "status": {
            "phase": "Running",
            "replicas": 2,
            "gpuType": "H100-80GB",
            "placement": [
                {"replica": 0, "node": "h100-0", "gpus": [0, 1, 2, 3]},
                {"replica": 1, "node": "h100-0", "gpus": [4, 5, 6, 7]},
            ],
            "conditions": [
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Placed",
                    "message": "gang placed on h100-0",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }
    sandbox.kubectl(
        "patch", "-n", namespace, "tj", "llama-finetune", "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    row = sandbox.kubectl("get", "tj", "llama-finetune", "-n", namespace, "--no-headers").stdout
    # Columns: name, phase, replicas, GPUs per replica, (empty MIG), GPU type, age.
    assert row.split()[:5] == ["llama-finetune", "Running", "2", "4", "H100-80GB"]
    # A status outside its schema is refused too.
    bad = sandbox.kubectl(
        "patch", "-n", namespace, "tj", "llama-finetune", "--subresource=status",
        "--type=merge", "-p", '{"status": {"phase": "Sleeping"}}', check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "status.phase" in bad.stderr


def test_serving_status_feeds_the_columns(sandbox: Sandbox, namespace: str) -> None:
    path = REPO_ROOT / "examples" / "servingjob-disaggregated.yaml"
    sandbox.kubectl("apply", "-n", namespace, "-f", str(path))
    pool = {"replicas": 2, "readyReplicas": 2, "desiredReplicas": 3}
    status = {
        "status": {
            "phase": "Progressing",
            "prefill": {**pool, "lastScaleTime": "2026-01-01T00:00:00Z",
                        "lastScaleReason": "TTFT p90 above SLO"},
            "decode": {**pool, "readyReplicas": 1},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "ReplicasNotReady",
                    "message": "decode: 1 of 2 replicas ready",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }  # fmt: skip
    sandbox.kubectl(
        "patch", "-n", namespace, "sj", "llama-8b-code", "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    row = sandbox.kubectl("get", "sj", "llama-8b-code", "-n", namespace, "--no-headers").stdout
    # Columns: name, phase, Ready condition, ready prefill, ready decode, (empty server), age.
    assert row.split()[:5] == ["llama-8b-code", "Progressing", "False", "2", "1"]


def test_queue_is_a_field_selector(sandbox: Sandbox, namespace: str) -> None:
    sandbox.kubectl("apply", "-n", namespace, "-f", str(REPO_ROOT / "examples"))
    out = sandbox.kubectl(
        "get", "tj", "-n", namespace, "--field-selector=spec.queue=research", "-o", "name"
    ).stdout
    assert out.split() == ["trainingjob.gpufleet.io/llama-finetune"]


def test_spec_changes_do_not_touch_status(sandbox: Sandbox, namespace: str) -> None:
    # An object of its own, so that the examples stay as applied whatever the test order.
    doc = _changed(TRAINING, {"metadata.name": "status-guard"})
    sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc))
    sandbox.kubectl(
        "patch", "-n", namespace, "tj", "status-guard", "--type=merge",
        "-p", '{"status": {"phase": "Failed"}, "spec": {"priority": 5}}',
    )  # fmt: skip
    obj = _get(sandbox, namespace, "TrainingJob", "status-guard")
    assert obj["spec"]["priority"] == 5
    assert "phase" not in obj.get("status", {})


def _explain(sandbox: Sandbox, field: str) -> str:
    # The OpenAPI document is published a moment after a CRD changes; allow for that.
    deadline = time.monotonic() + 30
    while True:
        result = sandbox.kubectl("explain", field, check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            assert result.returncode == 0, result.stderr
            return " ".join(str(result.stdout).split())
        time.sleep(0.5)


@pytest.mark.parametrize(
    ("field", "model", "names"),
    [
        ("trainingjob.spec", TrainingJobSpec, ["gpus_per_replica", "mig_profile", "elastic"]),
        ("servingjob.spec", ServingJobSpec, ["prefill", "decode", "slo", "autoscaling"]),
    ],
)
def test_explain_shows_descriptions(
    sandbox: Sandbox, field: str, model: type[TrainingJobSpec | ServingJobSpec], names: list[str]
) -> None:
    text = _explain(sandbox, field)
    assert (model.__doc__ or "").strip() in text
    for name in names:
        info = model.model_fields[name]
        assert f"{info.alias}" in text
        # kubectl re-wraps descriptions; compare with whitespace normalised.
        assert " ".join((info.description or "").split()) in text, name


def test_explain_reaches_nested_fields(sandbox: Sandbox) -> None:
    text = _explain(sandbox, "trainingjob.spec.runPolicy.backoffLimit")
    assert "Restarts of the whole gang" in text
    text = _explain(sandbox, "servingjob.spec.autoscaling.scaleDown")
    assert "stabilizationWindowSeconds" in text and "maxStep" in text


# -- invalid manifests ------------------------------------------------------------------------

CONTAINERS = [{"name": "main", "image": "registry.example/test:1"}]
TEMPLATE = {"spec": {"containers": CONTAINERS}}
TRAINING: dict[str, Any] = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "base"},
    "spec": {
        "replicas": 2,
        "gpusPerReplica": 1,
        "gpuTypes": [{"name": "H100-80GB", "throughput": 1.0}],
        "template": TEMPLATE,
    },
}
POOL = {"minReplicas": 1, "maxReplicas": 4, "gpusPerReplica": 1, "template": TEMPLATE}
SERVING: dict[str, Any] = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "ServingJob",
    "metadata": {"name": "base"},
    "spec": {
        "prefill": POOL,
        "decode": POOL,
        "slo": {"ttftP90Seconds": 0.5, "itlP90Seconds": 0.05},
        "autoscaling": {
            "prometheus": {"url": "http://prometheus:9090"},
            "capacity": {"prefillTokensPerSecond": 8000, "decodeBatchSize": 32},
        },
    },
}
DROP = object()


def _changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of `base` with dotted paths (list indices as numbers) set or dropped."""
    # Through JSON rather than deepcopy, so that parts shared in `base` (the two pools) become
    # independent and a change to one pool leaves the other alone.
    doc: dict[str, Any] = json.loads(json.dumps(base))
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is DROP:
            del node[int(last) if isinstance(node, list) else last]
        else:
            node[int(last) if isinstance(node, list) else last] = value
    return doc


def _tj(**changes: Any) -> dict[str, Any]:
    return _changed(TRAINING, {k.replace("__", "."): v for k, v in changes.items()})


def _sj(**changes: Any) -> dict[str, Any]:
    return _changed(SERVING, {k.replace("__", "."): v for k, v in changes.items()})


MIG_POOL = {**POOL, "migProfile": "1g.10gb"}
DISABLED = {"enabled": False}

# (id, manifest, the field the API server's error must name)
INVALID: list[Any] = [
    # wrong types
    pytest.param(_tj(spec__replicas="two"), "spec.replicas", id="replicas-string"),
    pytest.param(_tj(spec__gpusPerReplica=1.5), "spec.gpusPerReplica", id="gpus-fraction"),
    pytest.param(_tj(spec__preemptible="yes"), "spec.preemptible", id="preemptible-string"),
    pytest.param(_tj(spec__gpuTypes="H100-80GB"), "spec.gpuTypes", id="gpu-types-not-a-list"),
    pytest.param(_tj(spec__template="pod.yaml"), "spec.template", id="template-string"),
    # zero, negative and too-large counts
    pytest.param(_tj(spec__replicas=0), "spec.replicas", id="replicas-zero"),
    pytest.param(_tj(spec__replicas=-3), "spec.replicas", id="replicas-negative"),
    pytest.param(_tj(spec__replicas=5000), "spec.replicas", id="replicas-too-many"),
    pytest.param(_tj(spec__gpusPerReplica=0), "spec.gpusPerReplica", id="gpus-zero"),
    pytest.param(_tj(spec__gpusPerReplica=17), "spec.gpusPerReplica", id="gpus-too-many"),
    pytest.param(_tj(spec__runPolicy={"backoffLimit": -1}), "spec.runPolicy.backoffLimit",
                 id="backoff-negative"),
    pytest.param(_tj(spec__runPolicy={"activeDeadlineSeconds": 0}),
                 "spec.runPolicy.activeDeadlineSeconds", id="deadline-zero"),
    pytest.param(_tj(spec__gpuTypes__0__throughput=0), "spec.gpuTypes[0].throughput",
                 id="throughput-zero"),
    # replica bounds
    pytest.param(_tj(spec__replicas=DROP), "spec.replicas", id="replicas-missing"),
    pytest.param(_tj(spec__replicas=DROP, spec__elastic={"minReplicas": 8, "maxReplicas": 2}),
                 "spec.elastic.minReplicas", id="elastic-min-above-max"),
    pytest.param(_tj(spec__elastic={"minReplicas": 4, "maxReplicas": 8}), "spec.replicas",
                 id="replicas-outside-elastic-bounds"),
    pytest.param(_tj(spec__replicas=DROP, spec__elastic={"minReplicas": 0, "maxReplicas": 2}),
                 "spec.elastic.minReplicas", id="elastic-min-zero"),
    # GPUs or MIG
    pytest.param(_tj(spec__migProfile="3g.40gb"), "spec.migProfile", id="gpus-and-mig"),
    pytest.param(_tj(spec__gpusPerReplica=DROP), "spec.gpusPerReplica", id="neither-gpus-nor-mig"),
    pytest.param(_tj(spec__gpusPerReplica=DROP, spec__migProfile="5g.50gb"), "spec.migProfile",
                 id="unknown-mig-profile"),
    pytest.param(_tj(spec__gpusPerReplica=DROP, spec__migProfile="1g.10gb",
                     spec__topology="nvlinkDomain"), "spec.topology", id="mig-with-nvlink"),
    pytest.param(_tj(spec__gpuTypes=[{"name": "L4"}, {"name": "L4"}]), "spec.gpuTypes[1]",
                 id="duplicate-gpu-type"),
    pytest.param(_tj(spec__gpuTypes=[{"name": "H100 80GB"}]), "spec.gpuTypes[0].name",
                 id="gpu-type-bad-name"),
    pytest.param(_tj(spec__gpuTypes=[]), "spec.gpuTypes", id="gpu-types-empty"),
    # unknown fields (kubectl apply validates strictly by default)
    pytest.param(_tj(spec__gpuPerReplica=2), "spec.gpuPerReplica", id="unknown-field"),
    pytest.param(_tj(spec__runPolicy={"backofLimit": 2}), "spec.runPolicy.backofLimit",
                 id="unknown-nested-field"),
    pytest.param(_tj(spec__gpuTypes__0__speed=2), "spec.gpuTypes[0].speed",
                 id="unknown-field-in-list-item"),
    # the pod template
    pytest.param(_tj(spec__template=DROP), "spec.template", id="template-missing"),
    pytest.param(_tj(spec__template={"spec": {}}), "spec.template.spec.containers",
                 id="template-without-containers"),
    pytest.param(_tj(spec__template={"spec": {"containers": []}}),
                 "spec.template.spec.containers", id="template-empty-containers"),
    pytest.param(_tj(spec__template={"metadata": {}}), "spec.template.spec",
                 id="template-without-spec"),
    pytest.param(_tj(spec__template={"spec": {"containers": [{"name": "main"}]}}),
                 "spec.template.spec.containers[0].image", id="container-without-image"),
    # enums, priority, queue, energy
    pytest.param(_tj(spec__topology="sameRack"), "spec.topology", id="bad-topology"),
    pytest.param(_tj(spec__energy={"preference": "green"}), "spec.energy.preference",
                 id="bad-energy-preference"),
    pytest.param(_tj(spec__energy={"preference": "performance", "maxSlowdownPercent": 10}),
                 "spec.energy.maxSlowdownPercent", id="power-cap-with-performance"),
    pytest.param(_tj(spec__energy={"maxSlowdownPercent": 80}), "spec.energy.maxSlowdownPercent",
                 id="slowdown-too-large"),
    pytest.param(_tj(spec__priority=1001), "spec.priority", id="priority-too-high"),
    pytest.param(_tj(spec__priority=-1), "spec.priority", id="priority-negative"),
    pytest.param(_tj(spec__queue="Research Team"), "spec.queue", id="bad-queue-name"),
    pytest.param(_tj(metadata__name="x" * 51), "metadata.name", id="name-too-long"),
    # ServingJob pools
    pytest.param(_sj(spec__prefill=DROP, spec__decode=DROP), "spec.server", id="no-pools"),
    pytest.param(_sj(spec__server=POOL), "spec.server", id="server-and-disaggregated"),
    pytest.param(_sj(spec__decode=DROP), "spec.decode", id="prefill-without-decode"),
    pytest.param(_sj(spec__prefill=DROP), "spec.prefill", id="decode-without-prefill"),
    pytest.param(_sj(spec__decode__minReplicas=6), "spec.decode.minReplicas",
                 id="pool-min-above-max"),
    pytest.param(_sj(spec__prefill__minReplicas=0), "spec.prefill.minReplicas",
                 id="pool-min-zero"),
    pytest.param(_sj(spec__decode=MIG_POOL), "spec.decode.migProfile", id="pool-gpus-and-mig"),
    pytest.param(_sj(spec__decode__gpusPerReplica=DROP, spec__decode__migProfile="9g.90gb"),
                 "spec.decode.migProfile", id="pool-unknown-mig-profile"),
    pytest.param(_sj(spec__prefill__template=DROP), "spec.prefill.template",
                 id="pool-template-missing"),
    pytest.param(_sj(spec__prefill__replica=2), "spec.prefill.replica", id="pool-unknown-field"),
    # SLOs and autoscaling
    pytest.param(_sj(spec__slo__ttftP90Seconds=0), "spec.slo.ttftP90Seconds", id="ttft-zero"),
    pytest.param(_sj(spec__slo__itlP90Seconds=-0.1), "spec.slo.itlP90Seconds",
                 id="itl-negative"),
    pytest.param(_sj(spec__slo__itlP90Seconds=30), "spec.slo.itlP90Seconds", id="itl-too-large"),
    pytest.param(_sj(spec__slo__ttftP90Seconds="fast"), "spec.slo.ttftP90Seconds",
                 id="ttft-string"),
    pytest.param(_sj(spec__slo={"ttftP90Seconds": 1}), "spec.slo.itlP90Seconds",
                 id="slo-missing-itl"),
    pytest.param(_sj(spec__slo=DROP), "spec.slo", id="autoscaling-without-slo"),
    pytest.param(_sj(spec__autoscaling__prometheus=DROP), "spec.autoscaling.prometheus",
                 id="autoscaling-without-prometheus"),
    pytest.param(_sj(spec__autoscaling__capacity=DROP), "spec.autoscaling.capacity",
                 id="autoscaling-without-capacity"),
    pytest.param(_sj(spec__autoscaling__prometheus__url="prometheus:9090"),
                 "spec.autoscaling.prometheus.url", id="prometheus-url-without-scheme"),
    pytest.param(_sj(spec__autoscaling__capacity__decodeBatchSize=0),
                 "spec.autoscaling.capacity.decodeBatchSize", id="decode-batch-zero"),
    pytest.param(_sj(spec__autoscaling__scaleDown={"maxStep": 0}),
                 "spec.autoscaling.scaleDown.maxStep", id="scale-down-step-zero"),
    pytest.param(_sj(spec__autoscaling__scaleUp={"stabilizationWindowSeconds": -5}),
                 "spec.autoscaling.scaleUp.stabilizationWindowSeconds", id="window-negative"),
    pytest.param(_sj(spec__autoscaling__intervalSeconds=0), "spec.autoscaling.intervalSeconds",
                 id="interval-zero"),
    pytest.param(_sj(spec__port=70000), "spec.port", id="port-out-of-range"),
    pytest.param(_sj(spec__autoscaling__capacity__gpuType="A100-80GB"),
                 "spec.autoscaling.capacity.gpuType", id="capacity-type-pools-list-none"),
    pytest.param(_sj(spec__autoscaling__capacity__gpuType="A100-80GB",
                     spec__prefill__gpuTypes=[{"name": "A100-80GB"}],
                     spec__decode__gpuTypes=[{"name": "H100-80GB"}]),
                 "spec.autoscaling.capacity.gpuType", id="capacity-type-not-in-a-pool"),
    # checkpoints: exactly one mode, a grace period only (and always) on signal, bounds
    pytest.param(_tj(spec__checkpoint={}), "spec.checkpoint.intervalSeconds",
                 id="checkpoint-no-mode"),
    pytest.param(_tj(spec__checkpoint={"intervalSeconds": 600, "onSignal": True,
                                       "gracePeriodSeconds": 30}),
                 "spec.checkpoint.intervalSeconds", id="checkpoint-both-modes"),
    pytest.param(_tj(spec__checkpoint={"onSignal": True}), "spec.checkpoint.gracePeriodSeconds",
                 id="checkpoint-signal-no-grace"),
    pytest.param(_tj(spec__checkpoint={"intervalSeconds": 600, "gracePeriodSeconds": 30}),
                 "spec.checkpoint.gracePeriodSeconds", id="checkpoint-grace-without-signal"),
    pytest.param(_tj(spec__checkpoint={"intervalSeconds": 5}),
                 "spec.checkpoint.intervalSeconds", id="checkpoint-interval-too-short"),
    pytest.param(_tj(spec__checkpoint={"onSignal": True, "gracePeriodSeconds": 7200}),
                 "spec.checkpoint.gracePeriodSeconds", id="checkpoint-grace-too-long"),
    pytest.param(_tj(spec__checkpoint={"intervalSeconds": 600},
                     spec__elastic={"minReplicas": 1, "maxReplicas": 4}),
                 "spec.checkpoint", id="checkpoint-elastic"),
    # elastic scaling curves: one value per replica count, starting at 1, never decreasing
    pytest.param(_tj(spec__replicas=2,
                     spec__elastic={"minReplicas": 1, "maxReplicas": 3, "scaling": [1, 1.8]}),
                 "spec.elastic.scaling", id="scaling-too-short"),
    pytest.param(_tj(spec__replicas=2,
                     spec__elastic={"minReplicas": 1, "maxReplicas": 2, "scaling": [2, 3]}),
                 "spec.elastic.scaling", id="scaling-first-not-one"),
    pytest.param(_tj(spec__replicas=2, spec__elastic={"minReplicas": 1, "maxReplicas": 3,
                                                      "scaling": [1, 1.8, 1.5]}),
                 "spec.elastic.scaling", id="scaling-decreasing"),
    pytest.param(_tj(spec__replicas=2,
                     spec__elastic={"minReplicas": 1, "maxReplicas": 2, "scaling": [1, -1]}),
                 "spec.elastic.scaling[1]", id="scaling-negative"),
    # standby replicas
    pytest.param(_sj(spec__autoscaling__standby={"prefill": {"replicas": -1}}),
                 "spec.autoscaling.standby.prefill.replicas", id="standby-negative"),
    pytest.param(_sj(spec__autoscaling__standby={"prefill": {"replicas": 4}}),
                 "spec.autoscaling.standby.prefill.replicas", id="standby-above-max-minus-min"),
    pytest.param(_sj(spec__autoscaling__standby={"server": {"replicas": 1}}),
                 "spec.autoscaling.standby.server", id="standby-of-a-missing-pool"),
    pytest.param(_sj(spec__autoscaling__standby={"decode": {"wakeSeconds": 0}}),
                 "spec.autoscaling.standby.decode.wakeSeconds", id="standby-wake-zero"),
]  # fmt: skip


def test_the_invalid_table_is_large_and_its_bases_are_valid(
    sandbox: Sandbox, namespace: str
) -> None:
    assert len(INVALID) >= 22
    for base in (TRAINING, SERVING):
        doc = _changed(base, {"metadata.name": f"valid-{base['kind'].lower()}"})
        result = sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc))
        assert result.returncode == 0, result.stderr
    # Autoscaling switched off needs neither SLO nor Prometheus.
    quiet = _sj(metadata__name="quiet", spec__slo=DROP, spec__autoscaling=DISABLED)
    sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(quiet))
    # A capacity measured on a type every pool lists.
    types = [{"name": "A100-80GB", "throughput": 1.0}, {"name": "H100-80GB", "throughput": 3}]
    measured = _sj(
        metadata__name="measured",
        spec__prefill__gpuTypes=types,
        spec__decode__gpuTypes=types,
        spec__autoscaling__capacity__gpuType="A100-80GB",
    )
    ServingJobSpec.model_validate(measured["spec"])
    sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(measured))
    # Both checkpoint modes.
    for mode, checkpoint in (
        ("interval", {"intervalSeconds": 600}),
        ("signal", {"onSignal": True, "gracePeriodSeconds": 30}),
        ("signal-and-no-interval", {"onSignal": False, "intervalSeconds": 60}),
    ):
        saving = _tj(metadata__name=f"checkpoint-{mode}", spec__checkpoint=checkpoint)
        TrainingJobSpec.model_validate(saving["spec"])
        result = sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(saving))
        assert result.returncode == 0, result.stderr
    # An elastic job's scaling curve (flat steps allowed).
    curved = _tj(
        metadata__name="curved",
        spec__replicas=2,
        spec__elastic={"minReplicas": 1, "maxReplicas": 4, "scaling": [1, 1.9, 1.9, 2.5]},
    )
    TrainingJobSpec.model_validate(curved["spec"])
    result = sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(curved))
    assert result.returncode == 0, result.stderr
    # Standbys up to maxReplicas - minReplicas, with their wake time.
    rested = _sj(
        metadata__name="rested",
        spec__autoscaling__standby={"prefill": {"replicas": 3, "wakeSeconds": 20}},
    )
    ServingJobSpec.model_validate(rested["spec"])
    result = sandbox.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(rested))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("manifest", "field"), INVALID)
def test_invalid_manifest_is_rejected_naming_the_field(
    sandbox: Sandbox,
    namespace: str,
    request: pytest.FixtureRequest,
    manifest: dict[str, Any],
    field: str,
) -> None:
    doc = _changed(manifest, {})
    if doc["metadata"]["name"] == "base":
        doc["metadata"]["name"] = request.node.callspec.id
    result = sandbox.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert field in result.stderr, result.stderr
    # Nothing was stored.
    missing = sandbox.kubectl(
        "get", "-n", namespace, doc["kind"].lower(), doc["metadata"]["name"], check=False
    )
    assert missing.returncode != 0 and "NotFound" in missing.stderr
