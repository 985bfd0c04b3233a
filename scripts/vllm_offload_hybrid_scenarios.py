"""The scenarios `scripts/vllm_offload_hybrid_golden.py` records: hand-made ones (a window, chunked-local
and Mamba groups beside full attention, with a tier of LRU or ARC), random ones by seed (`random_scenario`,
`reload_scenario`, `decode_scenario`, `unequal_scenario`, `mamba_scenario`) and their timed copies
(`slow_*`: a link latency and a per-block time). Plain data and the standard library: kvsim's tests may
read it without vLLM."""

from __future__ import annotations

import random
from typing import Any

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
