"""The `bench/` scripts imported as modules for unit tests of their harness logic (they are
scripts, not a package, and import each other by file name, as when run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def bench_module(name: str) -> ModuleType:
    """`bench/<name>.py`, imported once as `bench_<name>`."""
    module_name = f"bench_{name}"
    if str(REPO / "bench") not in sys.path:
        sys.path.append(str(REPO / "bench"))
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, REPO / "bench" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
