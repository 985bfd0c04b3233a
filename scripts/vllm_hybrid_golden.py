"""Records vLLM's own scheduling and block decisions on hybrid KV-cache layouts into golden files.

Run with a Python that has vLLM installed (its KV-cache classes and scheduler run on CPU; torch and the
wheel's pure-Python dependencies are enough, no GPU, no model weights):

    python -m venv /tmp/venv-vllm && /tmp/venv-vllm/bin/pip install torch
    /tmp/venv-vllm/bin/pip install --no-deps vllm==0.33.0   # then its imports' packages, one by one
    /tmp/venv-vllm/bin/python scripts/vllm_hybrid_golden.py tests/data/vllm_hybrid

Each scenario builds vLLM's `KVCacheConfig` from the groups it names (kinds, windows, block sizes, in
order), drives `vllm.v1.core.sched.scheduler.Scheduler` step by step (requests join before the step of
their arrival; a request that has computed all its tokens samples one token, a fresh token id, until
`max_tokens`), and writes one JSON file: the scenario, then per step the tokens each request was
scheduled, its block table in every group (0: the null block) and the free blocks. `tests/test_hybrid_
golden.py` replays each scenario on both of kvsim's engines and compares. kvsim never imports vLLM: CI
reads the files only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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
}


def token_ids(segments: list[tuple[int, int]]) -> list[int]:
    return [c * 100_000 + i for c, n in segments for i in range(n)]


def record(name: str, sc: dict[str, Any]) -> dict[str, Any]:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
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
    max_model_len = 256
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
                "max_position_embeddings": 4096,
                "torch_dtype": "float16",
            }
        )
    )
    attn_bs = min(bs for kind, _, bs in sc["groups"] if kind != "mamba")
    mc = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, max_model_len=max_model_len, dtype="float16"
    )
    schc = SchedulerConfig(
        max_num_seqs=sc["max_num_seqs"],
        max_num_batched_tokens=sc["max_num_batched_tokens"],
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    cc = CacheConfig(block_size=attn_bs, enable_prefix_caching=caching)
    vc = VllmConfig(model_config=mc, scheduler_config=schc, cache_config=cc, device_config=DeviceConfig("cpu"))
    vc.cache_config.num_gpu_blocks = sc["num_blocks"]

    def spec(kind: str, window: int, bs: int) -> Any:
        common = dict(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16)
        if kind == "full":
            return FullAttentionSpec(**common)
        if kind == "sliding_window":
            return SlidingWindowSpec(**common, sliding_window=window)
        if kind == "chunked_local":
            return ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
        return MambaSpec(
            block_size=bs, shapes=((2, 16),), dtypes=(torch.float16,), mamba_cache_mode="none"
        )

    groups = [KVCacheGroupSpec([f"layer{i}"], spec(*g)) for i, g in enumerate(sc["groups"])]
    kvc = KVCacheConfig(
        num_blocks=sc["num_blocks"], kv_cache_tensors=[], kv_cache_groups=groups, prefix_cache_retention_interval=0
    )
    import math

    sched_bs = math.lcm(*(g[2] for g in sc["groups"]))
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
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )
        s.update_from_output(out, mro)
        if not s.has_requests() and not pending:
            break
    return {"name": name, "vllm": "0.33.0", **sc, "steps": steps}


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "tests/data/vllm_hybrid")
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[2:])
    for name, sc in SCENARIOS.items():
        if only and name not in only:
            continue
        data = record(name, sc)
        (out / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"{name}: {len(data['steps'])} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
