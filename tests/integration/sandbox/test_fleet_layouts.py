"""`restore_mig_layouts` (run after every integration module) gives a partitioned node its
pool's layout back before it returns, against the sandbox's real MIG manager: a node still says
`success` for its old layout until the manager acts, so waiting on the state alone returned
early when the manager was slow (a loaded machine) and the next module found the GPUs still
partitioned. The test makes the manager slow: it is stopped (SIGSTOP) while the restore starts
and resumed three seconds later."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from gpufleet.model.contract import names
from gpufleet.model.migparted import MIG_APPLIED_ANNOTATION
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.fleet_layouts import restore_mig_layouts

pytestmark = pytest.mark.integration

NODE = "a100-1"  # a pool without MIG: 8 whole A100-80GB GPUs


def _node(sandbox: Sandbox) -> dict:
    return json.loads(sandbox.kubectl("get", "node", NODE, "-o", "json").stdout)


def test_a_partitioned_node_is_whole_again_once_restore_returns(sandbox: Sandbox) -> None:
    sandbox.kubectl("label", "--overwrite", "node", NODE, f"{names.MIG_CONFIG_LABEL}=all-3g.40gb")
    deadline = time.monotonic() + 30
    while True:
        meta = _node(sandbox)["metadata"]
        applied = (meta.get("annotations") or {}).get(MIG_APPLIED_ANNOTATION) == "all-3g.40gb"
        if applied and meta["labels"].get(names.MIG_STATE_LABEL) == "success":
            break
        assert time.monotonic() < deadline, "the MIG manager did not partition the node"
        time.sleep(0.2)
    assert _node(sandbox)["status"]["allocatable"]["nvidia.com/gpu"] == "0"

    pid = sandbox.component_pid("mig-manager")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(3.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        assert NODE in restore_mig_layouts(sandbox)
    finally:
        resume.join()
    allocatable = _node(sandbox)["status"]["allocatable"]  # at once: no wait of our own
    assert allocatable["nvidia.com/gpu"] == "8"
    assert "nvidia.com/mig-3g.40gb" not in allocatable
