"""Workloads: the `Workload` request table, synthetic generators and loaders for real serving traces."""

from kvsim.workloads.generators import synthetic, traces_dir
from kvsim.workloads.table import Workload
from kvsim.workloads.trace_chunks import iter_azure, iter_mooncake, iter_table
from kvsim.workloads.trace_table import load_table
from kvsim.workloads.traces import load_azure, load_mooncake

__all__ = [
    "Workload",
    "iter_azure",
    "iter_mooncake",
    "iter_table",
    "load_azure",
    "load_mooncake",
    "load_table",
    "synthetic",
    "traces_dir",
]
