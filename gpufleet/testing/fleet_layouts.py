"""The sandbox fleet's MIG layouts given back after a test changed them.

The integration tests share one sandbox per session, so a module whose jobs made gpufleet
repartition a MIG GPU would leave the next modules a fleet other than the one its file
describes, and their outcome would depend on the order the modules run in.
"""

from __future__ import annotations

import json

from gpufleet.model.contract import names
from gpufleet.model.fleet import load_fleet
from gpufleet.sandbox.control_plane import Sandbox, default_fleet_path


def restore_mig_layouts(sandbox: Sandbox) -> list[str]:
    """Label every MIG node whose layout differs from its pool's with the pool's config again
    and wait until the MIG manager applied it; returns the nodes changed."""
    changed = []
    for pool in load_fleet(default_fleet_path()).node_pools:
        if pool.mig is None:
            continue
        for name in pool.node_names():
            node = json.loads(sandbox.kubectl("get", "node", name, "-o", "json").stdout)
            if node["metadata"]["labels"].get(names.MIG_CONFIG_LABEL) != pool.mig.config:
                label = f"{names.MIG_CONFIG_LABEL}={pool.mig.config}"
                sandbox.kubectl("label", "--overwrite", "node", name, label)
                changed.append(name)
    for name in changed:
        state = "jsonpath={.metadata.labels.nvidia\\.com/mig\\.config\\.state}=success"
        sandbox.kubectl("wait", f"--for={state}", "node", name, "--timeout=60s")
    return changed
