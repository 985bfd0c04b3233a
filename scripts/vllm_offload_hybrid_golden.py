"""Records vLLM's own CPU-tier decisions (its native KV offloading) on hybrid KV-cache layouts into golden files.

Run with a Python that has vLLM installed (the venv of `scripts/vllm_hybrid_golden.py`'s docstring: its
scheduler, KV-cache manager and `OffloadingConnector`'s scheduler side run on CPU, no GPU):

    cd scripts && PYTHONPATH=/tmp/ah_vllm033 /tmp/venv-vllm034/bin/python vllm_offload_hybrid_golden.py \
        ../tests/data/vllm_offload_hybrid [NAME ...]

(`/tmp/ah_vllm033` holds vLLM 0.33.0's package, run with the 0.34.0 venv's torch and dependencies); vLLM
0.34.0's are the same command without `PYTHONPATH` (the venv's own vLLM) into
`tests/data/vllm_offload_hybrid_034`. Each file names the release that recorded it (`vllm`). The scenarios
(NAME) are `scripts/vllm_offload_hybrid_scenarios.py`'s `SCENARIOS`.

`ASYNC_SCENARIOS` are also recorded under the `AsyncScheduler` of each release (`record_async`: the engine
core's batch queue of two, transfers of zero duration, as `scripts/vllm_offload_golden.py`'s
`record_async`), named `async_<scenario>`, into a folder of their own; `async` alone records them all:

    cd scripts && PYTHONPATH=/tmp/ah_vllm033 /tmp/venv-vllm034/bin/python vllm_offload_hybrid_golden.py \
        ../tests/data/vllm_offload_hybrid_async async

and vLLM 0.34.0's the same without `PYTHONPATH` into `tests/data/vllm_offload_hybrid_async_034`. Among
them `STOP_SCENARIOS` (recorded only so): requests `(arrival, segments, max_tokens, stop_at)` that stop
early by a stop token below their `max_tokens` (`scripts/vllm_hybrid_golden.py`'s `sampling_params`).
`tests/test_offload_hybrid_async_golden.py` replays both.

The recorder is `scripts/vllm_offload_golden.py`'s (its worker stand-in `Worker` and its clock `Clock`,
imported: the same arrival, stall and clock rules; transfers of zero duration, a load reported done in the
step that issued it, a store in the step after, a flushed job at once, except in the `slow_*` scenarios,
whose `latency_ms` and `ms_per_block` time them as the single group's `slow_*` ones are: there each step
records its `start` on kvsim's clock and, where a flush lengthened it, its `end`, and the file counts the
requests that joined an engine stalled on transfers, `stall_joins`) on
a `KVCacheConfig` of several groups built as `scripts/vllm_hybrid_golden.py` builds it (groups as (kind,
window, block size), in order; `prefix_cache_retention_interval` 0, vLLM's default; `prompt_only` False
sets the connector's `offload_prompt_only` off, storing output tokens' chunks too; `mamba_checkpoint_blocks`
is each Mamba group's `num_prefill_checkpoint_blocks`, as in `scripts/vllm_hybrid_golden.py`). One backing tensor of
`num_blocks` pages of 4,096 bytes holds every group's layer (vLLM's groups overlay one allocation), so one
CPU chunk is `blocks_per_chunk` pages and the tier holds `cpu_chunks` of them, each one key of one group.

Each file: the scenario, `arrivals` (kvsim's clock, ms), then per step that computed tokens:
- `scheduled`: tokens per request; `tables`: every request's block table per group (0: the null block);
  `free_blocks`: the GPU pool's free blocks after scheduling;
- `loads` / `stores` (as in tests/data/vllm_offload: `[request, CPU chunks]` per job issued since the step
  before) and `load_keys` / `store_keys`: per job `[request, [[group, end_token], ...]]`, each key named by
  its group's index and the end (exclusive, in the request's tokens) of the chunk it holds, in vLLM's
  order (group by group); `load_blocks`: per load job `[request, [GPU blocks per group]]`;
- `flushed`: jobs vLLM flushed in this step's metadata;
- `tier`: every key in the tier after scheduling, `[group, prefix, ready]`, sorted: `prefix` the chunk's
  whole token prefix as segments `[content, tokens]` (a request r's own output tokens would be segment
  `[-1 - r, n]`; with prompt-only stores, vLLM's default, none are), `ready` false while its store is in flight;
  `tier_chunks` their count.
`trailing` holds the jobs issued after the last step that computed tokens; `flushes` the total.

Content `c`'s token `i` is token id `c * 100_000 + i` (kvsim's segment (c, n)); request r's k-th output
token is 900_000 + r * 1000 + k. kvsim never imports vLLM: CI reads the files only.

The recorder runs under `PYTHONHASHSEED=2` (it starts itself again with it): vLLM walks the requests that
finished in a step as a set of request-id strings (`SchedulerOutput.finished_req_ids`), so where two of them
offer stores to a full tier their order is the set's, which the hash seed decides (`random_0`: requests 3
and 4 finish together; seeds 0, 1 and 3 give the other order). kvsim offers them in finish order (a
departure, DESIGN.md §Departures); seed 2's order is that one. Every other scenario records the same under
any seed.

A window group's admission cap counts two batches in flight, as vLLM 0.33.0's default asynchronous
scheduling makes it (`VllmConfig.max_concurrent_batches`), though the recorder's steps are synchronous: the
rule kvsim models (DESIGN.md §Hybrid attention).

Every group here is one layer (`layer{i}`, one layer slot, no padding layers), so each group's block moves
the same bytes and the `slow_*` clock's one time a block (`Worker`, a transfer of `n` blocks taking `n *
per_block`) is kvsim's charge of each group's blocks at its own layers' time (DESIGN.md §CPU tier, "A hybrid
model"; kvsim's replay, `tests/test_offload_hybrid_golden.py`, checks its groups' times are all alike). A
scenario with groups of unequal layer counts would need the clock to charge each group's blocks (the load
and store specs' `group_sizes`) at its share.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# The single-group recorder's stand-in worker and clock (kvsim's).
from vllm_offload_golden import Clock, Worker, batch_queue, req_id_to_index, vllm_version
from vllm_offload_hybrid_scenarios import MAX_MODEL_LEN, SCENARIOS
from vllm_stops import with_stops

PAGE_BYTES = 4096  # one GPU block's bytes (every group's) in the recorder's KV-cache config


def token_ids(segments: list[tuple[int, int]]) -> list[int]:
    return [c * 100_000 + i for c, n in segments for i in range(n)]


def _model_dir() -> Path:
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
    return model_dir


def _scheduler(sc: dict[str, Any], async_scheduling: bool = False) -> tuple[Any, int]:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
        MambaSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    n = sc["num_blocks"]
    bpc = sc.get("blocks_per_chunk", 1)
    attn_bs = min(bs for kind, _, bs in sc["groups"] if kind != "mamba")
    has_mamba = any(kind == "mamba" for kind, _, _ in sc["groups"])
    mc = ModelConfig(
        model=str(_model_dir()), skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN, dtype="float16"
    )
    schc = SchedulerConfig(
        max_num_seqs=sc["max_num_seqs"],
        max_num_batched_tokens=sc["max_num_batched_tokens"],
        max_model_len=MAX_MODEL_LEN,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
    )
    cc = CacheConfig(
        block_size=attn_bs,
        enable_prefix_caching=True,
        kv_offloading_size=sc["cpu_chunks"] * PAGE_BYTES * bpc / 2**30,
    )
    vc = VllmConfig(
        model_config=mc, scheduler_config=schc, cache_config=cc, device_config=DeviceConfig("cpu")
    )
    if has_mamba:
        vc.cache_config.mamba_cache_mode = "align"
        vc.cache_config.mamba_block_size = attn_bs
    extra = vc.kv_transfer_config.kv_connector_extra_config
    extra["eviction_policy"] = sc.get("eviction_policy", "lru")
    if bpc != 1:
        extra["blocks_per_chunk"] = bpc
    if sc.get("store_threshold"):
        extra["store_threshold"] = sc["store_threshold"]
    if not sc.get("prompt_only", True):
        extra["offload_prompt_only"] = False

    checkpoints = sc.get("mamba_checkpoint_blocks", 0)

    def spec(kind: str, window: int, bs: int) -> Any:
        common = dict(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16)
        if kind == "full":
            return FullAttentionSpec(**common)
        if kind == "sliding_window":
            return SlidingWindowSpec(**common, sliding_window=window)
        if kind == "chunked_local":
            return ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
        return MambaSpec(
            block_size=bs,
            shapes=((2, 16),),
            dtypes=(torch.float16,),
            mamba_cache_mode="align",
            # Checkpoint blocks as Mamba2's mixer declares them (one block, any token alignment), as
            # scripts/vllm_hybrid_golden.py gives them.
            num_prefill_checkpoint_blocks=checkpoints,
            prefill_checkpoint_alignment=1 if checkpoints else None,
        )

    names = [f"layer{i}" for i in range(len(sc["groups"]))]
    kvc = KVCacheConfig(
        num_blocks=n,
        kv_cache_tensors=[
            KVCacheTensor(size=n * PAGE_BYTES, layers=names, layer_stride=0, block_stride=PAGE_BYTES)
        ],
        kv_cache_groups=[KVCacheGroupSpec([nm], spec(*g)) for nm, g in zip(names, sc["groups"], strict=True)],
        prefix_cache_retention_interval=0,
    )
    vc.cache_config.num_gpu_blocks = n
    # The steps run synchronously (the stand-in worker), but a window group's admission cap counts two
    # batches in flight, as vLLM 0.33.0's default asynchronous scheduling makes it (`max_in_flight_tokens`
    # = `max_concurrent_batches` x `max_num_batched_tokens`) and as kvsim models it (DESIGN.md §Hybrid
    # attention): with one batch, a prompt kvsim's cap refuses at arrival would be admitted.
    type(vc).max_concurrent_batches = property(lambda self: 2)
    sched_bs, hash_bs = resolve_kv_cache_block_sizes(kvc, vc)
    if async_scheduling:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        a = AsyncScheduler(vc, kvc, StructuredOutputManager(vc), block_size=sched_bs, hash_block_size=hash_bs)
        return a, hash_bs
    s = Scheduler(vc, kvc, StructuredOutputManager(vc), block_size=sched_bs, hash_block_size=hash_bs)
    return s, hash_bs


def _segments_of(tokens: list[int], n: int, num_prompt: int, rid: int) -> list[list[int]]:
    """The first n tokens as segments [content, count] (request rid's output tokens: [-1 - rid, count])."""
    segs: list[list[int]] = []
    for i, t in enumerate(tokens[:n]):
        c = t // 100_000 if i < num_prompt else -1 - rid
        if segs and segs[-1][0] == c:
            segs[-1][1] += 1
        else:
            segs.append([c, 1])
    return segs


def job_keys(connector: Any, names: dict[bytes, tuple[int, list[list[int]]]], jid: int) -> list[list[int]]:
    """Job `jid`'s keys as `[group, end_token]`, sorted (`names`: a block hash's tokens and prefix segments)."""
    from vllm.v1.kv_offload.base import get_offload_block_hash, get_offload_group_idx

    ends = (
        [get_offload_group_idx(k), names[get_offload_block_hash(k)][0]] for k in connector._jobs[jid].keys
    )
    return sorted(ends, key=lambda ge: (ge[0], ge[1]))


def tier_chunks(manager: Any, names: dict[bytes, tuple[int, list[list[int]]]]) -> list[list[Any]]:
    """Every key in the tier as `[group, prefix segments, ready]`, sorted by prefix, then group."""
    from vllm.v1.kv_offload.base import get_offload_block_hash, get_offload_group_idx

    pol = manager._policy
    chunks = dict(pol.chunks) if hasattr(pol, "chunks") else {**pol.t1, **pol.t2}
    out = [
        [get_offload_group_idx(k), names[get_offload_block_hash(k)][1], bool(c.is_ready)]
        for k, c in chunks.items()
    ]
    return sorted(out, key=lambda e: (e[1], e[0]))


def record(name: str, sc: dict[str, Any]) -> dict[str, Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    init_none_hash(sha256)
    s, hash_bs = _scheduler(sc)
    connector = s.connector.connector_scheduler
    manager = connector.manager
    hasher = get_request_block_hasher(hash_bs, sha256)
    timed = "latency_ms" in sc or "ms_per_block" in sc
    clock = Clock(Worker(sc.get("latency_ms", 0.0), sc.get("ms_per_block", 0.0)))
    pending = list(enumerate(sc["requests"]))
    steps: list[dict[str, Any]] = []
    arrivals: dict[int, float] = {}
    hash_names: dict[bytes, tuple[int, list[list[int]]]] = {}  # block hash -> (tokens, prefix segments)

    def learn_hashes() -> None:
        for req in s.requests.values():
            toks = list(req.all_token_ids)
            for i, h in enumerate(req.block_hashes):
                if h not in hash_names:
                    n = (i + 1) * hash_bs
                    hash_names[h] = (n, _segments_of(toks, n, req.num_prompt_tokens, int(req.request_id)))

    loads: list[list[Any]] = []
    stores: list[list[Any]] = []
    load_keys: list[list[Any]] = []
    store_keys: list[list[Any]] = []
    load_blocks: list[list[Any]] = []
    flushes = 0
    flushed_since = 0
    for step in range(800):
        idle = not s.has_requests() and not connector._jobs
        for rid, (_, segments, max_tokens) in clock.join(step, pending, idle):
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            s.add_request(Request(str(rid), token_ids(segments), params, None, block_hasher=hasher))
            arrivals[rid] = clock.now
        learn_hashes()
        out = s.schedule()
        meta = out.kv_connector_metadata
        for jid, job in meta.load_jobs.items():
            loads.append([job.req_id, len(job.src_spec.block_ids)])
            load_keys.append([job.req_id, job_keys(connector, hash_names, jid)])
            load_blocks.append([job.req_id, list(job.dst_spec.group_sizes)])
        for jid, job in meta.store_jobs.items():
            stores.append([job.req_id, len(job.dst_spec.block_ids)])
            store_keys.append([job.req_id, job_keys(connector, hash_names, jid)])
        tier_now = tier_chunks(manager, hash_names)
        ids = list(out.num_scheduled_tokens)
        output, flushed, start, end = clock.run(step, meta, bool(ids))
        flushes += flushed
        flushed_since += flushed
        if ids:
            coordinator = s.kv_cache_manager.coordinator
            steps.append(
                {
                    "scheduled": dict(out.num_scheduled_tokens),
                    "tables": {
                        r: [[b.block_id for b in g] for g in coordinator.get_blocks(r)]
                        for r in sorted(s.requests, key=int)
                        if any(coordinator.get_blocks(r))
                    },
                    "free_blocks": s.kv_cache_manager.block_pool.get_num_free_blocks(),
                    "loads": loads,
                    "stores": stores,
                    "load_keys": load_keys,
                    "store_keys": store_keys,
                    "load_blocks": load_blocks,
                    "flushed": flushed_since,
                    "tier": tier_now,
                    "tier_chunks": manager._num_chunks - manager._get_num_free_chunks(),
                    # (the times only where transfers take time: the scenarios of zero duration were
                    # recorded without them)
                    **(Clock.times(start, end) if timed else {}),
                }
            )
            loads, stores, load_keys, store_keys, load_blocks = [], [], [], [], []
            flushed_since = 0
        sampled = []
        for r in ids:
            req = s.requests[r]
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append([900_000 + int(r) * 1000 + req.num_output_tokens] if done else [])
        mro = ModelRunnerOutput(
            req_ids=ids,
            **req_id_to_index(ModelRunnerOutput, ids),
            sampled_token_ids=sampled,
            kv_connector_output=output,
        )
        learn_hashes()
        s.update_from_output(out, mro)
        if not s.has_requests() and not pending and not connector._jobs:
            break
    else:
        raise RuntimeError(
            f"{name}: did not finish: {[(r, q.status, q.num_computed_tokens) for r, q in s.requests.items()]} jobs {connector._jobs}"
        )
    return {
        "name": name,
        "vllm": vllm_version(),
        **sc,
        "arrivals": [arrivals[i] for i in range(len(sc["requests"]))],
        "steps": steps,
        "trailing": {
            "loads": loads,
            "stores": stores,
            "load_keys": load_keys,
            "store_keys": store_keys,
            "load_blocks": load_blocks,
            "flushed": flushed_since,
        },
        "flushes": flushes,
        **({"stall_joins": clock.stall_joins} if clock.stall_joins else {}),
    }


# Requests that stop early (a fourth element, `stop_at`, below `max_tokens`), recorded only under the
# `AsyncScheduler` (`async_<name>.json`), which schedules such a request one token more (discarded) after
# the token that stops it: a window beside full attention, a state beside it.
STOP_SCENARIOS: dict[str, dict[str, Any]] = {
    "stop_swa_new_block": {
        # Request 0 stops at its 4th token of 10: its discarded token (position 12) starts a block in both
        # groups, freed at that batch's output; request 3 waits for the blocks it holds.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 16,
        "cpu_chunks": 40,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(70, 9)], 10, 4),
            (0, [(71, 11)], 8, 3),
            (1, [(72, 10)], 4),
            (2, [(70, 9), (73, 6)], 6, 2),
            (5, [(70, 9), (74, 3)], 9, 5),
        ],
    },
    "stop_mamba_new_block": {
        # A state group beside full attention (block 16): request 0's discarded token (position 80) starts
        # a block; request 2 waits for its blocks.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 12,
        "cpu_chunks": 40,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(75, 77)], 12, 4),
            (1, [(76, 40)], 6, 2),
            (2, [(75, 77), (77, 20)], 5),
            (3, [(78, 30)], 9, 3),
        ],
    },
    "stop_swa_store_then_load": with_stops(SCENARIOS["swa_store_then_load"], 11),
    "stop_swa_preempt_store_in_flight": with_stops(SCENARIOS["swa_preempt_store_in_flight"], 12),
    "stop_mamba_align_full": with_stops(SCENARIOS["mamba_align_full"], 13),
    "stop_mamba_decode": with_stops(SCENARIOS["mamba_decode"], 14),
    "stop_random_0": with_stops(SCENARIOS["random_0"], 15),
    "stop_random_1": with_stops(SCENARIOS["random_1"], 16),
    "stop_mamba_random_0": with_stops(SCENARIOS["mamba_random_0"], 17),
    "stop_mamba_random_2": with_stops(SCENARIOS["mamba_random_2"], 18),
}

# Scenarios also recorded under vLLM's `AsyncScheduler` with the engine core's batch queue of two
# (`async_<name>.json`, `record_async`), transfers of zero duration: a window or local chunks beside full
# attention and Mamba states beside it, with loads, stores, flushes and preemptions among them.
ASYNC_SCENARIOS = [
    "swa_store_then_load",
    "swa_pending_store_defers",
    "swa_being_loaded_defers",
    "swa_tier_full_lru",
    "swa_junction_stored",
    "swa_two_blocks_per_chunk",
    "swa_preempt_store_in_flight",
    "gemma_like_three_windows",
    "chunked_local_full",
    "mamba_align_full",
    "mamba_junction_reload",
    "mamba_window_full",
    "mamba_tier_full_lru",
    "mamba_decode",
    "random_0",
    "random_1",
    "reload_0",
    "reload_1",
    "decode_106",
    "unequal_0",
    "mamba_random_0",
    "mamba_random_2",
    *STOP_SCENARIOS,
]


def record_async(name: str, sc: dict[str, Any]) -> dict[str, Any]:
    """`scripts/vllm_offload_golden.py`'s `record_async` over a hybrid layout: vLLM 0.33.0's (and 0.34.0's)
    `EngineCore.step_with_batch_queue` (`vllm/v1/engine/core.py`) with a queue of two over the
    `AsyncScheduler` and the `OffloadingConnector`: while the scheduler has requests (or the connector
    jobs) a batch is scheduled and launched, empty or not; the engine waits for the oldest batch in flight
    (and feeds its outputs to `update_from_output`) when two are queued, or when the batch just launched
    computed nothing and the scheduler has nothing more. The worker (`Worker`, transfers of zero duration)
    runs each batch at its launch: a load is done in the batch that issued it, a store in the batch after,
    a flushed store in its own; the batch's `KVConnectorOutput` reaches the scheduler with its outputs,
    after the next batch was scheduled. A batch that computes lasts 1 ms, an empty one none; requests join
    before each schedule, those with `arrival <=` the engine's time (ms), which moves to a batch's end when
    the engine waits for it, and to the next arrival when nothing is queued or in flight. Recorded per
    batch that computed tokens: its start `t` (and its `end` where a flush lengthened it), the tokens
    scheduled, every request's table in every group as the schedule left it, the loads and stores issued
    since the batch before that computed (with their keys and a load's blocks per group, as `record`'s),
    the jobs flushed, the keys in the tier and their count, and the blocks free; and per batch launched,
    empty ones too (`batches`, in launch order), the tokens scheduled, the loads and stores it issued, the
    requests its schedule preempted and those whose finish it passed to the connector
    (`finished_req_ids`)."""
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    assert not sc.get("latency_ms"), "zero-duration transfers only"
    assert not sc.get("ms_per_block"), "zero-duration transfers only"
    init_none_hash(sha256)
    s, hash_bs = _scheduler(sc, async_scheduling=True)
    connector = s.connector.connector_scheduler
    manager = connector.manager
    block_hasher = get_request_block_hasher(hash_bs, sha256)
    hash_names: dict[bytes, tuple[int, list[list[int]]]] = {}  # block hash -> (tokens, prefix segments)

    def hasher(req: Any) -> list[bytes]:
        """vLLM's block hasher, naming each new hash by the tokens it ends at and its prefix's segments
        (as the request's tokens arrive: a finished request's last ones too)."""
        new = block_hasher(req)
        toks = list(req.all_token_ids)
        for i, h in enumerate(new, len(req.block_hashes)):
            if h not in hash_names:
                n = (i + 1) * hash_bs
                hash_names[h] = (n, _segments_of(toks, n, req.num_prompt_tokens, int(req.request_id)))
        return new

    steps: list[dict[str, Any]] = []
    since: dict[str, list[list[Any]]] = {
        k: [] for k in ("loads", "stores", "load_keys", "store_keys", "load_blocks")
    }
    flushed_since = 0
    tier_now: list[list[Any]] = []

    def scheduled(out: Any, meta: Any) -> None:
        nonlocal tier_now
        since["loads"] += [[j.req_id, len(j.src_spec.block_ids)] for j in meta.load_jobs.values()]
        since["stores"] += [[j.req_id, len(j.dst_spec.block_ids)] for j in meta.store_jobs.values()]
        since["load_keys"] += [
            [j.req_id, job_keys(connector, hash_names, jid)] for jid, j in meta.load_jobs.items()
        ]
        since["store_keys"] += [
            [j.req_id, job_keys(connector, hash_names, jid)] for jid, j in meta.store_jobs.items()
        ]
        since["load_blocks"] += [[j.req_id, list(j.dst_spec.group_sizes)] for j in meta.load_jobs.values()]
        tier_now = tier_chunks(manager, hash_names)

    def ran(out: Any, start: float, end: float, flushed: int, computes: bool) -> None:
        nonlocal since, flushed_since
        flushed_since += flushed
        if not computes:
            return
        coordinator = s.kv_cache_manager.coordinator
        steps.append(
            {
                "t": start,
                **({"end": end} if end != start + 1 else {}),
                "scheduled": dict(out.num_scheduled_tokens),
                "tables": {
                    r: [[b.block_id for b in g] for g in coordinator.get_blocks(r)]
                    for r in sorted(s.requests, key=int)
                    if any(coordinator.get_blocks(r))
                },
                **since,
                "flushed": flushed_since,
                "tier": tier_now,
                "tier_chunks": manager._num_chunks - manager._get_num_free_chunks(),
                "free_blocks": s.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
        )
        since = {k: [] for k in since}
        flushed_since = 0

    def stuck() -> str:
        return f"async_{name}: did not finish: {[(r, q.status, q.num_computed_tokens) for r, q in s.requests.items()]}"

    run = batch_queue(s, sc["requests"], hasher, scheduled, ran, 4000, stuck)
    return {
        "name": f"async_{name}",
        "vllm": vllm_version(),
        **sc,
        "async_scheduling": True,
        "arrivals": run["arrivals"],
        "steps": steps,
        "trailing": {**since, "flushed": flushed_since},
        "flushes": run["flushes"],
        "preemptions": run["preemptions"],
        "batches": run["batches"],
    }


def main(argv: list[str]) -> int:
    if os.environ.get("PYTHONHASHSEED") != "2":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "2"})
    out = Path(argv[1] if len(argv) > 1 else "tests/data/vllm_offload_hybrid")
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[2:])
    every_async = "async" in only  # (the word `async` alone: every one of `ASYNC_SCENARIOS`)
    for name, sc in SCENARIOS.items():
        if only and name not in only:
            continue
        data = record(name, sc)
        _write(out, name, data)
    for name in ASYNC_SCENARIOS:
        if not every_async and f"async_{name}" not in only:
            continue
        _write(out, f"async_{name}", record_async(name, {**SCENARIOS, **STOP_SCENARIOS}[name]))
    return 0


def _write(out: Path, name: str, data: dict[str, Any]) -> None:
    (out / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
    nl = sum(len(st["loads"]) for st in data["steps"])
    ns = sum(len(st["stores"]) for st in data["steps"])
    extra = f", {data['preemptions']} preemptions" if "preemptions" in data else ""
    print(f"{name}: {len(data['steps'])} steps, {nl} loads, {ns} stores, {data['flushes']} flushes{extra}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
