"""Records vLLM's own CPU-tier decisions (its native KV offloading) on hybrid KV-cache layouts into golden files.

Run with a Python that has vLLM installed (the venv of `scripts/vllm_hybrid_golden.py`'s docstring: its
scheduler, KV-cache manager and `OffloadingConnector`'s scheduler side run on CPU, no GPU):

    /tmp/venv-vllm/bin/python scripts/vllm_offload_hybrid_golden.py tests/data/vllm_offload_hybrid [NAME ...]

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
import random
import sys
from pathlib import Path
from typing import Any

# The single-group recorder's stand-in worker and clock (kvsim's).
from vllm_offload_golden import Clock, Worker, req_id_to_index, vllm_version

# groups: (kind, window, block_size); kinds "full", "sliding_window", "chunked_local", "mamba" (align mode).
SCENARIOS: dict[str, dict[str, Any]] = {
    "swa_store_then_load": {
        # (a) A window of 8 tokens beside full attention; a pool too small to keep the shared prefix, which
        # comes back from the tier: full attention's every chunk, the window's chunks ending at the replay
        # boundary floor((P - 1) / 4) * 4.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 20,
        "cpu_chunks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(1, 24)], 3),
            (4, [(2, 30)], 3),
            (8, [(1, 24), (3, 5)], 4),
            (12, [(1, 24)], 2),
        ],
    },
    "swa_aligned_prompt_reload": {
        # (a) The same prompt again (P a multiple of the chunk): the hit stops at floor((P - 1) / 4) * 4,
        # the window's chunks there; and a prompt that is the prefix plus one token.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 17,
        "cpu_chunks": 40,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(4, 20)], 2),
            (3, [(5, 28)], 2),
            (6, [(4, 20)], 2),
            (9, [(4, 20), (6, 1)], 2),
            (12, [(4, 17)], 2),
        ],
    },
    "swa_pending_store_defers": {
        # (b) The second request's prefix is in the tier but still being stored: it waits a step.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 40,
        "cpu_chunks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "requests": [(0, [(7, 17)], 3), (1, [(7, 17)], 2), (1, [(7, 13), (8, 3)], 2)],
    },
    "swa_being_loaded_defers": {
        # (b) Two requests want the same chunks from the tier: the second waits for the first's load.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 24,
        "cpu_chunks": 40,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(9, 21)], 2),
            (3, [(10, 36)], 2),
            (6, [(9, 21), (11, 2)], 3),
            (6, [(9, 21), (12, 3)], 3),
        ],
    },
    "swa_tier_full_lru": {
        # (c) A tier of six chunks shared by both groups' keys: stores that cannot evict enough are
        # dropped and offered again; LRU evicts across groups.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 24,
        "cpu_chunks": 6,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 16,
        "requests": [
            (0, [(13, 12)], 6),
            (0, [(14, 10)], 6),
            (2, [(15, 14)], 4),
            (9, [(13, 12), (16, 2)], 2),
            (9, [(14, 9)], 2),
            (14, [(15, 14), (17, 3)], 2),
        ],
    },
    "swa_tier_arc": {
        # (c) The same traffic shape under ARC.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 11,
        "cpu_chunks": 12,
        "eviction_policy": "arc",
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(18, 13)], 2),
            (2, [(19, 13)], 2),
            (4, [(18, 13), (20, 2)], 2),
            (6, [(21, 13)], 2),
            (8, [(18, 13)], 2),
            (10, [(19, 13)], 2),
            (12, [(22, 14)], 2),
            (14, [(18, 13)], 2),
        ],
    },
    "swa_window_chunks_missing": {
        # (d) Request 0 (30 tokens) stores full attention's chunks to 28 and the window's at 24 and 28
        # only (its replay boundary 29 floored); fillers evict the GPU. Request 2 shares 20 tokens: full
        # attention's chunks hit to 20 but no window chunk ends there, so the tier gives nothing (it stores
        # the window at its junction 20, the GPU's full-attention-only hit, and at its own boundary 28);
        # request 4 shares 26: the window's chunks at 20 (request 2's) and 24 give a hit of 24; request 6
        # shares 30: a hit of 28.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 24,
        "cpu_chunks": 80,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(23, 30)], 2),
            (3, [(24, 40)], 2),
            (6, [(23, 20), (25, 10)], 2),
            (9, [(26, 40)], 2),
            (12, [(23, 26), (27, 6)], 2),
            (15, [(28, 40)], 2),
            (18, [(23, 30), (29, 5)], 2),
        ],
    },
    "swa_junction_stored": {
        # A shared-prefix junction: request 1 hits the GPU's full attention to 16 but the window there was
        # never kept, so the junction 16 is its shared_prefix_boundary: the window's blocks ending there
        # are stored too; request 2 then finds them in the tier.
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 30,
        "cpu_chunks": 60,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 40,
        "requests": [
            (0, [(27, 26)], 2),
            (2, [(27, 16), (28, 14)], 2),
            (4, [(29, 40)], 2),
            (6, [(27, 16), (30, 9)], 2),
        ],
    },
    "swa_two_blocks_per_chunk": {
        # (e) blocks_per_chunk 2 with two groups (a chunk 8 tokens; the window's mask in blocks).
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 22,
        "blocks_per_chunk": 2,
        "cpu_chunks": 20,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(31, 26)], 2),
            (3, [(32, 36)], 2),
            (6, [(31, 26), (33, 4)], 2),
            (7, [(31, 17)], 2),
        ],
    },
    "swa_window_not_block_multiple": {
        # A window of 9 (≡ 1 mod the block): the store keeps cdiv(8, 4) = 2 blocks at the boundary, the
        # lookup wants cdiv(9, 4) = 3 chunks.
        "groups": [("sliding_window", 9, 4), ("full", 0, 4)],
        "num_blocks": 22,
        "cpu_chunks": 40,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 32,
        "requests": [(0, [(34, 26)], 2), (3, [(35, 36)], 2), (6, [(34, 26), (36, 3)], 2)],
    },
    "gemma_like_three_windows": {
        # Several sliding-window groups (windows 12, 6, 16) and full attention: the fixed point. (Layers
        # of one spec make one group in vLLM's grouping, and in kvsim's: the windows differ.)
        "groups": [
            ("sliding_window", 12, 4),
            ("sliding_window", 6, 4),
            ("sliding_window", 16, 4),
            ("full", 0, 4),
        ],
        "num_blocks": 38,
        "cpu_chunks": 60,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(37, 26)], 2),
            (3, [(38, 30)], 2),
            (6, [(37, 26), (39, 6)], 2),
            (9, [(37, 22)], 2),
        ],
    },
    "swa_preempt_store_in_flight": {
        # Preemption while the victim's stores are in flight, and window blocks freed during prefill
        # re-allocated (a store fencing a sliding-window block is flushed).
        "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
        "num_blocks": 18,
        "cpu_chunks": 60,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 8,
        "requests": [(0, [(40, 20)], 14), (0, [(41, 18)], 14), (1, [(42, 9)], 12)],
    },
    "chunked_local_full": {
        # (g) Chunked local attention (chunk 8) beside full attention.
        "groups": [("chunked_local", 8, 4), ("full", 0, 4)],
        "num_blocks": 22,
        "cpu_chunks": 60,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(43, 26)], 2),
            (3, [(44, 36)], 2),
            (6, [(43, 26), (45, 4)], 2),
            (8, [(43, 19)], 2),
            (10, [(43, 24)], 2),
        ],
    },
    "mamba_align_full": {
        # (h) A Mamba group in align mode beside full attention (block 16).
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 14,
        "cpu_chunks": 60,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(46, 100)], 2),
            (3, [(47, 150)], 2),
            (8, [(46, 100), (48, 20)], 2),
            (11, [(46, 100)], 2),
        ],
    },
    "mamba_junction_reload": {
        # (h) Mamba beside full attention, a pool too small to keep prompts: request 0's state is stored
        # at its replay boundary (96) only; request 2 shares 64 tokens of it, which full attention's
        # chunks hold but no state does (no load): it computes them and its state at the junction (64)
        # is keyed and stored; requests 4 and 5 then load 64 and 96 tokens (a state chunk each, the
        # full group's chunks up to it); request 6 repeats request 2's prompt whole.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 16,
        "cpu_chunks": 80,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 48,
        "requests": [
            (0, [(50, 100)], 2),
            (4, [(51, 160)], 2),
            (9, [(50, 64), (52, 40)], 2),
            (14, [(53, 170)], 2),
            (19, [(50, 64), (54, 30)], 2),
            (21, [(50, 100), (55, 10)], 2),
            (26, [(50, 64), (52, 40)], 3),
        ],
    },
    "mamba_aligned_prompt": {
        # (h) A prompt of 96 tokens, a multiple of the chunk: its hit is bounded by 95 tokens, rounded down
        # to the state's chunk (80), so the state request 0 stored at 96 (its replay boundary) serves
        # neither request 2 (no state at 80 yet: it computes, storing one) nor full attention's chunks
        # beyond 80; request 4 loads 80 tokens.
        "groups": [("full", 0, 16), ("mamba", 0, 16)],
        "num_blocks": 16,
        "cpu_chunks": 80,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 48,
        "requests": [
            (0, [(88, 96), (89, 10)], 2),
            (4, [(90, 170)], 2),
            (9, [(88, 96)], 2),
            (13, [(91, 170)], 2),
            (18, [(88, 96)], 2),
        ],
    },
    "mamba_window_full": {
        # (h) A sliding window of 32 tokens, a Mamba group and full attention (block 16): the lookup's
        # window groups are the window (two chunks) and the state (one), the hit's bound rounded down
        # to the state's chunk.
        "groups": [("sliding_window", 32, 16), ("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 24,
        "cpu_chunks": 80,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(56, 90)], 2),
            (4, [(57, 150)], 2),
            (9, [(56, 90), (58, 20)], 2),
            (13, [(59, 150)], 2),
            (18, [(56, 90)], 3),
            (20, [(56, 80), (60, 30)], 2),
        ],
    },
    "mamba_tier_full_lru": {
        # (h) A tier of seven chunks: states and full attention's chunks compete for it; a state whose
        # store finds no room is not offered again; repeats load what is left.
        "groups": [("full", 0, 16), ("mamba", 0, 16)],
        "num_blocks": 16,
        "cpu_chunks": 7,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 32,
        "requests": [
            (0, [(61, 50)], 3),
            (0, [(62, 70)], 3),
            (2, [(63, 40)], 2),
            (8, [(61, 50)], 2),
            (9, [(64, 90)], 2),
            (14, [(62, 70), (65, 5)], 2),
            (16, [(61, 50), (66, 8)], 2),
        ],
    },
    "mamba_arc": {
        # (h) The same shape under ARC.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 15,
        "cpu_chunks": 12,
        "eviction_policy": "arc",
        "max_num_seqs": 3,
        "max_num_batched_tokens": 48,
        "requests": [
            (0, [(67, 60)], 2),
            (2, [(68, 60)], 2),
            (4, [(67, 60), (69, 4)], 2),
            (6, [(70, 80)], 2),
            (8, [(67, 60)], 2),
            (10, [(68, 60)], 2),
            (12, [(71, 90)], 2),
            (14, [(67, 60)], 2),
        ],
    },
    "mamba_two_blocks_per_chunk": {
        # (h) Chunks of two blocks (32 tokens): a state is stored only at a boundary that is a multiple of
        # 32 (request 0's replay boundary 96; request 1's, 80, dropped), and the hit is rounded down to 32.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 16,
        "blocks_per_chunk": 2,
        "cpu_chunks": 40,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(72, 100)], 2),
            (3, [(73, 90)], 2),
            (6, [(74, 170)], 2),
            (11, [(72, 100), (75, 6)], 2),
            (13, [(73, 90)], 2),
        ],
    },
    "mamba_checkpoints": {
        # (h) States with a prefill checkpoint (Mamba 2's): a prompt's last chunk takes the tail with the
        # checkpoint at the replay boundary, which is keyed and stored; repeats load it.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "mamba_checkpoint_blocks": 1,
        "num_blocks": 17,
        "cpu_chunks": 60,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 64,
        "requests": [
            (0, [(76, 100)], 2),
            (3, [(77, 150)], 2),
            (8, [(76, 100), (78, 20)], 2),
            (11, [(76, 100)], 2),
            (14, [(76, 64), (79, 40)], 2),
        ],
    },
    "mamba_decode": {
        # (h) Output tokens' chunks stored too (prompt-only off) for full attention, none for the states
        # (their keys stop at the replay boundary); long outputs on a small pool preempt, with stores in
        # flight, and readmissions load.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 16,
        "cpu_chunks": 60,
        "prompt_only": False,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 48,
        "requests": [
            (0, [(80, 70)], 40),
            (1, [(81, 60)], 50),
            (2, [(82, 50)], 30),
            (10, [(80, 70), (83, 12)], 20),
            (20, [(81, 60)], 10),
            (30, [(80, 70)], 6),
        ],
    },
    "mamba_store_threshold": {
        # (h) A store threshold of 2: a state is stored at its second offer (a repeat's hand-off of the
        # same boundary), each hand-off offered once.
        "groups": [("mamba", 0, 16), ("full", 0, 16)],
        "num_blocks": 16,
        "cpu_chunks": 40,
        "store_threshold": 2,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 48,
        "requests": [
            (0, [(84, 70)], 2),
            (3, [(85, 150)], 2),
            (7, [(84, 70)], 2),
            (10, [(86, 150)], 2),
            (14, [(84, 70), (87, 9)], 2),
        ],
    },
}


def random_scenario(seed: int) -> dict[str, Any]:
    """Shared prefixes among requests of their own on a GPU pool too small to keep them (so hits move to
    the tier), a small tier (LRU or ARC), one or two sliding-window groups beside full attention."""
    rng = random.Random(seed)
    bs = rng.choice([2, 4])
    windows = [rng.choice([bs * 2, bs * 3, bs * 2 + 1, bs * 4]) for _ in range(rng.choice([1, 1, 2]))]
    groups = [("sliding_window", w, bs) for w in windows] + [("full", 0, bs)]
    num_blocks = rng.randint(14, 24)
    prefixes = [(100 + seed * 10 + k, rng.randint(4, 6 * bs)) for k in range(rng.randint(1, 3))]
    requests = []
    for i in range(rng.randint(8, 14)):
        segments = []
        if rng.random() < 0.75:
            # Mostly the whole prefix (the window's chunks are kept at a prompt's replay boundary only, so
            # only prompts that end alike find them), sometimes part of it.
            c, n = rng.choice(prefixes)
            segments.append((c, n if rng.random() < 0.7 else rng.randint(max(1, n // 2), n)))
        if rng.random() < 0.6 or not segments:
            segments.append((200 + seed * 20 + i, rng.randint(1, 4 * bs)))
        tokens = rng.randint(1, 6)
        # Every request fits the pool in full attention with its windows alongside.
        if (len(groups)) * -(-(sum(n for _, n in segments) + tokens) // bs) <= num_blocks - 2:
            requests.append((rng.randint(0, 30), segments, tokens))
    requests.sort(key=lambda r: r[0])
    return {
        "groups": groups,
        "num_blocks": num_blocks,
        "blocks_per_chunk": rng.choice([1, 1, 2]),
        "cpu_chunks": rng.randint(6, 40),
        "eviction_policy": rng.choice(["lru", "lru", "arc"]),
        "store_threshold": rng.choice([0, 0, 0, 2]),
        "max_num_seqs": rng.randint(2, 4),
        "max_num_batched_tokens": rng.choice([8, 16, 32]),
        "requests": requests,
    }


for _seed in range(12):
    SCENARIOS[f"random_{_seed}"] = random_scenario(_seed)


def _peak_blocks(groups: list[tuple[str, int, int]], tokens: int, mbt: int) -> int:
    """The blocks of all groups a request of `tokens` tokens (its last token's K/V never computed) holds at
    most, a window's or local chunk's capped as vLLM's `max_admission_blocks_per_request` caps them with
    two batches in flight (kvsim rejects at arrival a request over `num_blocks - 1`, where vLLM would wait
    forever)."""
    total = 0
    for kind, window, bs in groups:
        n = -(-(tokens - 1) // bs)
        if kind == "sliding_window":
            n = min(n, -(-(window - 1 + 2 * mbt) // bs) + 1)
        elif kind == "chunked_local":
            n = min(n, -(-(window + 2 * mbt) // bs))
        total += n
    return total


def reload_scenario(seed: int, cpu_chunks: int | None = None) -> dict[str, Any]:
    """Built to load from the tier: a window group keeps its chunks only at a prompt's replay boundary
    floor((P - 1) / C) * C (and at a shared-prefix junction), so later requests repeat an earlier prompt
    whole, or with a short suffix of their own (their hit then ends at that boundary), after fillers of
    fresh content have evicted the GPU's prefix cache (a small pool). Fillers and suffixed prompts join
    the prompts repeated later. One or two sliding windows (or a chunked-local group) beside full
    attention; some tiers small enough that stores fail and evict (`cpu_chunks` overrides the drawn
    size)."""
    rng = random.Random(7000 + seed)
    bs = rng.choice([2, 4])
    mults = [2 * bs, 3 * bs, 4 * bs, 2 * bs + 1]
    local = rng.random() < 0.3
    if local:
        groups = [("chunked_local", rng.choice(mults[:3]), bs)]
        if rng.random() < 0.5:
            groups.insert(0, ("sliding_window", rng.choice(mults), bs))
    else:
        windows = rng.sample(mults, rng.choice([1, 1, 2]))
        groups = [("sliding_window", w, bs) for w in windows]
    groups.append(("full", 0, bs))
    bpc = rng.choice([1, 1, 2])
    chunk = bs * bpc
    mbt = rng.choice([8, 16, 32])
    num_blocks = rng.randint(18, 30)
    small_tier = rng.random() < 0.3
    longest = max(w for _, w, _ in groups)

    def fits(p: int, tokens: int) -> bool:
        return _peak_blocks(groups, p + tokens, mbt) <= num_blocks - 1

    top = longest + chunk + 1
    while fits(top + 1, 6):
        top += 1
    low = min(top, longest + chunk + 1)
    # A window W = 2 * bs + 1 is stored cdiv(W - 1, bs) blocks wide but looked up cdiv(W, C) chunks wide
    # (the spec's 4.7): only a window reaching the sequence's start hits, so its originals end their
    # replay boundary at 2 * bs (P - 1 in [2 * bs, 2 * bs + C)); fillers stay long.
    odd = any(kind == "sliding_window" and w % bs for kind, w, _ in groups)
    # With a small tier the originals are short too, the fillers long: a filler's stores fail while the
    # tier holds an original or two.
    short = (low, min(top, low + 2 * chunk))
    originals = (2 * bs + 1, 2 * bs + chunk) if odd else short if small_tier else (low, top)

    def chunks(p: int) -> int:
        """A prompt's chunks in the tier, at most: full attention's and a local chunk's every chunk, a
        window's `cdiv(W, C)`."""
        return sum(-(-p // chunk) if kind != "sliding_window" else -(-w // chunk) for kind, w, _ in groups)

    content = 300 + seed * 40
    seen: list[list[tuple[int, int]]] = []
    requests = []
    arrival = 0
    for _ in range(rng.randint(12, 16)):
        r = rng.random()
        if not seen or r < 0.4:
            # A fresh prompt (an original or a filler: both may be repeated later).
            segments = [(content, rng.randint(*(originals if rng.random() < 0.5 else (low, top))))]
            content += 1
            seen.append(segments)
        else:
            segments = list(rng.choice(seen))
            if rng.random() < 0.5:
                segments.append((content, rng.randint(1, 2 * bs)))
                content += 1
                if fits(sum(n for _, n in segments), 6):
                    seen.append(segments)
        tokens = rng.randint(1, 6)
        if fits(sum(n for _, n in segments), tokens):
            requests.append((arrival, segments, tokens))
        arrival += rng.randint(1, 4)
    drawn = (
        rng.randint(chunks(originals[1]) + 2, 2 * chunks(originals[1])) if small_tier else rng.randint(40, 80)
    )
    return {
        "groups": groups,
        "num_blocks": num_blocks,
        "blocks_per_chunk": bpc,
        "cpu_chunks": cpu_chunks or drawn,
        "eviction_policy": rng.choice(["lru", "arc"]),
        "max_num_seqs": rng.randint(2, 4),
        "max_num_batched_tokens": mbt,
        "requests": requests,
    }


# The seeds kept (of the first 40: those whose requests load at least twice, covering windows of 2, 3, 4
# and 2 + 1/bs blocks, two windows, chunked local, LRU and ARC, blocks_per_chunk 1 and 2, max_num_seqs 2
# to 4), each with its tier's size where it is set here: small tiers where stores fail (vLLM's "cannot
# store chunks") and the loads still happen.
RELOAD_SEEDS: dict[int, int | None] = {
    0: None,
    1: None,
    3: None,
    11: 8,
    12: None,
    20: None,
    22: 8,
    23: None,
    25: 8,
    29: None,
    33: None,
    35: None,
}
for _seed, _cpu in RELOAD_SEEDS.items():
    SCENARIOS[f"reload_{_seed}"] = reload_scenario(_seed, _cpu)


def decode_scenario(seed: int) -> dict[str, Any]:
    """`reload_scenario`'s traffic varied toward the paths it leaves out: output tokens stored too
    (`offload_prompt_only` off, mostly), long outputs on a smaller pool (preemptions, with stores in
    flight, and readmissions that load from the tier), store thresholds, three blocks a chunk, and some
    layouts without full attention (windows and local chunks alone: the alignment is their chunk)."""
    sc = reload_scenario(seed)
    sc["groups"] = [g for g in sc["groups"] if g[0] != "full" or random.Random(seed).random() < 0.8]
    rng = random.Random(60000 + seed)
    sc["prompt_only"] = rng.random() < 0.2
    sc["store_threshold"] = rng.choice([0, 0, 0, 2])
    if rng.random() < 0.3:
        sc["blocks_per_chunk"] = 3
    mbt = sc["max_num_batched_tokens"]
    reqs = []
    for arrival, segments, tokens in sc["requests"]:
        longer = rng.randint(tokens + 6, tokens + 30)
        if _peak_blocks(sc["groups"], sum(n for _, n in segments) + longer, mbt) <= sc["num_blocks"] - 1:
            tokens = longer
        reqs.append((arrival, segments, tokens))
    sc["num_blocks"] = max(sc["num_blocks"] - rng.randint(2, 6), 12)
    sc["requests"] = [
        r
        for r in reqs
        if _peak_blocks(sc["groups"], sum(n for _, n in r[1]) + r[2], mbt) <= sc["num_blocks"] - 1
    ]
    return sc


# Seeds kept (of 100 to 129): preemptions with stores in flight and readmissions that load (106, 108, 109),
# output tokens' chunks stored beside loads and flushes (106, 122, 129), local chunks' loads (122, 123),
# three blocks a chunk (108, 111, 123), no full attention (111: a window and local chunks; 124: one
# window), a store threshold (109).
DECODE_SEEDS = (106, 108, 109, 111, 122, 123, 124, 129)
for _seed in DECODE_SEEDS:
    SCENARIOS[f"decode_{_seed}"] = decode_scenario(_seed)


def unequal_scenario(seed: int) -> dict[str, Any]:
    """A reload scenario (`reload_scenario`) whose groups' block sizes differ, as Gemma 4's do (vLLM
    unifies the groups' pages by giving a layer of fewer bytes a token more tokens a block): the full
    group's blocks twice the windows' (even seeds) or the windows' twice the full group's (odd: its chunk
    then no multiple of theirs, so vLLM stores every window chunk). The hash block is the smaller size.
    Scenarios with local chunks are left out (vLLM asserts equal block sizes for them)."""
    sc = reload_scenario(seed)
    wide_full = seed % 2 == 0
    groups = []
    for kind, window, bs in sc["groups"]:
        if kind == "chunked_local":
            kind = "sliding_window"
        grown = (kind == "full") == wide_full
        groups.append((kind, window, 2 * bs if grown else bs))
    # (distinct windows: layers of one spec make one group)
    seen: set[tuple[str, int, int]] = set()
    groups = [g for g in groups if not (g in seen or seen.add(g))]
    return {**sc, "groups": groups}


# The seeds kept (of the first 16: those whose requests load, windows twice the full group's blocks and
# the full group's twice the windows').
UNEQUAL_SEEDS = (0, 1, 2, 3, 4, 7, 11, 12, 13, 14, 15)
for _seed in UNEQUAL_SEEDS:
    SCENARIOS[f"unequal_{_seed}"] = unequal_scenario(_seed)

MAX_MODEL_LEN = 256


def mamba_scenario(seed: int) -> dict[str, Any]:
    """Mamba (align) groups' tier on random traffic: a state group and full attention in either order
    (sometimes a sliding window too), block 16, prompts repeated whole, with a suffix of their own, or in
    part (a shared-prefix junction, whose state is keyed and stored) after fillers that evict the GPU's
    prefix cache; tiers large or small (failed stores), LRU or ARC, one or two blocks a chunk, prefill
    checkpoints or not, store thresholds, output tokens stored or not, some long outputs (preemptions)."""
    rng = random.Random(90000 + seed)
    bs = 16
    groups = [("mamba", 0, bs), ("full", 0, bs)]
    if rng.random() < 0.5:
        groups.reverse()
    if rng.random() < 0.3:
        groups.insert(rng.randint(0, 2), ("sliding_window", rng.choice([17, 32, 48]), bs))
    checkpoints = rng.choice([0, 0, 1])
    bpc = rng.choice([1, 1, 2])
    mbt = rng.choice([32, 48, 64])
    num_blocks = rng.randint(15, 26)
    small_tier = rng.random() < 0.35
    prompt_only = rng.random() < 0.7

    def peak(tokens: int) -> int:
        total = 0
        for kind, window, b in groups:
            n = -(-(tokens - 1) // b)
            if kind == "mamba":
                n = min(n, 2 + checkpoints)
            elif kind == "sliding_window":
                n = min(n, -(-(window - 1 + 2 * mbt) // b) + 1)
            total += n
        return total

    content = 400 + seed * 40
    seen: list[list[tuple[int, int]]] = []
    requests = []
    arrival = 0
    for _ in range(rng.randint(9, 14)):
        r = rng.random()
        if not seen or r < 0.35:
            segments = [(content, rng.randint(33, 140))]
            content += 1
            seen.append(segments)
        elif r < 0.55:
            # part of an earlier prompt (a junction where it ends), then a suffix of its own
            base = rng.choice(seen)
            c, n = base[0]
            segments = [(c, rng.randint(17, n)), (content, rng.randint(5, 40))]
            content += 1
            seen.append(segments)
        else:
            segments = list(rng.choice(seen))
            if rng.random() < 0.5:
                segments.append((content, rng.randint(1, 30)))
                content += 1
        tokens = rng.randint(1, 6) if rng.random() < 0.75 else rng.randint(10, 40)
        p = sum(n for _, n in segments)
        if p + tokens <= MAX_MODEL_LEN - 16 and peak(p + tokens) <= num_blocks - 1:
            requests.append((arrival, segments, tokens))
        arrival += rng.randint(1, 4)
    return {
        "groups": groups,
        "mamba_checkpoint_blocks": checkpoints,
        "num_blocks": num_blocks,
        "blocks_per_chunk": bpc,
        "cpu_chunks": rng.randint(6, 14) if small_tier else rng.randint(40, 90),
        "eviction_policy": rng.choice(["lru", "lru", "arc"]),
        "store_threshold": rng.choice([0, 0, 0, 2]),
        "prompt_only": prompt_only,
        "max_num_seqs": rng.randint(2, 4),
        "max_num_batched_tokens": mbt,
        "requests": requests,
    }


# Seeds kept (of the first 24: those whose requests load, or whose stores are flushed): windows beside
# the states (0, 4, 12, 15), prefill checkpoints (9, 12, 13, 20, 23), two blocks a chunk (10-13, 16, 20,
# 23), small tiers (3, 13), a store threshold (11), output tokens stored (11, 12, 13, 23), ARC (0, 2, 3, 9,
# 10, 12).
MAMBA_SEEDS: tuple[int, ...] = (0, 2, 3, 4, 6, 9, 10, 11, 12, 13, 15, 16, 20, 22, 23)
for _seed in MAMBA_SEEDS:
    SCENARIOS[f"mamba_random_{_seed}"] = mamba_scenario(_seed)

# Transfers that take time (kvsim's `kv_offloading_latency_ps` and `_ps_per_block`; the recorder's clock
# is the single group's, `Clock`, times exact in binary): loads lasting several steps while others run,
# requests deferred on chunks still being stored or loaded, stores in flight at a preemption and at a
# finish whose blocks the next step takes again (flushes that lengthen their step), transfers queued on the
# link, requests joining while the engine stalls on a transfer.
SCENARIOS["swa_finished_store_fenced"] = {
    # Request 0 finishes with its stores in flight; request 1 hits its blocks on the GPU and request 2,
    # on a pool with little else free, allocates the blocks it freed: the step flushes the stores. (Only
    # timed: with transfers of zero duration nothing is in flight across the finish.)
    "groups": [("sliding_window", 8, 4), ("full", 0, 4)],
    "num_blocks": 16,
    "cpu_chunks": 40,
    "max_num_seqs": 3,
    "max_num_batched_tokens": 32,
    "requests": [(0, [(92, 17)], 1), (1, [(92, 17), (93, 3)], 2), (1, [(94, 9)], 2), (4, [(92, 17)], 2)],
}
SCENARIOS["mamba_finished_store_fenced"] = {
    # The same with a state group: request 0's state at its replay boundary (64) is stored, fenced at
    # once; the next step's allocations take its freed blocks.
    "groups": [("mamba", 0, 16), ("full", 0, 16)],
    "num_blocks": 12,
    "cpu_chunks": 40,
    "max_num_seqs": 3,
    "max_num_batched_tokens": 80,
    "requests": [(0, [(95, 70)], 1), (1, [(95, 70), (96, 5)], 2), (1, [(97, 40)], 2), (5, [(95, 70)], 2)],
}
_TIMED_ONLY = ("swa_finished_store_fenced", "mamba_finished_store_fenced")
for _name, _latency, _per_block in [
    ("swa_store_then_load", 0.25, 0.5),
    ("swa_pending_store_defers", 0.5, 0.75),
    ("swa_being_loaded_defers", 0.25, 0.75),
    ("swa_tier_full_lru", 0.5, 0.5),
    ("swa_tier_arc", 0.25, 0.5),
    ("swa_junction_stored", 0.5, 0.25),
    ("swa_two_blocks_per_chunk", 0.0, 0.625),
    ("swa_preempt_store_in_flight", 0.5, 1.0),
    ("gemma_like_three_windows", 0.25, 0.5),
    ("chunked_local_full", 0.25, 0.5),
    ("mamba_align_full", 0.5, 0.5),
    ("mamba_junction_reload", 0.25, 0.75),
    ("mamba_window_full", 0.5, 0.5),
    ("mamba_tier_full_lru", 0.25, 0.5),
    ("mamba_checkpoints", 0.5, 0.25),
    ("mamba_decode", 0.25, 0.5),
    ("mamba_two_blocks_per_chunk", 0.25, 0.5),
    ("swa_finished_store_fenced", 0.25, 0.5),
    ("mamba_finished_store_fenced", 0.5, 1.0),
]:
    SCENARIOS[f"slow_{_name}"] = {**SCENARIOS[_name], "latency_ms": _latency, "ms_per_block": _per_block}
for _name, _latency, _per_block in [
    ("swa_store_then_load", 10.0, 3.0),
    ("swa_being_loaded_defers", 6.0, 2.0),
    ("swa_preempt_store_in_flight", 3.0, 2.0),
    ("chunked_local_full", 4.0, 2.0),
    ("mamba_junction_reload", 6.0, 2.0),
    ("swa_finished_store_fenced", 3.0, 2.0),
]:
    SCENARIOS[f"slow_very_{_name}"] = {**SCENARIOS[_name], "latency_ms": _latency, "ms_per_block": _per_block}
for _name in _TIMED_ONLY:
    del SCENARIOS[_name]


def _timed(sc: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = random.Random(50000 + seed)
    return {
        **sc,
        "latency_ms": rng.choice([0.0, 0.25, 1.0, 2.5]),
        "ms_per_block": rng.choice([0.125, 0.25, 0.5, 1.0]),
    }


for _seed in (0, 3, 8, 10, 11):
    SCENARIOS[f"slow_random_{_seed}"] = _timed(random_scenario(_seed), _seed)
for _seed in (1, 11, 22, 29):
    SCENARIOS[f"slow_reload_{_seed}"] = _timed(reload_scenario(_seed, RELOAD_SEEDS[_seed]), _seed)
for _seed in (106, 108, 109, 111, 122, 123):
    SCENARIOS[f"slow_decode_{_seed}"] = _timed(decode_scenario(_seed), _seed)
for _seed in (0, 4, 9, 11, 12, 13):
    SCENARIOS[f"slow_mamba_random_{_seed}"] = _timed(mamba_scenario(_seed), _seed)
for _seed in (0, 1, 12, 14):
    SCENARIOS[f"slow_unequal_{_seed}"] = _timed(unequal_scenario(_seed), _seed)

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


def _scheduler(sc: dict[str, Any]) -> tuple[Any, int]:
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
        async_scheduling=False,
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


def record(name: str, sc: dict[str, Any]) -> dict[str, Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_offload.base import get_offload_block_hash, get_offload_group_idx
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

    def key_end(key: bytes) -> list[int]:
        return [get_offload_group_idx(key), hash_names[get_offload_block_hash(key)][0]]

    def job_keys(jid: int) -> list[list[int]]:
        keys = connector._jobs[jid].keys
        return sorted((key_end(k) for k in keys), key=lambda ge: (ge[0], ge[1]))

    def tier() -> list[list[Any]]:
        pol = manager._policy
        chunks = dict(pol.chunks) if hasattr(pol, "chunks") else {**pol.t1, **pol.t2}
        out = []
        for key, chunk in chunks.items():
            g = get_offload_group_idx(key)
            out.append([g, hash_names[get_offload_block_hash(key)][1], bool(chunk.is_ready)])
        return sorted(out, key=lambda e: (e[1], e[0]))

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
            load_keys.append([job.req_id, job_keys(jid)])
            load_blocks.append([job.req_id, list(job.dst_spec.group_sizes)])
        for jid, job in meta.store_jobs.items():
            stores.append([job.req_id, len(job.dst_spec.block_ids)])
            store_keys.append([job.req_id, job_keys(jid)])
        tier_now = tier()
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


def main(argv: list[str]) -> int:
    if os.environ.get("PYTHONHASHSEED") != "2":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "2"})
    out = Path(argv[1] if len(argv) > 1 else "tests/data/vllm_offload_hybrid")
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[2:])
    for name, sc in SCENARIOS.items():
        if only and name not in only:
            continue
        data = record(name, sc)
        (out / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
        nl = sum(len(st["loads"]) for st in data["steps"])
        ns = sum(len(st["stores"]) for st in data["steps"])
        print(f"{name}: {len(data['steps'])} steps, {nl} loads, {ns} stores, {data['flushes']} flushes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
