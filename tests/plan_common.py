"""What tests/test_plan.py and tests/test_plan_engine.py share: the paper's OPT-13B setup and a
ShareGPT-like synthetic workload, and the SLO that a fake probe's threshold reads."""

from __future__ import annotations

import kvsim

BASE = {"model": "opt-13b", "gpu": "a100-40gb", "kv_cache_bytes": 12 * 2**30, "max_model_len": 2048}
ONE = {"ttft_p99": 1.0}


def workload(n: int = 60, rate: float = 2.0, seed: int = 0) -> kvsim.Workload:
    return kvsim.workloads.synthetic(
        n, arrival_rate=rate, seed=seed, lengths="sharegpt-paper", max_model_len=2048
    )
