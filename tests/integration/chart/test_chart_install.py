"""The Helm chart installed into the sandbox with the real helm, and its RBAC proven.

Aspects under test, in order (one install shared by the module; the last test uninstalls):
- `helm install` creates every object of the chart and the Deployment's pods (kwok's fake
  pods) become Ready; the time it takes is printed; the default GPUQueue, deleted from the
  sandbox first, is created by the chart (a cluster that lacks it gets it);
- the ServiceAccount's effective permissions (`kubectl auth can-i --list`) are exactly the list
  kept here, cluster-wide and in the release's namespace: a widened role is a visible diff;
- the RBAC proof: `gpufleet operator`, run with the Deployment's own arguments and settings
  file under a token the TokenRequest API minted for the chart's ServiceAccount, goes through
  the TrainingJob lifecycle, MIG repartitioning, preemption and ServingJob scaling with no 403;
- removing one rule from the ClusterRole makes the scenario that needs it fail, and the
  operator's log names the missing permission (pods/binding, nodes patch, pods/eviction,
  deployments/scale);
- `helm upgrade` that changes the placement preset changes the settings the operator reads and
  rolls the Deployment's pods; the operator started from the new settings places by them;
- `helm uninstall` leaves no namespaced object of the chart behind and keeps the CRDs (and with
  them every job): a documented choice, helm never deletes what `crds/` installed; the GPUQueue
  admission policy, its binding and the default queue are kept the same way (installed only
  when missing: the sandbox made them with the CRDs here).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from gpufleet.model.gpuqueue_policy import DEFAULT_QUEUE, default_queue
from gpufleet.sandbox.binaries import ensure_binaries
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.mig_request import CONFIG_PREFIX
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "helm" / "gpufleet"
NAMESPACE = "gpufleet-system"  # the sandbox's; it holds the MIG manager's ConfigMap
RELEASE = "gpufleet"
SUBJECT = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
# The sandbox has only GPU nodes, all tainted as the GPU Operator taints them: the operator's
# own pods must tolerate that to be placed by kube-scheduler at all.
VALUES = [
    "--set-json",
    'tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]',
    "--set",
    "leaderElection.leaseDurationSeconds=3",
]

# `kubectl auth can-i --list` for the chart's ServiceAccount: (resource, verbs), with
# resource names where the rule has them. Outside the release's namespace the Roles add nothing.
CRDS = ("trainingjobs.gpufleet.io", "servingjobs.gpufleet.io", "gpuqueues.gpufleet.io")
CLUSTER_WIDE = {
    ("customresourcedefinitions.apiextensions.k8s.io", "", "list watch"),
    ("deployments.apps", "", "create delete list patch watch"),
    ("deployments.apps/scale", "", "patch"),
    ("events", "", "create"),
    ("gpuqueues.gpufleet.io", "", "list watch"),
    ("gpuqueues.gpufleet.io/status", "", "patch"),
    ("namespaces", "", "list watch"),
    ("nodes", "", "list patch watch"),
    ("poddisruptionbudgets.policy", "", "list"),
    ("pods", "", "create delete deletecollection list patch watch"),
    ("pods/binding", "", "create"),
    ("pods/eviction", "", "create"),
    ("pods/status", "", "patch"),
    ("runtimeclasses.node.k8s.io", "", "get"),
    ("servingjobs.gpufleet.io", "", "get list patch watch"),
    ("servingjobs.gpufleet.io/status", "", "patch"),
    ("services", "", "create delete"),
    ("trainingjobs.gpufleet.io", "", "delete get list patch watch"),
    ("trainingjobs.gpufleet.io/status", "", "patch"),
    # Every authenticated user may ask what it may do.
    ("selfsubjectaccessreviews.authorization.k8s.io", "", "create"),
    ("selfsubjectreviews.authentication.k8s.io", "", "create"),
    ("selfsubjectrulesreviews.authorization.k8s.io", "", "create"),
}
IN_RELEASE_NAMESPACE = CLUSTER_WIDE | {
    ("configmaps", "default-mig-parted-config", "get list update watch"),
    ("configmaps", "gpufleet-policy", "get list watch"),
    # The scheduler's workload estimate: read and replaced by name, created the first time.
    ("configmaps", "gpufleet-workload-estimate", "get update"),
    ("configmaps", "", "create"),
    ("leases.coordination.k8s.io", "gpufleet-operator", "get update"),
}


def helm(sandbox: Sandbox, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = ensure_binaries(lambda _: None, ("helm",)).helm
    result = subprocess.run(
        [str(binary), "--kubeconfig", str(sandbox.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr}")
    return result


def rendered(sandbox: Sandbox, *extra: str) -> list[dict[str, Any]]:
    out = helm(sandbox, "template", RELEASE, str(CHART), "-n", NAMESPACE, *VALUES, *extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _deployment_ready(kube: Kube) -> bool:
    apps = client.AppsV1Api(kube.core.api_client)
    try:
        dep = apps.read_namespaced_deployment(RELEASE, NAMESPACE)
    except ApiException:
        return False
    status = dep.status
    return bool(
        status.observed_generation == dep.metadata.generation
        and status.updated_replicas == dep.spec.replicas
        and status.ready_replicas == dep.spec.replicas
    )


@pytest.fixture(scope="module")
def release(sandbox: Sandbox, kube: Kube) -> Iterator[float]:
    """The chart installed (CRDs included: helm takes them over from the sandbox, which
    applied the same files); yields the seconds from `helm install` to every pod Ready."""
    # Operators of earlier test modules left their Lease; the chart owns that object.
    sandbox.kubectl("delete", "lease", "gpufleet-operator", "-n", NAMESPACE, "--ignore-not-found")
    # The sandbox made the default queue with the CRDs; the chart must make it where it is
    # missing (its template creates it only then).
    sandbox.kubectl("delete", "gq", DEFAULT_QUEUE, "--ignore-not-found")
    try:
        started = time.monotonic()
        helm(sandbox, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--force-conflicts", *VALUES)
        wait_for(lambda: _deployment_ready(kube), "the operator's pods Ready", 120)
        elapsed = time.monotonic() - started
        print(f"[chart] install to ready: {elapsed:.1f}s")
        yield elapsed
        if helm(sandbox, "status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
            helm(sandbox, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    finally:
        # Later modules' jobs use it (kept by helm's uninstall; made again if the install failed).
        if sandbox.kubectl("get", "gq", DEFAULT_QUEUE, check=False).returncode != 0:
            kube.custom.create_cluster_custom_object(
                "gpufleet.io", "v1alpha1", "gpuqueues", default_queue()
            )


def test_install_creates_every_object(sandbox: Sandbox, release: float) -> None:
    for doc in rendered(sandbox):
        kind, name = doc["kind"], doc["metadata"]["name"]
        args = ["get", kind, name, "-o", "json"]
        if doc["metadata"].get("namespace"):
            args += ["-n", doc["metadata"]["namespace"]]
        found = json.loads(sandbox.kubectl(*args).stdout)
        if _kept(doc):
            continue  # installed with the CRDs: here the sandbox had made them already
        assert found["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, (kind, name)
    for crd in CRDS:
        sandbox.kubectl("get", "crd", crd)
    assert release < 120


def test_the_default_queue_is_created_where_missing(sandbox: Sandbox, release: float) -> None:
    found = json.loads(sandbox.kubectl("get", "gq", DEFAULT_QUEUE, "-o", "json").stdout)
    meta = found["metadata"]
    assert meta["annotations"]["meta.helm.sh/release-name"] == RELEASE  # helm made it
    assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
    assert found["spec"] == {"weight": 1.0}  # no quota: jobs naming no queue only borrow


def _kept(doc: dict[str, Any]) -> bool:
    """Whether helm installs `doc` only when missing and never deletes it (as it treats the
    CRDs): the GPUQueue admission policy, its binding and the default queue."""
    annotations = doc["metadata"].get("annotations") or {}
    return annotations.get("helm.sh/resource-policy") == "keep"


def _can_i(sandbox: Sandbox, namespace: str) -> set[tuple[str, str, str]]:
    out = sandbox.kubectl("auth", "can-i", "--list", f"--as={SUBJECT}", "-n", namespace).stdout
    rows = set()
    for line in out.splitlines()[1:]:
        resource, rest = line[:49].strip(), line[49:]
        if not resource:  # non-resource URLs (/healthz, /api, ...): the default discovery role
            continue
        parts = rest.split("[")
        names_, verbs = parts[2].rstrip("] ").strip(), parts[3].rstrip("] ").strip()
        rows.add((resource, names_, " ".join(sorted(verbs.split()))))
    return rows


def test_permissions_are_exactly_the_expected_list(sandbox: Sandbox, release: float) -> None:
    assert _can_i(sandbox, "default") == CLUSTER_WIDE
    assert _can_i(sandbox, NAMESPACE) == IN_RELEASE_NAMESPACE


# -- the RBAC proof ------------------------------------------------------------------------------


def _service_account_kubeconfig(sandbox: Sandbox, kube: Kube, path: Path) -> Path:
    """A kubeconfig whose user is a token the TokenRequest API minted for the chart's SA."""
    request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
    token = kube.core.create_namespaced_service_account_token(RELEASE, NAMESPACE, request)
    admin = yaml.safe_load(sandbox.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sandbox", "cluster": cluster}],
                "users": [{"name": "gpufleet", "user": {"token": token.status.token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "sandbox", "user": "gpufleet"}}],
                "current-context": "sa",
            }
        )
    )
    return path


def _operator_args(sandbox: Sandbox, config_dir: Path, *extra: str) -> list[str]:
    """The Deployment's container arguments, with its ConfigMap written where they point."""
    docs = {d["kind"]: d for d in rendered(sandbox, *extra)}
    [container] = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "config"]
    config_map = json.loads(
        sandbox.kubectl(
            "get", "configmap", f"{RELEASE}-config", "-n", NAMESPACE, "-o", "json"
        ).stdout
    )
    for key, text in config_map["data"].items():
        (config_dir / key).write_text(text)
    args = [a.replace(mount["mountPath"], str(config_dir)) for a in container["args"]]
    assert args[0] == "operator"
    # The pod's port is its own; on this machine the metrics stay on loopback.
    return [*args[1:], "--metrics-address=127.0.0.1"]


@pytest.fixture(scope="module")
def as_service_account(
    sandbox: Sandbox, kube: Kube, release: float, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`gpufleet operator` as the chart's ServiceAccount (stopped by PID at the end)."""
    work = tmp_path_factory.mktemp("chart-operator")
    kubeconfig = _service_account_kubeconfig(sandbox, kube, work / "sa.kubeconfig")
    (work / "config").mkdir()
    args = _operator_args(sandbox, work / "config")
    with OperatorProcess(kubeconfig, work / "operator.log", kube.coordination, *args) as proc:
        yield proc


# A log line's time stamp ends in milliseconds (",403" is a time, not a refusal).
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def _forbidden(proc: OperatorProcess) -> list[str]:
    """The log lines about a refused request (JSON-escaped quotes unescaped)."""
    return [
        line.replace('\\"', '"')
        for line in proc.log.read_text(errors="replace").splitlines()
        if re.search(r"(?<![.,:=])\b403\b", _STAMP.sub("", line)) or "forbidden" in line.lower()
    ]


@pytest.fixture
def scenario_ns(kube: Kube, as_service_account: OperatorProcess) -> Iterator[str]:
    name = f"chart-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(name)
    yield name
    # ServingJobs first: their Deployments would recreate the pods the clean-up waits for.
    kube.custom.delete_collection_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", name, "servingjobs"
    )
    wait_for(
        lambda: not client.AppsV1Api(kube.core.api_client).list_namespaced_deployment(name).items,
        "the ServingJob's Deployments deleted",
        120,
    )
    kube.clean_namespace(name, timeout=120)


def _placed(kube: Kube, ns: str, job: str) -> bool:
    return kube.phase(ns, job) == "Running"


# How a scenario waits for each of its steps: `wait_for`'s signature.
Wait = Callable[[Callable[[], object], str, float], object]


def lifecycle(kube: Kube, ns: str, timeout: float = 60, wait: Wait = wait_for) -> None:
    """A TrainingJob runs (pods, Service, bindings, status, events) and is deleted."""
    kube.create_job(ns, training_job("life", 2, gpus=1, gpu_type="T4"))
    wait(lambda: _placed(kube, ns, "life"), "the TrainingJob Running", timeout)
    assert kube.core.read_namespaced_service("life", ns).spec.cluster_ip == "None"
    assert {e["reason"] for e in kube.events(ns, "life")}
    kube.delete_job(ns, "life")
    wait(lambda: not kube.pods(ns), "the job's pods deleted with it", timeout)


def mig(
    kube: Kube, ns: str, timeout: float = 60, wait: Wait = wait_for, profile: str = "1g.20gb"
) -> None:
    """A MIG job whose profile no A100 GPU is cut for (no other test asks for it): the
    scheduler repartitions one through the MIG manager's ConfigMap and node labels."""
    kube.create_job(ns, training_job("slice", 1, gpu_type="A100-80GB", mig_profile=profile))
    wait(lambda: _placed(kube, ns, "slice"), "the MIG job Running", timeout)
    [pod] = kube.pods(ns, "gpufleet.io/gang=slice")
    node = kube.core.read_node(pod["spec"]["nodeName"])
    assert node.metadata.labels[names.MIG_CONFIG_LABEL].startswith(CONFIG_PREFIX)


def preemption(kube: Kube, ns: str, timeout: float = 60, wait: Wait = wait_for) -> None:
    """A high-priority job evicts a low-priority one that fills the L4 pool."""
    kube.create_job(ns, training_job("low", 4, gpus=4, gpu_type="L4", priority=0))
    wait(lambda: _placed(kube, ns, "low"), "the low-priority job Running", timeout)
    kube.create_job(ns, training_job("high", 1, gpus=4, gpu_type="L4", priority=5))
    wait(lambda: _placed(kube, ns, "high"), "the high-priority job Running", timeout)


def serving_scale(kube: Kube, ns: str, timeout: float = 60, wait: Wait = wait_for) -> None:
    """A ServingJob's pool follows minReplicas (Deployment created, then scaled)."""
    custom, apps = kube.custom, client.AppsV1Api(kube.core.api_client)
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ServingJob",
        "metadata": {"name": "llm"},
        "spec": {
            "model": "llama",
            "server": {
                "minReplicas": 1,
                "maxReplicas": 4,
                "gpusPerReplica": 1,
                "gpuTypes": [{"name": "T4"}],
                "template": {
                    "spec": {"containers": [{"name": "v", "image": "registry.example/v:1"}]}
                },
            },
        },
    }
    custom.create_namespaced_custom_object("gpufleet.io", "v1alpha1", ns, "servingjobs", body)

    def replicas() -> int:
        try:
            return int(apps.read_namespaced_deployment("llm-server", ns).spec.replicas or 0)
        except ApiException:
            return -1

    wait(lambda: replicas() == 1, "the pool's Deployment at 1", timeout)
    patch = {"spec": {"server": {"minReplicas": 2}}}
    custom.patch_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", ns, "servingjobs", "llm", patch
    )
    wait(lambda: replicas() == 2, "the pool scaled to 2", timeout)


PROOF = ("lifecycle", "mig", "preemption", "serving-scale")
SCENARIOS: dict[str, Callable[..., None]] = {
    "lifecycle": lifecycle,
    "mig": mig,
    # A profile of its own, so that the repartition the proof made does not serve it.
    "mig-again": functools.partial(mig, profile="4g.40gb"),
    "preemption": preemption,
    "serving-scale": serving_scale,
}


def test_every_scenario_runs_as_the_service_account_without_a_403(
    kube: Kube, scenario_ns: str, as_service_account: OperatorProcess
) -> None:
    base = f"http://127.0.0.1:{as_service_account.metrics_port}"
    for path, answer in (("/healthz", "ok"), ("/readyz", "leading")):
        with urllib.request.urlopen(base + path, timeout=5) as response:
            assert (response.status, response.read().decode().strip()) == (200, answer)
    started = time.monotonic()
    for name, scenario in SCENARIOS.items():
        if name in PROOF:
            scenario(kube, scenario_ns)
        assert _forbidden(as_service_account) == [], name
    print(f"[chart] RBAC-proof scenarios: {time.monotonic() - started:.1f}s")


# After the operator's log names the refused permission, the step a scenario waits for must
# still not have happened this long after: several operator ticks (1 s) and scheduler resyncs
# (2 s), and 4x the ~2 s a permitted scenario takes in all.
REFUSED_WINDOW_S = 8.0


def _refused_then_still(proc: OperatorProcess, wanted: str) -> Wait:
    """A scenario's wait under a narrowed role: a step may pass as usual (those before the one
    the role refuses); a step not passed when the operator's log names the refused permission
    fails once `REFUSED_WINDOW_S` more have gone by without it. With no such line by `timeout`
    it times out, which the test does not accept."""

    before = len(_forbidden(proc))  # lines of earlier tests do not count

    def wait(check: Callable[[], object], what: str, timeout: float) -> object:
        deadline = time.monotonic() + timeout
        refused_at: float | None = None
        while True:
            if last := check():
                return last
            now = time.monotonic()
            if refused_at is None and any(wanted in line for line in _forbidden(proc)[before:]):
                refused_at = now
            if refused_at is not None and now > refused_at + REFUSED_WINDOW_S:
                raise AssertionError(
                    f"{what}: still not done {REFUSED_WINDOW_S:.0f}s after the operator's log "
                    f"line: {wanted}"
                )
            if now > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.25)

    return wait


# (scenario, ClusterRole rule to drop: resource and verb)
REMOVALS = [
    ("lifecycle", "pods/binding", "create"),
    ("mig-again", "nodes", "patch"),
    ("preemption", "pods/eviction", "create"),
    ("serving-scale", "deployments/scale", "patch"),
]


@pytest.mark.parametrize(("scenario", "resource", "verb"), REMOVALS, ids=[r[0] for r in REMOVALS])
def test_a_missing_rule_fails_its_scenario_naming_the_permission(
    sandbox: Sandbox,
    kube: Kube,
    scenario_ns: str,
    as_service_account: OperatorProcess,
    scenario: str,
    resource: str,
    verb: str,
) -> None:
    rbac = client.RbacAuthorizationV1Api(kube.core.api_client)
    raw: Any = rbac.read_cluster_role(RELEASE, _preload_content=False)
    original: list[dict[str, Any]] = json.loads(raw.data)["rules"]
    narrowed = []
    for rule in original:
        if resource not in rule["resources"] or verb not in rule["verbs"]:
            narrowed.append(rule)
            continue
        if others := [r for r in rule["resources"] if r != resource]:
            narrowed.append({**rule, "resources": others})
        if verbs := [v for v in rule["verbs"] if v != verb]:
            narrowed.append({**rule, "resources": [resource], "verbs": verbs})
    assert narrowed != original
    rbac.patch_cluster_role(RELEASE, {"rules": narrowed})
    kind, _, sub = resource.partition("/")
    wanted = f'cannot {verb} resource "{kind}/{sub}"' if sub else f'cannot {verb} resource "{kind}"'
    try:
        wait = _refused_then_still(as_service_account, wanted)
        with pytest.raises(AssertionError, match="still not done .*: " + re.escape(wanted)):
            SCENARIOS[scenario](kube, scenario_ns, timeout=45, wait=wait)
    finally:
        rbac.patch_cluster_role(RELEASE, {"rules": original})


# -- upgrade and uninstall -----------------------------------------------------------------------


def test_upgrade_changes_the_preset_the_operator_places_by(
    sandbox: Sandbox,
    kube: Kube,
    release: float,
    as_service_account: OperatorProcess,
    tmp_path: Path,
) -> None:
    ns = f"chart-up-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(ns)
    # Under the installed preset (balanced) a balanced job on H100 (a type with a settable
    # power-cap range; T4 and L4 have none) runs uncapped.
    job = training_job("capped", 1, gpus=1, gpu_type="H100-80GB")
    kube.create_job(ns, job)
    wait_for(lambda: _placed(kube, ns, "capped"), "the job Running", 60)
    assert names.POWER_CAP not in kube.pods(ns)[0]["metadata"]["annotations"]
    kube.clean_namespace(ns, timeout=120)
    as_service_account.stop()  # the process of the old settings gives up the Lease
    apps = client.AppsV1Api(kube.core.api_client)

    def checksum() -> str:
        dep = apps.read_namespaced_deployment(RELEASE, NAMESPACE)
        return str(dep.spec.template.metadata.annotations["checksum/config"])

    before = checksum()
    helm(
        sandbox, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *VALUES,
        "--set", "config.placement.preset=energy",
    )  # fmt: skip
    config_map = kube.core.read_namespaced_config_map(f"{RELEASE}-config", NAMESPACE)
    assert yaml.safe_load(config_map.data["config.yaml"])["placement"]["preset"] == "energy"
    assert checksum() != before  # the pods roll: settings are read at start
    wait_for(lambda: _deployment_ready(kube), "the rolled pods Ready", 120)
    # kwok runs no containers: start the operator as the rolled pod would, from the new
    # ConfigMap, and see it place by the energy preset (every gang power-capped).
    (tmp_path / "config").mkdir()
    args = _operator_args(sandbox, tmp_path / "config", "--set", "config.placement.preset=energy")
    kubeconfig = _service_account_kubeconfig(sandbox, kube, tmp_path / "sa.kubeconfig")
    ns = f"chart-up-{uuid.uuid4().hex[:6]}"  # the first one may still be terminating
    kube.create_namespace(ns)
    try:
        with OperatorProcess(kubeconfig, tmp_path / "operator.log", kube.coordination, *args):
            kube.create_job(ns, job)
            wait_for(lambda: _placed(kube, ns, "capped"), "the job Running", 60)
            [pod] = kube.pods(ns)
            assert names.POWER_CAP in pod["metadata"]["annotations"]
            kube.clean_namespace(ns, timeout=120)
    finally:
        helm(sandbox, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *VALUES)


def test_uninstall_removes_every_namespaced_object_and_keeps_the_crds(
    sandbox: Sandbox, kube: Kube, release: float
) -> None:
    objects = rendered(sandbox)
    helm(sandbox, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    left = sandbox.kubectl(
        "get", "all,configmap,serviceaccount,role,rolebinding,poddisruptionbudget,lease",
        "-n", NAMESPACE, "-l", selector, "-o", "name",
    ).stdout.split()  # fmt: skip
    assert left == []
    for doc in objects:
        args = ["get", doc["kind"], doc["metadata"]["name"]]
        if doc["metadata"].get("namespace"):
            args += ["-n", doc["metadata"]["namespace"]]
        if _kept(doc):
            sandbox.kubectl(*args)  # kept, like the CRDs: the queues' rules and default queue
            continue
        gone = sandbox.kubectl(*args, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, doc["kind"]
    for crd in CRDS:
        sandbox.kubectl("get", "crd", crd)  # kept: deleting them would delete every job
