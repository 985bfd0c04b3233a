"""Records vLLM's own scheduling and block decisions on hybrid KV-cache layouts into golden files.

Run with a Python that has vLLM installed (its KV-cache classes and scheduler run on CPU; torch and the
wheel's pure-Python dependencies are enough, no GPU, no model weights). These commands rebuild the venv
(torch from PyPI: 2.15.0 when last run, though vLLM 0.33.0 pins 2.14.0, which does not matter here: its
compiled `vllm._C` is never loaded, only warned about; every recorded file came out byte-identical):

    python3.11 -m venv /tmp/venv-vllm && /tmp/venv-vllm/bin/pip install torch
    /tmp/venv-vllm/bin/pip install --no-deps vllm==0.33.0
    /tmp/venv-vllm/bin/pip install packaging pydantic regex numpy cbor2 psutil pyzmq urllib3 \
        "transformers>=5.16.1,<5.21.0" aiohttp requests openai-harmony openai pillow pybase64 cachetools \
        msgspec cloudpickle uvloop py-cpuinfo prometheus_client "xgrammar==0.2.8" fastapi \
        partial-json-parser "llguidance>=1.7.0,<1.8.0" einops
    /tmp/venv-vllm/bin/python scripts/vllm_hybrid_golden.py tests/data/vllm_hybrid [NAME ...]

vLLM 0.34.0 runs the three recorders too (`--no-deps vllm==0.34.0`, `"transformers>=5.16.1,<5.23.0"`, torch
2.14.0; `req_id_to_index` passes `ModelRunnerOutput` the field it dropped only where a release has it); the
files stay those of 0.33.0, which 0.34.0 reproduces except 37 of `tests/data/vllm_offload_hybrid`'s
(DESIGN.md §Presets, "vLLM 0.34.0").

With prefix caching on, a state group runs in vLLM's Mamba "align" mode (`mamba_align_*`): the scenario's
`mamba_checkpoint_blocks` is each MambaSpec's `num_prefill_checkpoint_blocks` (1: Mamba2's prefill
checkpoint, alignment 1), and retention is vLLM's default (`prefix_cache_retention_interval` 0: a state
is keyed only at the replay boundary and at a shared-prefix junction) unless the scenario names another.

Each scenario builds vLLM's `KVCacheConfig` from the groups it names (kinds, windows, block sizes, in
order), drives `vllm.v1.core.sched.scheduler.Scheduler` step by step (requests join before the step of
their arrival; a request that has computed all its tokens samples one token, a fresh token id, until
`max_tokens`), and writes one JSON file: the scenario, then per step the tokens each request was
scheduled, its block table in every group (0: the null block) and the free blocks. The scenarios of
`ASYNC_SCENARIOS` are also recorded under vLLM's `AsyncScheduler` (`async_<name>.json`, `_drive_async`:
the engine core's batch queue of two, each step's start `t` recorded), and so, only so, are
`STOP_SCENARIOS`: requests `(arrival, segments, max_tokens, stop_at)` given a stop token at their
`stop_at`-th output token, below `max_tokens` (`sampling_params`), which vLLM cannot foresee, so it
schedules each one token more, discarded. `tests/test_hybrid_
golden.py` replays each scenario on both of kvsim's engines and compares. kvsim never imports vLLM: CI
reads the files only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (plain data, this script's folder is on sys.path when run)
from vllm_stops import with_stops

# Scenarios: groups as (kind, window, block_size); requests as (arrival step, [(content, tokens), ...],
# max_tokens). Content `c`'s token `i` is token id `c * 100_000 + i` (kvsim's segment (c, n) is the first n
# tokens of content c).
SCENARIOS: dict[str, dict[str, Any]] = {
    "swa_full_sharing": {
        "groups": [("sliding_window", 6, 4), ("full", 0, 4)],
        "num_blocks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(1, 30)], 5),
            (0, [(1, 30), (2, 2)], 4),
            (3, [(1, 22), (3, 9)], 6),
            (6, [(1, 30), (4, 5)], 3),
        ],
    },
    "gpt_oss_like_pressure": {
        # gpt-oss alternates a 128-token window with full attention; here a window of 8, block 4, and a
        # pool small enough that the windows' freed blocks decide who runs.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 26,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(10, 20)], 12),
            (0, [(11, 17)], 10),
            (1, [(10, 20), (12, 3)], 9),
            (2, [(13, 25)], 6),
            (4, [(14, 9)], 15),
        ],
    },
    "gemma_like_groups": {
        # Gemma 3: five local layers per global one; with its group size that is several
        # sliding-window groups and one full group sharing the pool.
        "groups": [
            ("sliding_window", 10, 4),
            ("sliding_window", 10, 4),
            ("sliding_window", 10, 4),
            ("full", 0, 4),
        ],
        "num_blocks": 60,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 24,
        "requests": [
            (0, [(20, 26)], 8),
            (0, [(20, 26), (21, 6)], 8),
            (2, [(22, 40)], 5),
            (5, [(20, 26), (23, 11)], 4),
        ],
    },
    "chunked_local_full": {
        # Llama 4's chunked local attention with the hybrid manager on (vLLM's
        # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1).
        "groups": [("chunked_local", 8, 4), ("full", 0, 4)],
        "num_blocks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 20,
        "requests": [
            (0, [(30, 27)], 10),
            (1, [(30, 27), (31, 4)], 6),
            (3, [(32, 13)], 12),
        ],
    },
    "window_only_model": {
        # Every layer a sliding window (one group, vLLM's unitary coordinator).
        "groups": [("sliding_window", 7, 4)],
        "num_blocks": 16,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 12,
        "requests": [
            (0, [(40, 18)], 10),
            (0, [(40, 18), (41, 3)], 8),
            (2, [(42, 11)], 9),
        ],
    },
    "mamba_full_no_caching": {
        # A state group (Mamba / linear attention) beside full attention, prefix caching off: one state
        # block per request (its block size is max_model_len); the attention block is 16, the least vLLM
        # gives a model with Mamba layers on FlashAttention (`_align_hybrid_block_size`).
        "groups": [("mamba", 0, 256), ("full", 0, 16)],
        "num_blocks": 14,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 48,
        "enable_prefix_caching": False,
        "requests": [
            (0, [(50, 61)], 20),
            (0, [(51, 33)], 30),
            (2, [(52, 90)], 12),
            (3, [(53, 17)], 40),
        ],
    },
    # Mamba "align" mode (prefix caching with a state group): the state group's block is the attention
    # block; the state is kept at chunk ends, keyed only at the replay boundary's block and at a shared-
    # prefix junction (prefix_cache_retention_interval 0, vLLM's default).
    "mamba_align_sharing": {
        # Prompts of 150 tokens sharing 100: request 0 keys its state at the replay boundary (block of
        # token 149 floored, 144); request 1 (arriving once request 0 is done, so its chunks are the whole
        # budget) hits full attention to 96 but no state, so it computes from 0 and its second chunk stops
        # at the junction 96, keying it; request 2 hits there while request 1 decodes; request 3 repeats
        # request 0's prompt and hits at its replay boundary.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 60,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "enable_prefix_caching": True,
        "mamba_checkpoint_blocks": 0,
        "requests": [
            (0, [(60, 100), (61, 50)], 4),
            (7, [(60, 100), (62, 50)], 4),
            (12, [(60, 100), (63, 50)], 4),
            (16, [(60, 100), (61, 50)], 3),
        ],
    },
    "mamba_align_pressure": {
        # Two state groups and full attention in a small pool: preemptions and evictions; private and
        # shared prefixes; requests 1 and 2 have the same prompt and arrive in the same step (request 2's
        # state hit is keyed by request 1 in that step, so it waits a step).
        "groups": [("mamba", 0, 16), ("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 24,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 48,
        "enable_prefix_caching": True,
        "mamba_checkpoint_blocks": 0,
        "requests": [
            (0, [(70, 60)], 20),
            (0, [(71, 40)], 6),
            (0, [(71, 40)], 8),
            (1, [(70, 60), (72, 30)], 10),
            (3, [(73, 70)], 15),
            (4, [(70, 60), (74, 20)], 8),
            (6, [(71, 40), (75, 25)], 6),
        ],
    },
    "mamba_align_window": {
        # A state group, a sliding window and full attention, prefix caching on.
        "groups": [("mamba", 0, 16), ("sliding_window", 32, 16), ("full", 0, 16)],
        "num_blocks": 50,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 48,
        "enable_prefix_caching": True,
        "mamba_checkpoint_blocks": 0,
        "requests": [
            (0, [(80, 90)], 6),
            (2, [(80, 70), (81, 30)], 6),
            (4, [(80, 70), (82, 12)], 5),
            (8, [(80, 90)], 4),
        ],
    },
    "mamba_align_sub_block_chunks": {
        # A block (32) wider than the step's budget (24): chunks advance inside a block and re-align.
        "groups": [("mamba", 0, 32), ("full", 0, 32)],
        "num_blocks": 30,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 24,
        "enable_prefix_caching": True,
        "mamba_checkpoint_blocks": 0,
        "requests": [
            (0, [(90, 100)], 5),
            (2, [(90, 70), (91, 20)], 4),
            (9, [(90, 70), (92, 30)], 4),
        ],
    },
}
# The same requests with one prefill checkpoint block per state group (Mamba2's spec), so the scheduler's
# `mamba_has_prefill_checkpoint_blocks` holds: the prompt's tail need not be its own step.
for _base in ("mamba_align_sharing", "mamba_align_pressure"):
    SCENARIOS[f"{_base}_checkpoints".replace("_sharing", "")] = {
        **SCENARIOS[_base],
        "mamba_checkpoint_blocks": 1,
    }


def _resumed(
    num_blocks: int, prompt: int, state_groups: int = 1, block: int = 16, budget: int = 32
) -> dict[str, Any]:
    """Resumed prefills with prefill checkpoints: request 0 (40 tokens, 60 out) grows in a small pool and
    vLLM preempts the newer requests (recompute: their computed tokens back to 0, the outputs kept), which
    come back from their prefix hit with `T` tokens, the prefill ending at `T - 1`. Where `T - 1` is a
    multiple of the block the prefill's last boundary and the allocation's differ by a block."""
    return {
        "groups": [("mamba", 0, block)] * state_groups + [("full", 0, block)],
        "num_blocks": num_blocks,
        "max_num_seqs": 3,
        "max_num_batched_tokens": budget,
        "enable_prefix_caching": True,
        "mamba_checkpoint_blocks": 1,
        "requests": [
            (0, [(110, 40)], 60),
            (1, [(111, prompt)], 40 if block > 16 else 30),
            (2, [(112, 30)], 20),
        ],
    }


# A retention interval (`prefix_cache_retention_interval` 32: a state kept every two blocks as well). Without
# prefill checkpoints; with them, vLLM's coordinator passes its Mamba manager no prefill end (dense
# retention: every chunk publishes a state), so a chunk covering a boundary reserves a checkpoint block
# whether or not it finishes the prefill.
SCENARIOS["mamba_align_retention"] = {
    **SCENARIOS["mamba_align_pressure"],
    "prefix_cache_retention_interval": 32,
}
SCENARIOS["mamba_align_retention_checkpoints"] = {
    **SCENARIOS["mamba_align_checkpoints"],
    "prefix_cache_retention_interval": 32,
}

SCENARIOS.update(
    {
        # Request 1 (65 tokens, 64 = 4 blocks) preempted mid-prefill, twice, and resumed: from 0, from its
        # hit at 48 (a last chunk of 17 with the checkpoint block), from 0 again; request 2 after 16
        # outputs.
        "mamba_align_resumed_prefill": _resumed(12, 65),
        # The neighbour: 66 tokens.
        "mamba_align_resumed_prefill_neighbour": _resumed(12, 66),
        # Request 1 (58 tokens) preempted after 7 outputs waits with 65 tokens (64 = 4 blocks) and a hit
        # at 48: the full-prompt gate's checkpoint at 64 (vLLM) or 48 (the prefill's, kvsim) decides
        # whether it asks a checkpoint block (step 11).
        "mamba_align_resumed_decode": _resumed(13, 58),
        # The neighbour: 59 tokens, back with 66 and the hit at 48.
        "mamba_align_resumed_decode_neighbour": _resumed(13, 59),
        # 64 tokens: request 1 back with 65 and a hit at 48, request 2 with 31, then 33 and a hit at 16,
        # where the gate does not decide (the pool is short either way, or long enough).
        "mamba_align_resumed_decode_slack": _resumed(11, 64),
        # Two state groups, a budget of 40: chunks cut to 32; request 2 back with 33 tokens and a hit at 16.
        "mamba_align_resumed_two_states": _resumed(14, 64, state_groups=2, budget=40),
        # A block (32) wider than the budget (24): resumed prefills advance inside a block. Request 1 back
        # with 97 tokens (96 = 3 blocks) from 0, request 2 with 33 (32 = 1 block) from 0.
        "mamba_align_resumed_sub_block": _resumed(10, 63, block=32, budget=24),
        # Request 1 back with 87 tokens and a hit at 64: its chunks from 64 end off the block.
        "mamba_align_resumed_sub_block_hit": _resumed(9, 65, block=32, budget=24),
        # Request 2 back with 33 tokens (32 = 1 block) from 0: the gate's checkpoint at 32 (vLLM) or none
        # (kvsim) decides whether it starts (step 9).
        "mamba_align_resumed_sub_block_first_block": _resumed(11, 63, block=32, budget=24),
    }
)
# Dense retention (`prefix_cache_retention_interval` None: every block a sparse group holds keyed). vLLM's
# coordinator passes its Mamba manager no prefill end whenever the interval is not 0, None included
# (`KVCacheCoordinator.get_num_blocks_to_allocate`: `if self.retention_interval != 0`), so with prefill
# checkpoints a chunk covering a boundary reserves a checkpoint block as under a positive interval.
# (`mamba_align_dense_checkpoints`, `mamba_align_dense_resumed_prefill`, `mamba_align_dense_resumed_decode`)
for _name in ("retention_checkpoints", "resumed_prefill", "resumed_decode"):
    _base = "mamba_align_" + _name
    SCENARIOS["mamba_align_dense_" + _name.removeprefix("retention_")] = {
        **SCENARIOS[_base],
        "prefix_cache_retention_interval": None,
    }


# Layer layouts of real models (their published config.json: layer kinds, windows, KV heads, head width),
# grouped by vLLM's own `get_kv_cache_groups` (`vllm/v1/core/kv_cache_planning.py`) at block 16, bf16 KV,
# one GPU: its groups (kind, window, block size, layers), the bytes of one block, and its start-up
# figure "Maximum concurrency" for a pool of 10,000 blocks at the model's context length (max_num_batched
# tokens 8192, asynchronous scheduling: two batches in flight).
# Each layout: (name, [(kind, window, kv_heads, head_dim) per layer], max_model_len).
LAYOUTS: list[tuple[str, list[tuple[str, int, int, int]], int]] = [
    # openai/gpt-oss-120b: 36 layers, even ones a 128-token window, 8 KV heads of 64.
    ("gpt-oss-120b", [("sliding_window" if i % 2 == 0 else "full", 128, 8, 64) for i in range(36)], 131072),
    # google/gemma-3-27b-it: 62 layers, every sixth global, a 1024-token window, 16 KV heads of 128.
    (
        "gemma-3-27b",
        [("full" if (i + 1) % 6 == 0 else "sliding_window", 1024, 16, 128) for i in range(62)],
        131072,
    ),
    # meta-llama/Llama-4-Scout-17B-16E: 48 layers, every fourth global (NoPE), the others chunked local
    # attention of 8192 tokens, 8 KV heads of 128.
    (
        "llama-4-scout",
        [("full" if (i + 1) % 4 == 0 else "chunked_local", 8192, 8, 128) for i in range(48)],
        10485760,
    ),
    # A model whose global layers have a larger head (Gemma 4's global_head_dim): unequal pages.
    (
        "wide-global",
        [("full", 0, 8, 256) if (i + 1) % 6 == 0 else ("sliding_window", 512, 8, 128) for i in range(30)],
        65536,
    ),
    # Every layer a sliding window (Mistral-7B-v0.1: 32 layers, 4096 tokens, 8 KV heads of 128).
    ("mistral-7b-v0.1", [("sliding_window", 4096, 8, 128)] * 32, 32768),
]


def record_layouts() -> list[dict[str, Any]]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, FullAttentionSpec, SlidingWindowSpec

    out = []
    for name, layers, max_model_len in LAYOUTS:
        vc = _vllm_config(16, 8192, 256, max_model_len, True, async_scheduling=True)
        vc.scheduler_config.disable_hybrid_kv_cache_manager = False
        # A layer-outer layout: vLLM unifies unequal pages (its packed block-outer grouping, which some
        # backends choose, is a departure of kvsim: DESIGN.md §Hybrid attention).
        vc.cache_config.kv_cache_layout = "LBHNC"
        specs = {}
        for i, (kind, window, heads, head_dim) in enumerate(layers):
            common = dict(block_size=16, num_kv_heads=heads, head_size=head_dim, dtype=torch.bfloat16)
            if kind == "full":
                specs[f"layers.{i}"] = FullAttentionSpec(**common)
            elif kind == "sliding_window":
                specs[f"layers.{i}"] = SlidingWindowSpec(**common, sliding_window=window)
            else:
                specs[f"layers.{i}"] = ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
        with set_current_vllm_config(vc):
            groups = get_kv_cache_groups(vc, specs)
            config = get_kv_cache_config_from_groups(vc, groups, 10**12)
            per_block = 10**12 // config.num_blocks
            config.num_blocks = 10_000
            concurrency = get_max_concurrency_for_kv_cache_config(vc, config)
        out.append(
            {
                "name": name,
                "layers": layers,
                "max_model_len": max_model_len,
                "groups": [
                    {
                        "kind": type(g.kv_cache_spec).__name__,
                        "block_size": g.kv_cache_spec.block_size,
                        "layers": [int(n.split(".")[1]) for n in g.layer_names],
                    }
                    for g in groups
                ],
                "bytes_per_block": per_block,
                "max_concurrency_10000_blocks": concurrency,
            }
        )
    return out


# The claims suite's capacity claim (kvsim.analysis.claims_hybrid): vLLM's "Maximum concurrency" for two
# models at each context length, 40 GiB of KV cache (--kv-cache-memory-bytes), block 16, bf16,
# max_num_batched_tokens 8192, asynchronous scheduling, prefix caching on, the layers' specs as vLLM forms
# them on a Hopper GPU.
CAPACITY_CONTEXTS = [4096, 8192, 16384, 32768, 65536, 131072]
CAPACITY_KV_BYTES = 40 * 2**30


def record_capacity() -> dict[str, Any]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec

    out: dict[str, Any] = {}
    for name in ("gpt-oss-120b", "qwen3-next-80b-a3b"):
        rows = []
        for ctx in CAPACITY_CONTEXTS:
            vc = _vllm_config(16, 8192, 256, ctx, True, async_scheduling=True)
            vc.scheduler_config.disable_hybrid_kv_cache_manager = False  # a GPU platform's default
            vc.cache_config.kv_cache_layout = "LBHNC"
            specs: dict[str, Any] = {}
            if name == "gpt-oss-120b":
                # openai/gpt-oss-120b config.json: 36 layers, even ones a 128-token window, 8 KV heads of 64.
                for i in range(36):
                    common = dict(block_size=16, num_kv_heads=8, head_size=64, dtype=torch.bfloat16)
                    specs[f"layers.{i}"] = (
                        SlidingWindowSpec(**common, sliding_window=128)
                        if i % 2 == 0
                        else FullAttentionSpec(**common)
                    )
            else:
                # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 48 layers, every fourth full attention (2 KV
                # heads of 256), the others a gated delta net (16 key / 32 value heads of 128, conv kernel 4).
                # On a Hopper GPU its prefill runs on FlashInfer's kernel, which exports a prefill checkpoint
                # on a 64-token grid (qwen_gdn_linear_attn.py, gdn_attn.py's FLASHINFER_GDN_CHECKPOINT_
                # ALIGNMENT), so in align mode vLLM raises the attention block to a multiple of 64 that holds
                # the state (_align_hybrid_block_size: 64 × ceil(1,097,728 / (64 × 2,048)) = 576 tokens),
                # pads the state's page to the attention page, and each state group counts a checkpoint
                # block (num_prefill_checkpoint_blocks 1, its offsets on the 576-token grid).
                vc.cache_config.mamba_cache_mode = "align"
                attn = FullAttentionSpec(block_size=576, num_kv_heads=2, head_size=256, dtype=torch.bfloat16)
                state = MambaSpec(
                    block_size=576,
                    shapes=((3, 8192), (32, 128, 128)),
                    dtypes=(torch.bfloat16, torch.bfloat16),
                    page_size_padded=attn.page_size_bytes,
                    mamba_cache_mode="align",
                    num_prefill_checkpoint_blocks=1,
                    prefill_checkpoint_alignment=576,
                )
                for i in range(48):
                    specs[f"layers.{i}"] = attn if (i + 1) % 4 == 0 else state
            with set_current_vllm_config(vc):
                groups = get_kv_cache_groups(vc, specs)
                config = get_kv_cache_config_from_groups(vc, groups, CAPACITY_KV_BYTES)
                concurrency = get_max_concurrency_for_kv_cache_config(vc, config)
            rows.append({"context": ctx, "num_blocks": config.num_blocks, "max_concurrency": concurrency})
        out[name] = rows
    return out


def _vllm_config(
    block_size: int, budget: int, max_num_seqs: int, max_model_len: int, caching: bool, async_scheduling: bool
) -> Any:
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig

    model_dir = Path("/tmp/kvsim-golden-model")
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 1,
                "vocab_size": 1000,
                "max_position_embeddings": 1 << 24,
                "torch_dtype": "float16",
            }
        )
    )
    mc = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, max_model_len=max_model_len, dtype="float16"
    )
    schc = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
    )
    cc = CacheConfig(block_size=block_size, enable_prefix_caching=caching)
    return VllmConfig(
        model_config=mc, scheduler_config=schc, cache_config=cc, device_config=DeviceConfig("cpu")
    )


def vllm_version() -> str:
    """The release that writes a file (`vllm.__version__`: the wheel imported, so a file says which)."""
    import vllm

    return str(vllm.__version__)


def req_id_to_index(output_cls: Any, ids: list[str]) -> dict[str, Any]:
    """`ModelRunnerOutput`'s `req_id_to_index` where the release has it (vLLM 0.33.0; 0.34.0 dropped it and
    reads the index from `req_ids`)."""
    if "req_id_to_index" in getattr(output_cls, "__dataclass_fields__", {}):
        return {"req_id_to_index": {r: i for i, r in enumerate(ids)}}
    return {}


def token_ids(segments: list[tuple[int, int]]) -> list[int]:
    return [c * 100_000 + i for c, n in segments for i in range(n)]


def record(name: str, sc: dict[str, Any], async_scheduling: bool = False) -> dict[str, Any]:
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        MambaSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    init_none_hash(sha256)
    caching = sc.get("enable_prefix_caching", True)
    attn_bs = min(bs for kind, _, bs in sc["groups"] if kind != "mamba")
    vc = _vllm_config(
        attn_bs, sc["max_num_batched_tokens"], sc["max_num_seqs"], 256, caching, async_scheduling
    )
    vc.cache_config.num_gpu_blocks = sc["num_blocks"]
    has_mamba = any(kind == "mamba" for kind, _, _ in sc["groups"])
    mamba_mode = "align" if caching and has_mamba else "none"
    if mamba_mode == "align":
        vc.cache_config.mamba_cache_mode = "align"
        vc.cache_config.mamba_block_size = attn_bs

    def spec(kind: str, window: int, bs: int) -> Any:
        common = dict(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16)
        if kind == "full":
            return FullAttentionSpec(**common)
        if kind == "sliding_window":
            return SlidingWindowSpec(**common, sliding_window=window)
        if kind == "chunked_local":
            return ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
        # Prefix caching on: vLLM's Mamba "align" mode (a real Mamba model's
        # `MambaModelConfig.verify_and_update_config` sets cache_config.mamba_cache_mode; this toy Llama's
        # config does not, so it is set by hand above). Checkpoint blocks as Mamba2's mixer declares them
        # (`MambaMixer2.get_kv_cache_spec`: one block, any token alignment).
        checkpoints = sc.get("mamba_checkpoint_blocks", 0)
        return MambaSpec(
            block_size=bs,
            shapes=((2, 16),),
            dtypes=(torch.float16,),
            mamba_cache_mode=mamba_mode,
            num_prefill_checkpoint_blocks=checkpoints,
            prefill_checkpoint_alignment=1 if checkpoints else None,
        )

    groups = [KVCacheGroupSpec([f"layer{i}"], spec(*g)) for i, g in enumerate(sc["groups"])]
    kvc = KVCacheConfig(
        num_blocks=sc["num_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=groups,
        prefix_cache_retention_interval=sc.get("prefix_cache_retention_interval", 0),
    )
    import math

    sched_bs = math.lcm(*(g[2] for g in sc["groups"]))
    if async_scheduling:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        s = AsyncScheduler(
            vc, kvc, StructuredOutputManager(vc), block_size=sched_bs, hash_block_size=sched_bs
        )
        hasher = get_request_block_hasher(sched_bs, sha256)
        steps = _drive_async(s, sc, hasher, Request, SamplingParams, ModelRunnerOutput)
        return {
            "name": f"async_{name}",
            "vllm": vllm_version(),
            **sc,
            "async_scheduling": True,
            "steps": steps,
        }
    s = Scheduler(vc, kvc, StructuredOutputManager(vc), block_size=sched_bs, hash_block_size=sched_bs)
    hasher = get_request_block_hasher(sched_bs, sha256)
    pending = list(enumerate(sc["requests"]))
    steps = []
    for step in range(400):
        for rid, (arrival, segments, max_tokens) in list(pending):
            if arrival == step:
                params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
                s.add_request(Request(str(rid), token_ids(segments), params, None, block_hasher=hasher))
                pending.remove((rid, (arrival, segments, max_tokens)))
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        coordinator = s.kv_cache_manager.coordinator
        steps.append(
            {
                "scheduled": {r: n for r, n in out.num_scheduled_tokens.items()},
                "tables": {
                    r: [[b.block_id for b in g] for g in coordinator.get_blocks(r)]
                    for r in sorted(s.requests, key=int)
                    if any(coordinator.get_blocks(r))
                },
                "free_blocks": s.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
        )
        sampled = []
        for r in ids:
            req = s.requests[r]
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append([900_000 + int(r) * 1000 + req.num_output_tokens] if done else [])
        mro = ModelRunnerOutput(
            req_ids=ids, sampled_token_ids=sampled, **req_id_to_index(ModelRunnerOutput, ids)
        )
        s.update_from_output(out, mro)
        if not s.has_requests() and not pending:
            break
    return {"name": name, "vllm": vllm_version(), **sc, "steps": steps}


# Scenarios also recorded under vLLM's `AsyncScheduler` (`async_<name>.json`): windows, local chunks, states
# without prefix caching, and every Mamba align scenario.
ASYNC_SCENARIOS = [
    "swa_full_sharing",
    "gpt_oss_like_pressure",
    "gemma_like_groups",
    "chunked_local_full",
    "window_only_model",
    "mamba_full_no_caching",
    *(name for name in SCENARIOS if name.startswith("mamba_align")),
]


def sampling_params(cls: Any, rid: int, r: Any) -> Any:
    """Request `rid`'s `SamplingParams` (`cls`) from its `(arrival, segments, max_tokens[, stop_at])`: it runs
    to `max_tokens` (`ignore_eos`); with `stop_at` below `max_tokens` it stops early, at its `stop_at`-th
    output token, whose id (900_000 + rid * 1000 + stop_at - 1, the one the driver samples there) is its
    stop token (`stop_token_ids`, vLLM's `check_stop`): an end of sequence the scheduler cannot foresee."""
    if len(r) > 3:
        assert 1 <= r[3] < r[2], f"request {rid}: stop_at {r[3]} must be below max_tokens {r[2]}"
        return cls(max_tokens=r[2], ignore_eos=True, stop_token_ids=[900_000 + rid * 1000 + r[3] - 1])
    return cls(max_tokens=r[2], ignore_eos=True)


# Requests that stop early (a fourth element, `stop_at`, below `max_tokens`: `sampling_params`), recorded
# only under the `AsyncScheduler`, which schedules such a request one token more (discarded) after the
# token that stops it: full attention alone, a window beside it, a window alone, a state beside it.
STOP_SCENARIOS: dict[str, dict[str, Any]] = {
    "stop_full": {
        # Full attention alone (one group). Request 0 stops at its 4th token of 12: its discarded token
        # (position 8) starts a third block; request 1 stops at its 1st (its prefill's token); request 2
        # waits for the blocks request 0 holds through its discarded token.
        "groups": [("full", 0, 4)],
        "num_blocks": 8,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(60, 5)], 12, 4),
            (0, [(61, 7)], 6, 1),
            (1, [(62, 14)], 3),
            (2, [(60, 5), (63, 8)], 9, 5),
            (6, [(64, 3)], 4, 2),
        ],
    },
    "stop_swa_full": {
        # A window of 8 beside full attention, a pool that makes requests wait: request 0's discarded
        # token (position 12) starts a block in both groups.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 14,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(70, 9)], 10, 4),
            (0, [(71, 11)], 8, 3),
            (1, [(70, 9), (72, 6)], 6, 2),
            (2, [(73, 10)], 4),
            (3, [(70, 9), (74, 3)], 9, 5),
        ],
    },
    "stop_gpt_oss_like_pressure": with_stops(SCENARIOS["gpt_oss_like_pressure"], 1),
    "stop_window_only_model": with_stops(SCENARIOS["window_only_model"], 2),
    "stop_mamba_align_pressure": with_stops(SCENARIOS["mamba_align_pressure"], 3),
}
ASYNC_SCENARIOS += list(STOP_SCENARIOS)


def _drive_async(
    s: Any, sc: dict[str, Any], hasher: Any, Request: Any, SamplingParams: Any, MRO: Any
) -> list:
    """vLLM's `EngineCore.step_with_batch_queue` with a queue of two and every step one tick (1 ms) long:
    a step is scheduled while the one before it runs (at that step's start, taking the requests arrived by
    then) and launched; the outputs of the step before then arrive (`update_from_output`). An empty
    schedule with a step in flight waits for that step's outputs and schedules again at its end (the clock
    the next step starts at). Recorded per step launched: its start `t` (ms), the tokens scheduled, then
    the tables and free blocks once the step before's outputs arrived (its finishers freed), as kvsim's
    event log holds them at the step's start."""
    pending = list(enumerate(sc["requests"]))
    steps: list[dict[str, Any]] = []
    in_flight = None  # (SchedulerOutput, {request: sampled})
    t = 0  # the start of the next step launched
    for _ in range(1000):
        now = t - 1 if in_flight is not None else t  # when this schedule runs
        for rid, r in list(pending):
            if r[0] <= now:
                params = sampling_params(SamplingParams, rid, r)
                s.add_request(Request(str(rid), token_ids(r[1]), params, None, block_hasher=hasher))
                pending.remove((rid, r))
        out = s.schedule()
        if not out.num_scheduled_tokens:
            if in_flight is not None:
                _outputs(s, *in_flight, MRO)
                in_flight = None
                continue
            if pending:
                t = max(t, min(r[0] for _, r in pending))
                continue
            assert not s.has_requests(), "nothing schedulable"
            break
        # A request whose scheduled tokens reach its end samples a token (vLLM's `is_prefill_chunk`).
        sampled = {r: not s.requests[r].is_prefill_chunk for r in out.num_scheduled_tokens}
        if in_flight is not None:
            _outputs(s, *in_flight, MRO)
        coordinator = s.kv_cache_manager.coordinator
        steps.append(
            {
                "t": t,
                "scheduled": dict(out.num_scheduled_tokens.items()),
                "tables": {
                    r: [[b.block_id for b in g] for g in coordinator.get_blocks(r)]
                    for r in sorted(s.requests, key=int)
                    if any(coordinator.get_blocks(r))
                },
                "free_blocks": s.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
        )
        in_flight = (out, sampled)
        t += 1
    return steps


def sampled_tokens(s: Any, ids: list[str], sampled: dict[str, bool]) -> list[list[int]]:
    """A batch's outputs as they reach the scheduler: a fresh token id for each request it sampled
    (request r's k-th is 900_000 + r * 1000 + k), none for the others (the offload recorder's too)."""
    tokens = []
    for r in ids:
        req = s.requests.get(r)
        n = req.num_output_tokens if req is not None else 0
        tokens.append([900_000 + int(r) * 1000 + n] if sampled[r] else [])
    return tokens


def _outputs(s: Any, out: Any, sampled: dict[str, bool], MRO: Any) -> None:
    """A step's outputs reach the scheduler (`sampled_tokens`)."""
    ids = list(out.num_scheduled_tokens)
    tokens = sampled_tokens(s, ids, sampled)
    s.update_from_output(out, MRO(req_ids=ids, sampled_token_ids=tokens, **req_id_to_index(MRO, ids)))


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "tests/data/vllm_hybrid")
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[2:])
    if not only or "capacity" in only:
        (out / "capacity.json").write_text(json.dumps(record_capacity(), indent=1) + "\n")
        print("capacity: recorded")
    if not only or "layouts" in only:
        (out / "layouts.json").write_text(json.dumps(record_layouts(), separators=(",", ":")) + "\n")
        print("layouts: recorded")
    for name, sc in SCENARIOS.items():
        if only and name not in only:
            continue
        data = record(name, sc)
        (out / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"{name}: {len(data['steps'])} steps")
    for name in ASYNC_SCENARIOS:
        if only and f"async_{name}" not in only:
            continue
        data = record(name, {**SCENARIOS, **STOP_SCENARIOS}[name], async_scheduling=True)
        (out / f"async_{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"async_{name}: {len(data['steps'])} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
