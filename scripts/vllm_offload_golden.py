"""Records vLLM's own CPU-tier decisions (its native KV offloading) into golden files.

Run with a Python that has vLLM installed (its scheduler, KV-cache manager and `OffloadingConnector`'s
scheduler side run on CPU; torch and the wheel's pure-Python dependencies are enough, no GPU):

    /tmp/venv-vllm/bin/python scripts/vllm_offload_golden.py tests/data/vllm_offload

Each scenario drives `vllm.v1.core.sched.scheduler.Scheduler` with `--kv-offloading-size` set (vLLM builds
the `OffloadingConnector` with its CPU manager, LRU or ARC) step by step. The workers are replaced by a
stand-in that reports each transfer done when kvsim would see it done (`Worker`; DESIGN.md §CPU tier,
"Time"): with transfers of zero duration, a load in the step that issued it and a store in the step after,
a flushed job at once; with a scenario's `latency_ms` and `ms_per_block` (the `slow_*` ones), later, the
clock jumping as kvsim's stall does and a flushing step waiting for its flushed stores before it computes
(vLLM's worker order). Each step records its start on kvsim's clock (`start`) and, where a flush
lengthened it, its `end`. Requests join before a
step that follows one which computed tokens (or before the first step, when vLLM holds nothing at all, or
after a step kvsim would stall on, half a millisecond later, where no transfer ends before then: kvsim's
stall jumps to that arrival), so that kvsim, whose steps that compute nothing take no time, sees them at
the same point. These clock, arrival and stall rules are one helper, `Clock`, which the hybrid recorder
(`scripts/vllm_offload_hybrid_golden.py`) imports with `Worker`. Per step that
computed tokens it records the tokens each request was scheduled, every request's block table, the loads
and stores issued since the step before (request and chunks) and the chunks in the tier.
`tests/test_offload_golden.py` replays each scenario on both of kvsim's engines. kvsim never imports
vLLM: CI reads the files only.

`ASYNC_SCENARIOS` are also recorded under vLLM's `AsyncScheduler` (`record_async`: the engine core's batch
queue of two, transfers of zero duration) into another folder, the one the async files live in:

    PYTHONPATH=/tmp/ah_vllm033 /tmp/venv-vllm034/bin/python scripts/vllm_offload_golden.py \
        tests/data/vllm_offload_async async_store_then_load ...

(the names `async_<scenario>`; with no names it records every scenario into the one folder). So are
`STOP_SCENARIOS`, only there: requests `(arrival, segments, max_tokens, stop_at)` that stop early, at their
`stop_at`-th output token, by a stop token below their `max_tokens` (`sampling_params`), so that vLLM
schedules each one token more, discarded (DESIGN.md §Engine, "Asynchronous scheduling").
`tests/test_offload_async_golden.py` replays them (DESIGN.md §Engine, "Asynchronous scheduling", *With a CPU
tier*); the hybrid recorder's `record_async` drives the same queue (`batch_queue`) over several KV-cache
groups.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

# (the release helpers are the hybrid recorder's, one place; this script's folder is on sys.path when run)
from vllm_hybrid_golden import req_id_to_index, sampled_tokens, sampling_params, vllm_version
from vllm_stops import with_stops

# Content `c`'s token `i` is token id `c * 100_000 + i` (kvsim's segment (c, n) is the first n tokens of
# content c); request r's k-th output token is 900_000 + r * 1000 + k (never shared).
SCENARIOS: dict[str, dict[str, Any]] = {
    "store_then_load": {
        # A small GPU pool: the shared prefix is evicted from the GPU and comes back from the tier.
        "num_blocks": 14,
        "block_size": 4,
        "cpu_chunks": 16,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(1, 24)], 3),
            (4, [(2, 30)], 3),
            (8, [(1, 24), (3, 5)], 4),
            (12, [(1, 24)], 2),
        ],
    },
    "pending_store_defers": {
        # The second request's prefix is in the tier but still being stored: it waits a step.
        "num_blocks": 40,
        "block_size": 4,
        "cpu_chunks": 20,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "requests": [(0, [(5, 16)], 3), (1, [(5, 16)], 2), (1, [(5, 12), (6, 3)], 2)],
    },
    "being_loaded_defers": {
        # Two requests want the same chunks from the tier: the second waits for the first's load.
        "num_blocks": 12,
        "block_size": 4,
        "cpu_chunks": 20,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(7, 20)], 2),
            (3, [(8, 30)], 2),
            (6, [(7, 20), (9, 2)], 3),
            (6, [(7, 20), (10, 3)], 3),
        ],
    },
    "tier_full": {
        # Four chunks of tier: stores that cannot evict enough are dropped and offered again later.
        "num_blocks": 20,
        "block_size": 4,
        "cpu_chunks": 4,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(11, 12)], 6),
            (0, [(12, 10)], 6),
            (2, [(13, 14)], 4),
            (9, [(11, 12), (14, 2)], 2),
            (9, [(12, 8)], 2),
        ],
    },
    "two_blocks_per_chunk": {
        "num_blocks": 16,
        "block_size": 4,
        "blocks_per_chunk": 2,
        "cpu_chunks": 10,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(15, 26)], 2),
            (3, [(16, 30)], 2),
            (6, [(15, 26), (17, 4)], 2),
            (7, [(15, 17)], 2),
        ],
    },
    "two_blocks_per_chunk_load": {
        # Two blocks a chunk, a prefix loaded back from the tier (a GPU hit ending inside a chunk).
        "num_blocks": 12,
        "block_size": 4,
        "blocks_per_chunk": 2,
        "cpu_chunks": 20,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [(0, [(40, 26)], 2), (3, [(41, 30)], 2), (6, [(40, 26), (42, 3)], 2), (7, [(40, 19)], 2)],
    },
    "two_loads_at_once": {
        # Two requests whose prefixes (evicted from the GPU) come back from the tier in one step: two loads
        # at once, one after the other on the link.
        "num_blocks": 20,
        "block_size": 4,
        "cpu_chunks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(50, 24)], 2),
            (0, [(51, 20)], 2),
            (3, [(52, 44)], 2),
            (5, [(53, 40)], 2),
            (8, [(50, 24), (54, 3)], 2),
            (8, [(51, 20), (55, 3)], 2),
        ],
    },
    "preempt_with_store_in_flight": {
        # A preemption while the victim's stores are in flight: vLLM flushes them.
        "num_blocks": 14,
        "block_size": 4,
        "cpu_chunks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 16,
        "requests": [(0, [(18, 20)], 14), (0, [(19, 18)], 14), (1, [(20, 9)], 12)],
    },
    "whole_prompt_loaded": {
        # A prompt of whole chunks, all in the tier: its last token is computed again.
        "num_blocks": 10,
        "block_size": 4,
        "cpu_chunks": 20,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 32,
        "requests": [(0, [(21, 16)], 2), (3, [(22, 28)], 2), (6, [(21, 16)], 3)],
    },
    "arc_eviction": {
        "num_blocks": 12,
        "block_size": 4,
        "cpu_chunks": 6,
        "eviction_policy": "arc",
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(23, 12)], 2),
            (2, [(24, 12)], 2),
            (4, [(23, 12), (25, 2)], 2),
            (6, [(26, 12)], 2),
            (8, [(23, 12)], 2),
            (10, [(24, 12)], 2),
        ],
    },
    "hit_fences_finished_store": {
        # A request finishes with its prompt's last chunk still being stored; the next one hits those
        # blocks on the GPU in the next step: vLLM flushes the store.
        "num_blocks": 30,
        "block_size": 4,
        "cpu_chunks": 20,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "requests": [(0, [(30, 16)], 1), (1, [(30, 16), (31, 3)], 2), (1, [(32, 8)], 1)],
    },
    "store_threshold": {
        "num_blocks": 12,
        "block_size": 4,
        "cpu_chunks": 10,
        "store_threshold": 2,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(27, 12)], 2),
            (2, [(28, 16)], 2),
            (4, [(27, 12)], 2),
            (7, [(29, 20)], 2),
            (10, [(27, 12)], 2),
        ],
    },
}


def random_scenario(seed: int) -> dict[str, Any]:
    """Traffic with a few shared prefixes among requests of their own on a GPU pool too small to keep
    the prefixes (so hits move to the tier) and a small tier (LRU or ARC)."""
    rng = random.Random(seed)
    bs = rng.choice([2, 4])
    num_blocks = rng.randint(10, 20)
    prefixes = [(100 + seed * 10 + k, rng.randint(4, 6 * bs)) for k in range(rng.randint(1, 3))]
    requests = []
    for i in range(rng.randint(8, 16)):
        segments = []
        if rng.random() < 0.6:
            c, n = rng.choice(prefixes)
            segments.append((c, rng.randint(max(1, n // 2), n)))
        if rng.random() < 0.7 or not segments:
            segments.append((200 + seed * 20 + i, rng.randint(1, 5 * bs)))
        tokens = rng.randint(1, 8)
        # Every request fits the pool (vLLM would wait for ever for one that does not; kvsim refuses it).
        if -(-(sum(n for _, n in segments) + tokens) // bs) <= num_blocks - 2:
            requests.append((rng.randint(0, 30), segments, tokens))
    requests.sort(key=lambda r: r[0])
    return {
        "num_blocks": num_blocks,
        "block_size": bs,
        "blocks_per_chunk": rng.choice([1, 1, 2]),
        "cpu_chunks": rng.randint(3, 16),
        "eviction_policy": rng.choice(["lru", "lru", "arc"]),
        "store_threshold": rng.choice([0, 0, 0, 2]),
        "max_num_seqs": rng.randint(2, 4),
        "max_num_batched_tokens": rng.choice([8, 16, 32]),
        "requests": requests,
    }


for _seed in range(16):
    SCENARIOS[f"random_{_seed}"] = random_scenario(_seed)

# Transfers that take time (kvsim's `kv_offloading_latency_ps` and `_ps_per_block`, on its clock of 1 ms a
# step; times exact in binary): loads that last several steps while other requests run and a second request
# waits for chunks being loaded, stores in flight across steps (their chunks neither hit nor evicted until
# done), flushes that lengthen their step, transfers queued one after the other on the link.
for _name, _latency, _per_block in [
    ("store_then_load", 0.25, 0.5),
    ("pending_store_defers", 0.5, 0.75),
    ("being_loaded_defers", 0.25, 0.75),
    ("tier_full", 0.5, 0.5),
    ("preempt_with_store_in_flight", 0.25, 0.5),
    ("whole_prompt_loaded", 1.5, 0.25),
    ("hit_fences_finished_store", 0.25, 1.0),
    ("two_blocks_per_chunk", 0.0, 0.625),
    ("arc_eviction", 0.25, 0.5),
    ("store_threshold", 0.5, 0.5),
    ("two_blocks_per_chunk_load", 0.75, 0.5),
    ("two_loads_at_once", 0.5, 0.5),
]:
    SCENARIOS[f"slow_{_name}"] = {**SCENARIOS[_name], "latency_ms": _latency, "ms_per_block": _per_block}
for _name, _latency, _per_block in [
    ("store_then_load", 20.0, 5.0),
    ("being_loaded_defers", 10.0, 3.0),
    ("preempt_with_store_in_flight", 3.0, 2.0),
    ("two_blocks_per_chunk_load", 6.0, 2.0),
]:
    SCENARIOS[f"slow_very_{_name}"] = {**SCENARIOS[_name], "latency_ms": _latency, "ms_per_block": _per_block}
for _seed in range(16, 28):
    _rng = random.Random(_seed)
    SCENARIOS[f"slow_random_{_seed}"] = {
        **random_scenario(_seed),
        "latency_ms": _rng.choice([0.0, 0.25, 1.0, 2.5]),
        "ms_per_block": _rng.choice([0.125, 0.25, 0.5, 1.0]),
    }

MAX_MODEL_LEN = 256
PAGE_BYTES = 4096  # one GPU block's bytes in the recorder's KV-cache config


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


def _scheduler(sc: dict[str, Any], async_scheduling: bool = False) -> Any:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from vllm.v1.structured_output import StructuredOutputManager

    bs, n = sc["block_size"], sc["num_blocks"]
    bpc = sc.get("blocks_per_chunk", 1)
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
        block_size=bs,
        enable_prefix_caching=True,
        kv_offloading_size=sc["cpu_chunks"] * PAGE_BYTES * bpc / 2**30,
    )
    vc = VllmConfig(
        model_config=mc, scheduler_config=schc, cache_config=cc, device_config=DeviceConfig("cpu")
    )
    extra = vc.kv_transfer_config.kv_connector_extra_config
    extra["eviction_policy"] = sc.get("eviction_policy", "lru")
    if bpc != 1:
        extra["blocks_per_chunk"] = bpc
    if sc.get("store_threshold"):
        extra["store_threshold"] = sc["store_threshold"]
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16)
    kvc = KVCacheConfig(
        num_blocks=n,
        kv_cache_tensors=[
            KVCacheTensor(
                size=n * PAGE_BYTES, layers=["f0"], layer_stride=n * PAGE_BYTES, block_stride=PAGE_BYTES
            )
        ],
        kv_cache_groups=[KVCacheGroupSpec(["f0"], spec)],
    )
    vc.cache_config.num_gpu_blocks = n
    if async_scheduling:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        return AsyncScheduler(vc, kvc, StructuredOutputManager(vc), block_size=bs, hash_block_size=bs)
    return Scheduler(vc, kvc, StructuredOutputManager(vc), block_size=bs, hash_block_size=bs)


class Worker:
    """Stands in for the workers, on kvsim's clock (DESIGN.md §CPU tier, "Time"), in the order of vLLM
    0.33.0's `OffloadingConnectorWorker` (`v1/worker/gpu_model_runner.py` calls its
    `handle_preemptions` before the forward pass): a transfer of `n` GPU blocks lasts `latency + n *
    per_block` ms, one after the other per direction; at a step's start the stores deferred from the step
    before and the step's flushed stores are submitted and the flushed ones waited for; then the step's
    loads start and its forward pass runs; its other stores are deferred to the next step's start. A
    transfer is reported done by the first step whose end is at or after its end. With both times 0
    (kvsim's transfers of zero duration): a load done in the step that issued it, a store in the step
    after, a flushed one in its own."""

    def __init__(self, latency: float = 0.0, per_block: float = 0.0) -> None:
        self.latency, self.per_block = latency, per_block
        self.free = {True: 0.0, False: 0.0}  # per direction (is load): when its last transfer ends
        # (end, step that submitted it, job, request, is load)
        self.pending: list[tuple[float, int, int, str, bool]] = []
        self.deferred: list[tuple[int, str, int]] = []  # the step before's stores: (job, request, blocks)

    def _end(self, is_load: bool, start: float, blocks: int) -> float:
        end = max(start, self.free[is_load]) + self.latency + blocks * self.per_block
        self.free[is_load] = end
        return end

    def earliest_end(self) -> float | None:
        return min((p[0] for p in self.pending), default=None)

    def run(self, step: int, meta: Any, start: float, end: float) -> tuple[Any, int, float]:
        """Step `step` from `start`, computing until `end` if it computes (`end > start`): its output,
        the jobs it flushed and when it ends (its compute after the flush's wait)."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput

        compute = end - start
        flush = set(meta.jobs_to_flush or ())
        submit, later = self.deferred, []
        for jid, job in meta.store_jobs.items():
            (submit if jid in flush else later).append((jid, job.req_id, len(job.src_spec.block_ids)))
        for jid, rid, blocks in submit:
            self.pending.append((self._end(False, start, blocks), step, jid, rid, False))
        self.deferred = later
        wait = max([start] + [p[0] for p in self.pending if p[2] in flush])
        for jid, job in meta.load_jobs.items():
            self.pending.append(
                (self._end(True, wait, len(job.dst_spec.block_ids)), step, jid, job.req_id, True)
            )
        end = wait + compute
        done = [p for p in self.pending if p[0] <= end]
        self.pending = [p for p in self.pending if not p[0] <= end]
        wm = OffloadingWorkerMetadata()
        received = set()
        for _, _, jid, rid, is_load in done:
            wm.mark_completed(jid)
            if is_load:
                received.add(rid)
        output = KVConnectorOutput(
            finished_recving=received, kv_connector_worker_meta=wm if wm.completed_jobs else None
        )
        return output, len(flush), end


class Clock:
    """kvsim's clock (ms) over a recorder's steps, both recorders' (DESIGN.md §CPU tier, "Time"): a step
    that computes tokens lasts 1 ms after the stores it flushes end (the worker's `run`), one that does not
    computes nothing; requests that join an idle vLLM (after its steps that only finished transfers) or one
    stalled on transfers join kvsim half a millisecond later, so that kvsim too observes those transfers
    before they arrive (a stall's requests wait for a transfer ending by then, which kvsim sees first). A
    step that computed nothing, issued nothing and saw nothing done is kvsim's stall: the next step starts
    at the earliest end of a transfer in flight (unless requests join then). Requests join before a step
    that follows one which computed tokens, before the first step, when vLLM holds nothing at all, and
    after a stall."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.now = 0.0
        self.last_computed = True
        self.stalled = False
        self.stall_joins = 0  # requests that joined while transfers were in flight and nothing else happened

    def join(self, step: int, pending: list[tuple[int, Any]], idle: bool) -> list[tuple[int, Any]]:
        """The requests of `pending` (`(id, (arrival step, ...))`, taken out of it) that join before step
        `step`, `idle` when vLLM holds no request and no job; the clock moved to their arrival (`now`), or
        to a stall's end."""
        due: list[tuple[int, Any]] = []
        if self.last_computed or idle or self.stalled:
            due = [(rid, r) for rid, r in pending if r[0] <= step]
            if due and not self.last_computed:
                # (after a stall: kvsim jumps to the earliest of the arrival and a transfer's end; one that
                # ends by the arrival is seen first, the requests join after the jump to it)
                first_end = self.worker.earliest_end()
                if self.stalled and first_end is not None and first_end <= self.now + 0.5:
                    due = []
                else:
                    self.now += 0.5
                    self.stall_joins += len(due) if self.stalled and first_end is not None else 0
        if self.stalled and not due and (first_end := self.worker.earliest_end()) is not None:
            self.now = max(self.now, first_end)
        for d in due:
            pending.remove(d)
        return due

    def run(self, step: int, meta: Any, computes: bool) -> tuple[Any, int, float, float]:
        """The worker's step `step` from `now` (`computes`: it scheduled tokens): its output, the jobs it
        flushed, its start and its end (`now` after)."""
        start = self.now
        output, flushed, end = self.worker.run(step, meta, start, start + 1 if computes else start)
        done = output.kv_connector_worker_meta is not None
        self.stalled = not (computes or meta.load_jobs or meta.store_jobs or done)
        self.now, self.last_computed = end, computes
        return output, flushed, start, end

    @staticmethod
    def times(start: float, end: float) -> dict[str, float]:
        """A computing step's times as recorded: its `start`, and its `end` where a flush lengthened it."""
        return {"start": start, "end": end} if end != start + 1 else {"start": start}


def record(name: str, sc: dict[str, Any]) -> dict[str, Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    init_none_hash(sha256)
    s = _scheduler(sc)
    bs = sc["block_size"]
    connector = s.connector.connector_scheduler
    manager = connector.manager
    hasher = get_request_block_hasher(bs, sha256)
    worker = Worker(sc.get("latency_ms", 0.0), sc.get("ms_per_block", 0.0))
    pending = list(enumerate(sc["requests"]))
    steps: list[dict[str, Any]] = []
    arrivals: dict[int, float] = {}
    loads: list[list[Any]] = []
    stores: list[list[Any]] = []
    flushes = 0
    clock = Clock(worker)
    for step in range(600):
        for rid, (_, segments, max_tokens) in clock.join(
            step, pending, not s.has_requests() and not connector._jobs
        ):
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            s.add_request(Request(str(rid), token_ids(segments), params, None, block_hasher=hasher))
            arrivals[rid] = clock.now
        out = s.schedule()
        meta = out.kv_connector_metadata
        for job in meta.load_jobs.values():
            loads.append(
                [job.req_id, len(job.src_spec.block_ids) if hasattr(job.src_spec, "block_ids") else -1]
            )
        for job in meta.store_jobs.values():
            stores.append(
                [job.req_id, len(job.dst_spec.block_ids) if hasattr(job.dst_spec, "block_ids") else -1]
            )
        ids = list(out.num_scheduled_tokens)
        output, flushed, start, end = clock.run(step, meta, bool(ids))
        flushes += flushed
        if ids:
            steps.append(
                {
                    "scheduled": dict(out.num_scheduled_tokens),
                    "tables": _tables(s),
                    "loads": loads,
                    "stores": stores,
                    "tier_chunks": manager._num_chunks - manager._get_num_free_chunks(),
                    **clock.times(start, end),
                }
            )
            loads, stores = [], []
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
        s.update_from_output(out, mro)
        if not s.has_requests() and not pending and not connector._jobs:
            break
    else:
        raise RuntimeError(f"{name}: did not finish")
    return {
        "name": name,
        "vllm": vllm_version(),
        **sc,
        "arrivals": [arrivals[i] for i in range(len(sc["requests"]))],
        "steps": steps,
        "trailing": {"loads": loads, "stores": stores},
        "flushes": flushes,
        **({"stall_joins": clock.stall_joins} if clock.stall_joins else {}),
    }


# Scenarios also recorded under vLLM's `AsyncScheduler` with the engine core's batch queue of two
# (`async_<name>.json`, `record_async`), transfers of zero duration.
ASYNC_SCENARIOS = [
    "store_then_load",
    "pending_store_defers",
    "being_loaded_defers",
    "tier_full",
    "preempt_with_store_in_flight",
    "whole_prompt_loaded",
    "hit_fences_finished_store",
    "two_blocks_per_chunk_load",
    "random_0",
    "random_1",
    "random_2",
    "random_3",
]


# Requests that stop early (a fourth element, `stop_at`, below `max_tokens`: `sampling_params`), recorded
# only under the `AsyncScheduler` (`async_<name>.json`), which schedules such a request one token more
# (discarded) after the token that stops it.
STOP_SCENARIOS: dict[str, dict[str, Any]] = {
    "stop_new_block": {
        # Request 0 stops at its 4th token of 12: its discarded token (position 8) starts a third block,
        # freed at that batch's output (`defer_block_free`); request 1 stops at its prefill's token;
        # request 3, sharing request 0's prompt, waits for the blocks they hold.
        "num_blocks": 9,
        "block_size": 4,
        "cpu_chunks": 16,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(60, 5)], 12, 4),
            (0, [(61, 7)], 6, 1),
            (1, [(62, 14)], 3),
            (2, [(60, 5), (63, 8)], 9, 5),
            (6, [(64, 3)], 4, 2),
            (7, [(62, 14)], 5, 3),
        ],
    },
    "stop_store_then_load": with_stops(SCENARIOS["store_then_load"], 4),
    "stop_preempt_with_store_in_flight": with_stops(SCENARIOS["preempt_with_store_in_flight"], 5),
    "stop_tier_full": with_stops(SCENARIOS["tier_full"], 6),
    **{f"stop_random_{seed}": with_stops(SCENARIOS[f"random_{seed}"], seed) for seed in range(4)},
}
ASYNC_SCENARIOS += list(STOP_SCENARIOS)


def _tables(s: Any) -> dict[str, list[int]]:
    """Each request's block ids after a step (those holding any), in request order."""
    coordinator = s.kv_cache_manager.coordinator
    return {
        r: [b.block_id for b in coordinator.get_blocks(r)[0]]
        for r in sorted(s.requests, key=int)
        if coordinator.get_blocks(r)[0]
    }


def record_async(name: str, sc: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.33.0's `EngineCore.step_with_batch_queue` (`vllm/v1/engine/core.py`) with a queue of two over
    the `AsyncScheduler` and the `OffloadingConnector`: while the scheduler has requests (or the connector
    jobs) a batch is scheduled and launched, empty or not; the engine waits for the oldest batch in flight
    (and feeds its outputs to `update_from_output`) when two are queued, or when the batch just launched
    computed nothing and the scheduler has nothing more. The worker (`Worker`, transfers of zero duration)
    runs each batch at its launch, in order: a load is done in the batch that issued it, a store in the
    batch after, a flushed store in its own; the batch's `KVConnectorOutput` reaches the scheduler with its
    outputs, after the next batch was scheduled. A batch that computes lasts 1 ms, an empty one none;
    requests join the scheduler (`_process_input_queue`) before each schedule, those with `arrival <=` the
    engine's time, which moves to a batch's end when the engine waits for it, and to the next arrival when
    nothing is queued or in flight. Recorded per batch that computed tokens: its start `t`, the tokens
    scheduled, every request's table as the schedule left it, the loads and stores issued since the batch
    before that computed, the chunks in the tier, and the blocks free; and per batch launched, empty ones
    too (`batches`, in launch order), the tokens scheduled, the loads and stores it issued, the requests
    its schedule preempted and those whose finish it passed to the connector (`finished_req_ids`)."""
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    assert not sc.get("latency_ms"), "zero-duration transfers only"
    assert not sc.get("ms_per_block"), "zero-duration transfers only"
    init_none_hash(sha256)
    s = _scheduler(sc, async_scheduling=True)
    manager = s.connector.connector_scheduler.manager
    hasher = get_request_block_hasher(sc["block_size"], sha256)
    steps: list[dict[str, Any]] = []
    since: dict[str, list[list[Any]]] = {"loads": [], "stores": []}

    def scheduled(out: Any, meta: Any) -> None:
        since["loads"] += [[j.req_id, len(j.src_spec.block_ids)] for j in meta.load_jobs.values()]
        since["stores"] += [[j.req_id, len(j.dst_spec.block_ids)] for j in meta.store_jobs.values()]

    def ran(out: Any, start: float, end: float, flushed: int, computes: bool) -> None:
        if not computes:
            return
        steps.append(
            {
                "t": start,
                **({"end": end} if end != start + 1 else {}),
                "scheduled": dict(out.num_scheduled_tokens),
                "tables": _tables(s),
                "loads": since["loads"],
                "stores": since["stores"],
                "tier_chunks": manager._num_chunks - manager._get_num_free_chunks(),
                "free_blocks": s.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
        )
        since["loads"], since["stores"] = [], []

    run = batch_queue(
        s, sc["requests"], hasher, scheduled, ran, 2000, lambda: f"async_{name}: did not finish"
    )
    return {
        "name": f"async_{name}",
        "vllm": vllm_version(),
        **sc,
        "async_scheduling": True,
        "arrivals": run["arrivals"],
        "steps": steps,
        "trailing": {"loads": since["loads"], "stores": since["stores"]},
        "flushes": run["flushes"],
        "preemptions": run["preemptions"],
        "batches": run["batches"],
    }


def batch_queue(
    s: Any,
    requests: list[Any],
    hasher: Any,
    scheduled: Any,
    ran: Any,
    limit: int,
    stuck: Any,
) -> dict[str, Any]:
    """`record_async`'s engine (its docstring), over scheduler `s` (an `AsyncScheduler` with the
    `OffloadingConnector`) and `requests` (`(arrival, segments, max_tokens)` each, in id order), shared by the
    hybrid recorder's `record_async`: `scheduled(out, meta)` is called on each schedule, before its batch
    runs, and `ran(out, start, end, flushed, computes)` after it ran, empty or not (`flushed`: the jobs
    flushed in it; `computes`: whether it computed tokens). Returns the arrivals (the engine's time each request joined, by id), the flushes
    and preemptions counted, and every batch launched (`batches`); raises `RuntimeError(stuck())` when
    `limit` turns do not finish."""
    from collections import deque

    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    connector = s.connector.connector_scheduler
    worker = Worker()
    pending = list(enumerate(requests))
    arrivals: dict[int, float] = {}
    batches: list[dict[str, Any]] = []  # every batch launched, empty ones too
    flushes = preemptions = 0
    queue: deque[tuple[Any, Any, dict[str, bool], float]] = deque()
    now = 0.0  # the engine's time
    gpu_free = 0.0  # when the last batch launched ends
    batch = 0
    for _ in range(limit):
        for rid, r in list(pending):
            if r[0] <= now:
                params = sampling_params(SamplingParams, rid, r)
                s.add_request(Request(str(rid), token_ids(r[1]), params, None, block_hasher=hasher))
                arrivals[rid] = now
                pending.remove((rid, r))
        if s.has_requests() or connector._jobs:
            out = s.schedule()
            meta = out.kv_connector_metadata
            computes = out.total_num_scheduled_tokens > 0
            preemptions += len(out.preempted_req_ids or ())
            batches.append(
                {
                    "scheduled": dict(out.num_scheduled_tokens),
                    "loads": [[j.req_id, len(j.src_spec.block_ids)] for j in meta.load_jobs.values()],
                    "stores": [[j.req_id, len(j.dst_spec.block_ids)] for j in meta.store_jobs.values()],
                    "preempted": sorted(out.preempted_req_ids or (), key=int),
                    "finished": sorted(out.finished_req_ids, key=int),
                }
            )
            scheduled(out, meta)
            start = max(now, gpu_free)
            output, flushed, end = worker.run(batch, meta, start, start + (1 if computes else 0))
            flushes += flushed
            batch += 1
            gpu_free = end
            ran(out, start, end, flushed, computes)
            # A request whose scheduled tokens reach its end samples a token (vLLM's `is_prefill_chunk`).
            sampled = {r: not s.requests[r].is_prefill_chunk for r in out.num_scheduled_tokens}
            queue.appendleft((out, output, sampled, end))
            if len(queue) < 2 and (computes or s.has_requests() or connector._jobs):
                continue
        elif not queue:
            if not pending:
                break
            now = max(now, min(r[0] for _, r in pending))
            continue
        out, output, sampled, end = queue.pop()
        now = max(now, end)
        ids = list(out.num_scheduled_tokens)
        tokens = sampled_tokens(s, ids, sampled)
        mro = ModelRunnerOutput(
            req_ids=ids,
            **req_id_to_index(ModelRunnerOutput, ids),
            sampled_token_ids=tokens,
            kv_connector_output=output,
        )
        s.update_from_output(out, mro)
    else:
        raise RuntimeError(stuck())
    return {
        "arrivals": [arrivals[i] for i in range(len(requests))],
        "flushes": flushes,
        "preemptions": preemptions,
        "batches": batches,
    }


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "tests/data/vllm_offload")
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[2:])
    for name, sc in SCENARIOS.items():
        if only and name not in only:
            continue
        data = record(name, sc)
        (out / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"{name}: {len(data['steps'])} steps, {data['flushes']} flushes")
    for name in ASYNC_SCENARIOS:
        if only and f"async_{name}" not in only:
            continue
        data = record_async(name, {**SCENARIOS, **STOP_SCENARIOS}[name])
        (out / f"async_{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"async_{name}: {len(data['steps'])} steps, {data['flushes']} flushes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
