"""`python -m kvsim ...`: the `kvsim` command (`kvsim.cli.main`)."""

from __future__ import annotations

import sys

from kvsim.cli import main

if __name__ == "__main__":
    sys.exit(main())
