"""`python -m bench.sweep`: the main job. With no arguments it runs the claims suite (results/claims.md,
results/plots/); with flags it runs a sweep (`--grid NAME=V1,V2 --workload NAME --seeds K ...`, the flags of
`kvsim sweep`) into results/<name>.parquet."""

from __future__ import annotations

import sys

from kvsim.cli import bench_main

if __name__ == "__main__":
    sys.exit(bench_main())
