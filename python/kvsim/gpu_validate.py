"""`python -m kvsim.gpu_validate`: the GPU validation (kvsim.gpu.validate; DESIGN.md §GPU validation)."""

from __future__ import annotations

import sys

from kvsim.gpu.validate import main

if __name__ == "__main__":
    sys.exit(main())
