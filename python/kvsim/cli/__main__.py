"""`python -m kvsim.cli`: the `kvsim` command."""

import sys

from kvsim.cli import main

sys.exit(main())
