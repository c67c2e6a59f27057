"""The processes the tests start run the code of the checkout the tests are in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_started_process_imports_this_checkout() -> None:
    probe = "import gpufleet, os; print(os.path.dirname(gpufleet.__file__))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(REPO_ROOT / "gpufleet")
