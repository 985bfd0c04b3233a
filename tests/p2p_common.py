"""What tests/test_pcie_p2p.py and tests/test_adv46_nits.py share: a `kvsim sweep` over Llama-3-8B on RTX 4090s
at tensor parallel 2, a GeForce card whose collectives are staged through host memory unless `pcie_p2p` says
otherwise (the grid, the requests and the output are the caller's)."""

from __future__ import annotations

GEFORCE_TP2_SWEEP = [
    "sweep",
    "--base",
    "model=llama-3-8b",
    "--base",
    "gpu=rtx-4090",
    "--base",
    "tensor_parallel_size=2",
]
