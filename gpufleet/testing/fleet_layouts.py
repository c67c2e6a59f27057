"""The sandbox fleet's MIG layouts given back after a test changed them.

The integration tests share one sandbox per session, so a module whose jobs made gpufleet
repartition a MIG GPU would leave the next modules a fleet other than the one its file
describes, and their outcome would depend on the order the modules run in.
"""

from __future__ import annotations

import json

from gpufleet.model.contract import names
from gpufleet.model.fleet import load_fleet
from gpufleet.model.migparted import MIG_APPLIED_ANNOTATION
from gpufleet.sandbox.control_plane import Sandbox, default_fleet_path

# The config that turns MIG off: what a node of a pool without a `mig:` block goes back to once
# gpufleet partitioned one of its (MIG-capable) GPUs.
MIG_OFF = "all-disabled"


def restore_mig_layouts(sandbox: Sandbox) -> list[str]:
    """Label every node whose layout differs from its pool's with the pool's config again (MIG
    off for pools without one) and wait until the MIG manager applied it; returns the nodes
    changed."""
    changed: list[tuple[str, str]] = []
    nodes = json.loads(sandbox.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    for pool in load_fleet(default_fleet_path()).node_pools:
        for name in pool.node_names():
            current = labels.get(name, {}).get(names.MIG_CONFIG_LABEL)
            wanted = pool.mig.config if pool.mig is not None else MIG_OFF
            if pool.mig is None and current in (None, MIG_OFF):
                continue  # never partitioned, or already whole again
            if current != wanted:
                # The state goes to pending with the config: the node still says `success` for
                # the layout it has until the MIG manager acts, and waiting on that alone
                # returned before the layout was given back.
                config = f"{names.MIG_CONFIG_LABEL}={wanted}"
                state = f"{names.MIG_STATE_LABEL}=pending"
                sandbox.kubectl("label", "--overwrite", "node", name, config, state)
                changed.append((name, wanted))
    applied = "{.metadata.annotations." + MIG_APPLIED_ANNOTATION.replace(".", "\\.") + "}"
    done = "{.metadata.labels." + names.MIG_STATE_LABEL.replace(".", "\\.") + "}"
    for name, wanted in changed:
        sandbox.kubectl("wait", f"--for=jsonpath={applied}={wanted}", "node", name, "--timeout=60s")
        sandbox.kubectl("wait", f"--for=jsonpath={done}=success", "node", name, "--timeout=60s")
    return [name for name, _ in changed]
