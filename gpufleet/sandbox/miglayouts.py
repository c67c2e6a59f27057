"""The MIG layouts file the sandbox ships and installs for its fake MIG manager."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml


def load_default_configs() -> dict[str, Any]:
    """`mig-layouts.yaml` (mig-parted format), parsed."""
    text = resources.files("gpufleet.sandbox").joinpath("mig-layouts.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc
