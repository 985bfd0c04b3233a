"""The hybrid-attention capacity claim (DESIGN.md §Hybrid attention, §Claims): how many requests of a given
context length a pool serves at once when sliding-window and state layers are accounted as vLLM's hybrid
KV-cache manager accounts them, against counting every layer as full attention, for a sliding-window model
(gpt-oss-120b) and a hybrid-state model (Qwen3-Next-80B-A3B), 4K to 128K tokens.

The figure is vLLM's start-up line "Maximum concurrency for L tokens per request": the pool's blocks over
the blocks one request of L tokens holds in every group (`KVLayout.max_concurrency`). vLLM 0.33.0's own
values for the same pools were recorded by `python scripts/vllm_hybrid_golden.py tests/data/vllm_hybrid
capacity` (its `get_kv_cache_groups`, `get_kv_cache_config_from_groups` and
`get_max_concurrency_for_kv_cache_config`, run on CPU) and are quoted here as the claim's source;
`tests/test_claims_hybrid.py` checks the quotes against that file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.claims_model import CONFIRMED, DIFFERS, GIB, Claim

CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072)
KV_BYTES = 40 * GIB  # one GPU's KV cache (vLLM's --kv-cache-memory-bytes 40GiB)
BLOCK_SIZE = 16
MAX_NUM_BATCHED_TOKENS = 8192
MODELS = ("gpt-oss-120b", "qwen3-next-80b-a3b")
VLLM = "vLLM 0.33.0 (get_max_concurrency_for_kv_cache_config on a Hopper GPU's layout, recorded on CPU)"
# The GPU architecture the layouts are formed for: Hopper (compute capability 9.0), where the gated delta
# net's prefill runs on FlashInfer's kernel (DESIGN.md §Hybrid attention).
ARCH = "sm_90"
# vLLM 0.33.0's "Maximum concurrency" at each context of `CONTEXTS`, 40 GiB of bf16 KV cache, block 16,
# max_num_batched_tokens 8192, asynchronous scheduling, prefix caching on, the specs as vLLM forms them on a
# Hopper GPU (tests/data/vllm_hybrid/capacity.json): (its num_blocks, the figures).
VLLM_CONCURRENCY: dict[str, tuple[int, tuple[float, ...]]] = {
    "gpt-oss-120b": (
        72817,
        (
            141.94346978557505,
            71.0409756097561,
            35.5378233284529,
            23.634209672184355,
            14.197114447260674,
            7.893441734417344,
        ),
    ),
    "qwen3-next-80b-a3b": (
        3034,
        (
            178.47058823529412,
            126.41666666666667,
            79.84210526315789,
            45.96969696969697,
            24.666666666666668,
            12.80168776371308,
        ),
    ),
}


def model(name: str) -> Any:
    """The claim's model: a catalogue preset (Qwen3-Next-80B-A3B's from its published config fields,
    `kvsim.model.catalogue`)."""
    from kvsim.model.models import get

    return get(name)


def capacity_rows() -> pl.DataFrame:
    """Per model and context length: the hybrid accounting's concurrency (kvsim's, as vLLM's start-up
    line states it), every layer counted as full attention (what kvsim did before it knew layers), the
    ratio, and vLLM's recorded figure."""
    import dataclasses

    from kvsim.model.layer_types import in_flight_batches
    from kvsim.model.layers import kv_layout

    rows: list[dict[str, Any]] = []
    for name in MODELS:
        m = model(name)
        full = dataclasses.replace(
            m, layers=(), num_layers=sum(lay.kind not in ("shared", "none") for lay in m.layer_list())
        )
        vllm_blocks, vllm = VLLM_CONCURRENCY[name]
        for i, ctx in enumerate(CONTEXTS):
            hybrid = kv_layout(m, BLOCK_SIZE, max_model_len=ctx, gpu_arch=ARCH)
            naive = kv_layout(full, BLOCK_SIZE, max_model_len=ctx, gpu_arch=ARCH)
            in_flight = in_flight_batches(None) * MAX_NUM_BATCHED_TOKENS  # (vLLM's default deployment)
            blocks_h, blocks_n = KV_BYTES // hybrid.bytes_per_block, KV_BYTES // naive.bytes_per_block
            ours = hybrid.max_concurrency(blocks_h, ctx, in_flight)
            naive_c = naive.max_concurrency(blocks_n, ctx, in_flight)
            rows.append(
                {
                    "model": name,
                    "context": ctx,
                    "groups": hybrid.describe(),
                    "num_blocks": blocks_h,
                    "max_concurrency": ours,
                    "max_concurrency_all_full": naive_c,
                    "ratio": ours / naive_c,
                    "vllm_num_blocks": vllm_blocks,
                    "vllm_max_concurrency": vllm[i],
                }
            )
    return pl.DataFrame(rows)


def hybrid_claims(results_dir: Path | None = None) -> list[Claim]:
    """One claim per model: kvsim's concurrency equals vLLM's at every context, and how much counting
    every layer as full attention understates it at 32K and 128K. Writes the rows to
    `<results_dir>/claims/hybrid-capacity.parquet` when given a folder (the plot reads them)."""
    frame = capacity_rows()
    if results_dir is not None:
        (results_dir / "claims").mkdir(parents=True, exist_ok=True)
        frame.write_parquet(results_dir / "claims" / "hybrid-capacity.parquet")
    out = []
    cmd = 'python -c "from kvsim.analysis.claims_hybrid import capacity_rows; print(capacity_rows())"'
    for name in MODELS:
        f = frame.filter(pl.col("model") == name)
        ours, theirs = f["max_concurrency"].to_list(), f["vllm_max_concurrency"].to_list()
        same_blocks = set(f["num_blocks"].to_list()) == set(f["vllm_num_blocks"].to_list())
        equal = same_blocks and all(abs(a - b) <= 1e-9 * b for a, b in zip(ours, theirs, strict=True))
        at = {c: r for c, r in zip(f["context"].to_list(), f["ratio"].to_list(), strict=True)}
        groups = f["groups"][0]
        out.append(
            Claim(
                f"H-capacity-{name}",
                f"{name}, 40 GiB of KV cache: requests served at once from 4K to 128K tokens, as vLLM's "
                "hybrid KV-cache manager accounts its layers",
                VLLM,
                " / ".join(f"{c // 1024}K {v:.2f}×" for c, v in zip(CONTEXTS, theirs, strict=True)),
                " / ".join(f"{c // 1024}K {v:.2f}×" for c, v in zip(CONTEXTS, ours, strict=True))
                + f"; {at[32768]:.2f}× (32K) and {at[131072]:.2f}× (128K) what counting every layer as full "
                "attention gives",
                "equal (1e-9)",
                CONFIRMED if equal else DIFFERS,
                cmd,
                f"{groups}; kvsim.model.layers.kv_layout",
            )
        )
    return out


__all__ = ["CONTEXTS", "KV_BYTES", "MODELS", "VLLM_CONCURRENCY", "capacity_rows", "hybrid_claims"]
