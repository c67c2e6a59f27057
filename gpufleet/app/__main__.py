"""`python -m gpufleet.app`: the `gpufleet operator` command, as the sandbox and tests start it."""

from __future__ import annotations

import sys

from gpufleet.app.command import main

if __name__ == "__main__":
    sys.exit(main())
