"""kvsim: a fast, faithful simulator of paged KV-cache memory management for LLM serving.

`kvsim.BlockPool` and `kvsim.KVCacheManager` come from the Rust core (`kvsim._core`); `kvsim.reference`
holds their pure-Python twins, the executable spec both backends are tested against.
"""

from kvsim import reference, workloads
from kvsim._core import BlockPool, KVCacheManager, block_keys
from kvsim.analysis.plan import PlanResult, plan
from kvsim.engine.cluster import ClusterResult, simulate_cluster
from kvsim.engine.simulate import SimResult, simulate
from kvsim.engine.streaming import simulate_stream
from kvsim.errors import (
    InternalError,
    InvalidArgumentError,
    InvalidOperationError,
    KvsimError,
    TraceFormatError,
)
from kvsim.model import gpus, models, sizing
from kvsim.model.config import SimConfig
from kvsim.model.sizing import pool_blocks
from kvsim.workloads import Workload

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`kvsim.lab` (the lab's Python side: `kvsim.lab.snapshot(...)`) is imported on first use, so that
    `import kvsim` stays light; any other unknown name is Python's usual AttributeError."""
    if name == "lab":
        import importlib

        return importlib.import_module("kvsim.lab")
    raise AttributeError(f"module 'kvsim' has no attribute {name!r}")


__all__ = [
    "BlockPool",
    "ClusterResult",
    "InternalError",
    "InvalidArgumentError",
    "InvalidOperationError",
    "KVCacheManager",
    "KvsimError",
    "PlanResult",
    "SimConfig",
    "SimResult",
    "TraceFormatError",
    "Workload",
    "block_keys",
    "gpus",
    "models",
    "plan",
    "pool_blocks",
    "reference",
    "simulate",
    "simulate_cluster",
    "simulate_stream",
    "sizing",
    "workloads",
]
