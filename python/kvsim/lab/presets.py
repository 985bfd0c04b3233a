"""The lab's workload presets: a workload, a config, the step the page opens on, and readable names.

`copilot` is the seed page's `shared-system-prompt` preset, exactly (issue 11 part 3); the others show
what the seed page could not: real decoding over time, copy-on-write samples, preemption by recompute and
by swap, a CPU tier (vLLM's native KV offloading), a slice of a real trace, and models whose layers are not
all full attention (vLLM's hybrid KV-cache manager: sliding windows, state layers; sliding windows with a
CPU tier; state layers with a CPU tier) (DESIGN.md §Lab).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.lab.lab_models import lab_model
from kvsim.model.config import SimConfig
from kvsim.workloads import Workload, load_mooncake, synthetic, traces_dir
from kvsim.workloads.specs import client_max_tokens


@dataclass(frozen=True)
class Preset:
    """A preset: what `kvsim.lab.preset(name)` returns as `(workload, config, step)`, plus the names the
    page shows (`segment_names`: content id -> name for readable prefix keys; per request a short
    `request_names` entry and a longer `labels` entry)."""

    name: str
    title: str
    description: str
    workload: Workload
    config: SimConfig
    step: int
    segment_names: dict[int, str] = field(default_factory=dict)
    request_names: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    system_prompts: list[str | None] = field(default_factory=list)
    contiguous_policy: str = "orca-oracle"
    max_tokens: str = ""  # what the clients ask for, in words (the page and `presets()` show it)


def with_max_tokens(w: Workload, max_tokens: int) -> Workload:
    """`w` whose every request asks for `max_tokens` (what a client sends; the request still stops at its
    true output, but `orca-max` reserves prompt + max_tokens, as the paper's Orca (Max) does)."""
    if max_tokens < int(w.output_len.max()):
        raise ValueError(f"max_tokens {max_tokens} is below a request's output")  # a preset's bug
    cols = {k: np.array(v) for k, v in w.columns().items()}
    cols["max_tokens"] = np.full(len(w), max_tokens, dtype=np.int64)
    return Workload._from_owned(cols, w.meta, allow_foreign_outputs=w.allow_foreign_outputs)


# Content ids of the copilot preset's prompts (any distinct ids below 2^63 would do).
SYS_CODING, SYS_DOCS = 1, 2
# What the small presets' clients ask for (above every true output, so only `orca-max` reads it).
COPILOT_MAX_TOKENS = 128
SAMPLING_MAX_TOKENS = 64
PRESSURE_MAX_TOKENS = 128
MOONCAKE_MAX_TOKENS = 1024
# The chat preset's context: the paper's (OPT's 2,048 tokens), whose clip the lengths rarely reach.
CHAT_MAX_MODEL_LEN = 2048


def copilot() -> Preset:
    """The seed's shared-system-prompt preset: a Llama-3-8B (128 KiB of KV per token), 64 blocks of 16
    tokens; req-1..3 share the 32-token `sys-coding-agent-v1`, req-4 has the 16-token
    `sys-doc-summarizer`; targets are prompt + output; all four arrive together, each asking for
    max_tokens 128 (what `orca-max` reserves; each stops at its target)."""
    rows = [  # (system prompt id, its length, user prompt length, target = prompt + output, name, label)
        (SYS_CODING, 32, 14, 78, "req-1", "Code Copilot #1 (Auth Engine)"),
        (SYS_CODING, 32, 8, 64, "req-2", "Code Copilot #2 (Refactor Task)"),
        (SYS_CODING, 32, 20, 84, "req-3", "Code Copilot #3 (Test Generator)"),
        (SYS_DOCS, 16, 24, 90, "req-4", "Doc Summarizer (RFC-9110)"),
    ]
    ids, lens, offsets, outputs = [], [], [0], []
    for i, (sys_id, sys_len, user, target, _, _) in enumerate(rows):
        ids += [sys_id, 100 + i]
        lens += [sys_len, user]
        offsets.append(len(ids))
        outputs.append(target - sys_len - user)
    w = Workload(
        arrival=np.zeros(len(rows)),
        output_len=outputs,
        max_tokens=np.full(len(rows), COPILOT_MAX_TOKENS),
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )
    cfg = SimConfig(model="llama-3-8b", num_blocks=64, block_size=16)
    names = {SYS_CODING: "sys-coding-agent-v1", SYS_DOCS: "sys-doc-summarizer"}
    return Preset(
        name="copilot",
        title="Code copilot (shared system prompt)",
        description=(
            "Four requests on a Llama-3-8B: three share the 32-token system prompt sys-coding-agent-v1 "
            "(prefix caching maps it to two blocks with ref_cnt 3), one has its own. Opens right after "
            "all four prompts are prefilled."
        ),
        workload=w,
        config=cfg,
        step=1,
        segment_names=names,
        request_names=[r[4] for r in rows],
        labels=[r[5] for r in rows],
        system_prompts=[names[r[0]] for r in rows],
        max_tokens=f"max_tokens {COPILOT_MAX_TOKENS} each",
    )


def _table(
    rows: list[tuple[list[tuple[int, int]], int]], arrival: list[float], max_tokens: int, samples: int = 1
) -> Workload:
    """A workload from `(segments, output_len)` rows, every request asking for `max_tokens`."""
    ids, lens, offsets = [], [], [0]
    for segs, _ in rows:
        ids += [a for a, _ in segs]
        lens += [b for _, b in segs]
        offsets.append(len(ids))
    out = [o for _, o in rows]
    return Workload(
        arrival=np.asarray(arrival, dtype=np.float64),
        output_len=out,
        max_tokens=[max_tokens] * len(rows),
        num_samples=[samples] * len(rows),
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


def chat() -> Preset:
    """2,000 ShareGPT-like conversations arriving at 400 per second on a Llama-3-8B with 4,096 blocks of
    16: a pool that fills and drains. Lengths are the paper's ShareGPT distribution (`sharegpt-paper`:
    the paper's means, real ShareGPT's spread) in the paper's 2,048-token context, a clip that binds for
    one request in 2,000; clients send no max_tokens, so each asks for the rest of the context
    (2,048 − prompt), which `orca-max` reserves, as the paper's Orca (Max) and `kvsim run`'s `sharegpt`
    preset do."""
    w = synthetic(
        2000, arrival_rate=400.0, lengths="sharegpt-paper", max_model_len=CHAT_MAX_MODEL_LEN, seed=1
    )
    w = client_max_tokens(w, "chat")
    cfg = SimConfig(model="llama-3-8b", num_blocks=4096, block_size=16)
    return Preset(
        name="chat",
        title="Chat (2,000 ShareGPT-like requests)",
        description=(
            "2,000 requests with ShareGPT's lengths (the paper's distribution, 2,048-token context) "
            "arriving at 400/s: watch blocks appear as tokens cross block boundaries and the pool fill "
            "and drain."
        ),
        workload=w,
        config=cfg,
        step=2000,
        request_names=[f"req-{i + 1}" for i in range(len(w))],
        max_tokens=f"the context's rest, {CHAT_MAX_MODEL_LEN:,} − prompt (they send no max_tokens)",
    )


def parallel_sampling() -> Preset:
    """Three requests of three samples each (fork-cow): after the prompt, the samples share every
    block, copy the partial last block at their first write (copy-on-write) and diverge."""
    rows = [
        ([(SYS_CODING, 32), (200, 21)], 40),
        ([(SYS_CODING, 32), (201, 13)], 30),
        ([(SYS_DOCS, 16), (202, 30)], 36),
    ]
    w = _table(rows, [0.0, 0.0, 0.004], SAMPLING_MAX_TOKENS, samples=3)
    cfg = SimConfig(model="llama-3-8b", num_blocks=64, block_size=16, sampling="fork-cow")
    names = {SYS_CODING: "sys-coding-agent-v1", SYS_DOCS: "sys-doc-summarizer"}
    return Preset(
        name="parallel-sampling",
        title="Parallel sampling (fork-cow)",
        description=(
            "Three requests with three samples each, sampled copy-on-write (paper §4.4): the samples share "
            "their parent's blocks (ref_cnt 3) until each writes into the shared partial block."
        ),
        workload=w,
        config=cfg,
        step=2,
        segment_names=names,
        request_names=["req-1", "req-2", "req-3"],
        labels=["Code Copilot (3 samples)", "Refactor (3 samples)", "Doc Summarizer (3 samples)"],
        system_prompts=[names[r[0][0][0]] for r in rows],
        max_tokens=f"max_tokens {SAMPLING_MAX_TOKENS} each",
    )


def memory_pressure() -> Preset:
    """Ten long requests at once into 40 blocks: the pool runs out while they decode. Victims swap to a
    CPU pool of 8 blocks while it holds them, and are recomputed when it does not."""
    rows = [([(300 + i, 20 + 3 * i)], 60 + 5 * i) for i in range(10)]
    w = _table(rows, [0.001 * i for i in range(10)], PRESSURE_MAX_TOKENS)
    cfg = SimConfig(model="llama-3-8b", num_blocks=40, block_size=16, preemption="swap", cpu_blocks=8)
    return Preset(
        name="memory-pressure",
        title="Memory pressure (swap and recompute)",
        description=(
            "Ten requests that do not fit a 40-block pool together: the newest is preempted when a block "
            "is missing, swapped to an 8-block CPU pool while it fits there and recomputed otherwise."
        ),
        workload=w,
        config=cfg,
        step=40,
        request_names=[f"req-{i + 1}" for i in range(10)],
        max_tokens=f"max_tokens {PRESSURE_MAX_TOKENS} each",
    )


# The CPU-tier preset's shared document, what its clients ask for, its tier and its link's latency.
DOC_CONTRACT = 4
TIER_MAX_TOKENS = 64
TIER_CHUNKS = 32
TIER_LATENCY_PS = 2_500_000_000  # 2.5 ms: a load spans a few of the preset's 1 ms steps


def cpu_tier() -> Preset:
    """vLLM's native KV offloading (DESIGN.md §CPU tier) on a Llama-3-8B with 24 GPU blocks of 16 tokens
    and a CPU tier of 32 chunks (one block each, 2 MiB: 64 MiB of host memory). req-1 reads the 96-token
    document `contract-v3`; its full blocks are stored to the tier as they are computed. Six requests of
    their own push the document's cached blocks out of the GPU pool; req-8 asks about the document again:
    no GPU hit, six chunks in the tier, so it loads them and waits for the load, neither running nor
    computing, then computes only its question; req-9 then hits the reloaded blocks on the GPU. The
    link's latency is 2.5 ms (given, not a GPU's: this preset's time is one millisecond a step, so a load
    at PCIe speed would land within the step that starts it)."""
    rows = [
        ([(DOC_CONTRACT, 96), (500, 16)], 8),
        *[([(501 + i, 64 + 8 * (i % 3))], 10 + 2 * i) for i in range(6)],
        ([(DOC_CONTRACT, 96), (510, 24)], 10),
        ([(DOC_CONTRACT, 96), (511, 12)], 6),
    ]
    arrival = [0.0, 0.004, 0.008, 0.012, 0.016, 0.020, 0.024, 0.040, 0.050]
    w = _table(rows, arrival, TIER_MAX_TOKENS)
    cfg = SimConfig(
        model="llama-3-8b",
        num_blocks=24,
        block_size=16,
        kv_offloading_chunks=TIER_CHUNKS,
        kv_offloading_latency_ps=TIER_LATENCY_PS,
    )
    names = {DOC_CONTRACT: "contract-v3"}
    return Preset(
        name="cpu-tier",
        title="CPU tier (KV offloading)",
        description=(
            "A 24-block GPU pool and a 32-chunk CPU tier (vLLM's native KV offloading): req-1's document "
            "is stored to the tier, six other requests push it out of the GPU, and req-8 loads it back "
            "from the tier instead of computing it, held while the load is in flight (the link is given "
            "a 2.5 ms latency so that the load spans steps). Opens at the step that starts req-8's load."
        ),
        workload=w,
        config=cfg,
        step=41,
        segment_names=names,
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
        max_tokens=f"max_tokens {TIER_MAX_TOKENS} each",
    )


# The hybrid presets' content ids and what their clients ask for.
SYS_AGENT = 3
WINDOW_MAX_TOKENS = 256
STATE_MAX_TOKENS = 512

# The hybrid CPU-tier preset's content ids (a conversation's system prompt and first turn, the answer to it,
# the two second turns), its GPU pool and its tier.
SYS_TRAVEL, THREAD_TURN_1, THREAD_ANSWER, THREAD_TURN_2, THREAD_EDIT = 8, 9, 10, 11, 12
HYBRID_TIER_BLOCKS = 64
HYBRID_TIER_CHUNKS = 128


def sliding_window() -> Preset:
    """gpt-oss-20b (DESIGN.md §Hybrid attention): 12 layers of 128-token sliding windows alternating with 12
    of full attention, two KV-cache groups of 12 layers sharing one pool of 96 blocks of 16 tokens. Three
    requests share the 160-token system prompt `sys-agent-v2`, a fourth has its own: each full-attention
    table keeps every block, each sliding-window table frees the blocks that leave the window (the null
    block takes their place). The sliding-window group keys only the blocks a later request could hit
    (vLLM's sparse retention): req-1's end at its own prompt's end, so req-2 finds no hit, but its lookup
    marks the shared prompt's end (the junction) and keys those blocks, so req-3 hits all 160 tokens."""
    rows = [
        ([(SYS_AGENT, 160), (400, 40)], 60),
        ([(SYS_AGENT, 160), (401, 24)], 90),
        ([(SYS_AGENT, 160), (402, 56)], 70),
        ([(403, 120)], 150),
    ]
    w = _table(rows, [0.0, 0.012, 0.03, 0.034], WINDOW_MAX_TOKENS)
    cfg = SimConfig(model="gpt-oss-20b", num_blocks=96, block_size=16)
    names = {SYS_AGENT: "sys-agent-v2"}
    return Preset(
        name="sliding-window",
        title="Sliding window (gpt-oss-20b)",
        description=(
            "gpt-oss-20b: 12 sliding-window layers (128 tokens) and 12 full-attention layers, two KV-cache "
            "groups sharing one pool. Each request has a table per group: the full-attention one keeps every "
            "block, the sliding-window one frees blocks as they leave the window (the null block takes their "
            "place). Three requests share the 160-token sys-agent-v2; the window keeps keys only where a later "
            "request could hit them, so req-2 misses and req-3 hits."
        ),
        workload=w,
        config=cfg,
        step=40,
        segment_names=names,
        request_names=["req-1", "req-2", "req-3", "req-4"],
        labels=["Agent #1", "Agent #2", "Agent #3", "Summarizer"],
        system_prompts=[names.get(r[0][0][0]) for r in rows],
        max_tokens=f"max_tokens {WINDOW_MAX_TOKENS} each",
    )


def sliding_window_tier() -> Preset:
    """A hybrid model's CPU tier (DESIGN.md §CPU tier, "A hybrid model"): gpt-oss-120b, 18 sliding-window
    layers of 128 tokens and 18 of full attention (two KV-cache groups of 18 layers, 576 KiB a block),
    with 64 GPU blocks of 16 tokens (36 MiB) and a CPU tier of 128 chunks (72 MiB). req-1 is a
    conversation's first turn, 260 tokens (the 32-token `sys-travel-agent` and the 228-token
    `thread-42-turn-1`); as it is computed the tier stores 24 chunks: every full block of the
    full-attention group (16) but only the 8 window blocks ending at its prompt's last block boundary (256
    tokens), where a later request's hit can end (vLLM's sparse retention). Six requests of their own push
    it out of the GPU pool; req-8, the second turn (turn 1, its 12-token answer, a new message), finds no
    GPU hit and 256 tokens in the tier: it loads 24 chunks (16 of the full-attention group, the window's 8)
    and is held while the load is in flight, then computes only the rest. req-9, the second turn edited
    (turn 1 and another message), loads the same 24 chunks again: req-8 holds turn 1's full-attention
    blocks, but its window group keys blocks only where its own later hit could end (its prompt's end),
    so the GPU has no window hit at 256 tokens, and a hit needs every group. The link's latency is 2.5 ms,
    as in `cpu-tier`, so that a load spans steps."""
    rows = [
        ([(SYS_TRAVEL, 32), (THREAD_TURN_1, 228)], 12),
        *[([(800 + i, 96 + 24 * (i % 3))], 10 + 2 * i) for i in range(6)],
        ([(SYS_TRAVEL, 32), (THREAD_TURN_1, 228), (THREAD_ANSWER, 12), (THREAD_TURN_2, 30)], 16),
        ([(SYS_TRAVEL, 32), (THREAD_TURN_1, 228), (THREAD_EDIT, 20)], 10),
    ]
    arrival = [0.0, 0.004, 0.008, 0.012, 0.016, 0.020, 0.024, 0.028, 0.040]
    w = _table(rows, arrival, TIER_MAX_TOKENS)
    cfg = SimConfig(
        model="gpt-oss-120b",
        num_blocks=HYBRID_TIER_BLOCKS,
        block_size=16,
        kv_offloading_chunks=HYBRID_TIER_CHUNKS,
        kv_offloading_latency_ps=TIER_LATENCY_PS,
        kv_offloading_hit_junction=False,  # (vLLM 0.33.0's junctions: the replay's, DESIGN.md §Lab)
    )
    names = {SYS_TRAVEL: "sys-travel-agent", THREAD_TURN_1: "thread-42-turn-1"}
    labels = [
        "Thread 42, turn 1",
        *[f"Chat #{i + 1}" for i in range(6)],
        "Thread 42, turn 2",
        "Thread 42, turn 2 edited",
    ]
    return Preset(
        name="sliding-window-tier",
        title="Windowed CPU tier (gpt-oss-120b)",
        description=(
            "gpt-oss-120b (sliding-window and full-attention layers: two KV-cache groups) with a 64-block GPU "
            "pool and a 128-chunk CPU tier. A conversation's first turn (req-1, 260 tokens) is stored to the "
            "tier: every full block of the full-attention group, but only the 8 window blocks that end where a "
            "later hit can (256 tokens). Six other requests push it out of the GPU; the second turn (req-8) "
            "loads those 24 chunks back, 16 full-attention and 8 window, held while the load is in flight; "
            "req-9, the turn edited, loads them again (req-8 keeps window keys only at its own prompt's end). "
            "Opens while req-8's load is in flight."
        ),
        workload=w,
        config=cfg,
        step=39,
        segment_names=names,
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
        labels=labels,
        system_prompts=[names.get(r[0][0][0]) for r in rows],
        max_tokens=f"max_tokens {TIER_MAX_TOKENS} each",
    )


def state_layers() -> Preset:
    """Qwen3-Next-80B-A3B (DESIGN.md §Hybrid attention): 36 gated-delta-net layers, whose state per
    request has a fixed size whatever its length, and 12 of full attention: four KV-cache groups of 12
    layers (three of states, one of attention). A state needs a page of 1.05 MiB per layer, so vLLM raises
    the attention block size to 544 tokens to match it; each request holds one block in each state group
    and ⌈tokens / 544⌉ in the attention group. Six requests of 300 to 1,500 tokens in 24 blocks: the later
    ones wait for room. Prefix caching is off (one state block a request); switched on, the state tables
    follow vLLM's align mode (DESIGN.md §Hybrid attention)."""
    rows = [
        ([(500, 900)], 220),
        ([(501, 420)], 300),
        ([(502, 1500)], 160),
        ([(503, 640)], 260),
        ([(504, 1100)], 120),
        ([(505, 300)], 340),
    ]
    w = _table(rows, [0.0, 0.02, 0.05, 0.08, 0.12, 0.15], STATE_MAX_TOKENS)
    cfg = SimConfig(
        model=lab_model("qwen3-next-80b-a3b"),
        num_blocks=24,
        block_size=16,
        enable_prefix_caching=False,
        gdn_prefill_backend="triton",
    )
    return Preset(
        name="state-layers",
        title="State layers (Qwen3-Next-80B)",
        description=(
            "Qwen3-Next-80B-A3B: 36 linear-attention (gated delta net) layers keep a fixed-size state per "
            "request, 12 full-attention layers keep every token. Four KV-cache groups of 12 layers share one "
            "pool; the attention block grows to 544 tokens so that one block holds a layer's state. Each "
            "request holds one block per state group, whatever its length, and ⌈tokens / 544⌉ for attention; "
            "in 24 blocks the later requests wait for room."
        ),
        workload=w,
        config=cfg,
        step=120,
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
        max_tokens=f"max_tokens {STATE_MAX_TOKENS} each",
    )


def state_layers_caching() -> Preset:
    """Qwen3-Next-80B-A3B with prefix caching on, `vllm serve`'s default (DESIGN.md §Hybrid attention,
    "Mamba groups"): vLLM's align mode keeps a state per 544-token block boundary. The gated delta net's
    prefill runs on Triton's kernel, as the lab runs it (it has no GPU; FlashInfer's, on Hopper and
    Blackwell, checkpoints inside the prefill and makes blocks multiples of 64 tokens): a prefill stops at
    its prompt's last block boundary, whose state stays cached, and computes the rest in a step of its own;
    after it a request holds only its running state in each state group (null entries before it; a request
    that started from a cached state holds that one too for the step after its hit). Four of
    five requests share a 1,200-token system prompt: the later three hit the first one's cached state at
    1,088 tokens (two blocks) in every group, with the attention blocks before it, and compute the rest."""
    rows = [
        ([(600, 1200), (601, 300)], 200),
        ([(600, 1200), (602, 500)], 160),
        ([(600, 1200), (603, 250)], 220),
        ([(604, 700)], 180),
        ([(600, 1200), (605, 420)], 140),
    ]
    w = _table(rows, [0.0, 0.5, 0.55, 0.6, 0.65], STATE_MAX_TOKENS)
    cfg = SimConfig(
        model=lab_model("qwen3-next-80b-a3b"), num_blocks=36, block_size=16, gdn_prefill_backend="triton"
    )
    return Preset(
        name="state-layers-caching",
        title="Cached states (Qwen3-Next-80B)",
        description=(
            "Qwen3-Next-80B-A3B with prefix caching on, as vllm serve runs it: vLLM's align mode keeps a "
            "state per 544-token block. A prefill stops at its prompt's last block boundary, whose state stays "
            "cached, and computes the rest in a step of its own (the gated delta net on Triton's kernel); then "
            "a request holds only its running state (and, the step after a hit, the cached state it started "
            "from). Four of five requests share a 1,200-token system prompt: "
            "the later ones hit the first one's cached state at 1,088 tokens in every group."
        ),
        workload=w,
        config=cfg,
        step=352,
        segment_names={600: "system prompt"},
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
        max_tokens=f"max_tokens {STATE_MAX_TOKENS} each",
    )


# The state-layer CPU-tier preset's content ids (a conversation's system prompt and first turn, the answer to
# it, its second turn), its GPU pool and its tier.
SYS_RESEARCH, RESEARCH_TURN_1, RESEARCH_ANSWER, RESEARCH_TURN_2 = 13, 14, 15, 16
STATE_TIER_BLOCKS = 24
STATE_TIER_CHUNKS = 32


def state_layers_tier() -> Preset:
    """A CPU tier on a model with state layers (DESIGN.md §CPU tier, "A Mamba group"): Qwen3-Next-80B-A3B
    (three KV-cache groups of gated-delta-net state layers, one of full attention; blocks of 544 tokens,
    12.75 MiB each) with prefix caching on, a 24-block GPU pool and a CPU tier of 32 chunks (408 MiB). req-1
    is a conversation's first turn, 1,200 tokens (the 600-token `sys-research-agent` and the 600-token
    `thread-7-turn-1`); its first step computes 1,088 tokens (its prompt's last block boundary), the GPU's
    prefix cache keys the state there, and the tier stores it, one chunk per state group, each alone before
    the step's other stores, then the two full-attention blocks. Four requests of their own take its blocks
    on the GPU (all but its first attention block, with no state to start from); req-6, the second turn
    (turn 1, a 40-token answer, a 500-token message), finds no GPU hit and 1,088 tokens in the tier: it
    loads 5 chunks (the three states at 1,088 tokens and the two attention blocks) and is held while the
    load is in flight, then computes only the rest, its own states at 1,632 tokens stored in turn. The
    link's latency is 2.5 ms, as in `cpu-tier`, so that the load spans steps."""
    rows = [
        ([(SYS_RESEARCH, 600), (RESEARCH_TURN_1, 600)], 40),
        *[([(900 + i, 700 + 150 * (i % 3))], 30 + 10 * i) for i in range(4)],
        ([(SYS_RESEARCH, 600), (RESEARCH_TURN_1, 600), (RESEARCH_ANSWER, 40), (RESEARCH_TURN_2, 500)], 30),
    ]
    arrival = [0.0, 0.02, 0.03, 0.04, 0.05, 0.09]
    w = _table(rows, arrival, STATE_MAX_TOKENS)
    cfg = SimConfig(
        model=lab_model("qwen3-next-80b-a3b"),
        num_blocks=STATE_TIER_BLOCKS,
        block_size=16,
        gdn_prefill_backend="triton",
        kv_offloading_chunks=STATE_TIER_CHUNKS,
        kv_offloading_latency_ps=TIER_LATENCY_PS,
        kv_offloading_hit_junction=False,  # (vLLM 0.33.0's junctions: the replay's, DESIGN.md §Lab)
    )
    names = {SYS_RESEARCH: "sys-research-agent", RESEARCH_TURN_1: "thread-7-turn-1"}
    labels = ["Thread 7, turn 1", *[f"Chat #{i + 1}" for i in range(4)], "Thread 7, turn 2"]
    return Preset(
        name="state-layers-tier",
        title="States in a CPU tier (Qwen3-Next-80B)",
        description=(
            "Qwen3-Next-80B-A3B (three groups of state layers, one of full attention, blocks of 544 tokens) "
            "with prefix caching on, a 24-block GPU pool and a 32-chunk CPU tier. A conversation's first turn "
            "(req-1, 1,200 tokens) computes 1,088 tokens in its first step; the tier stores its state there, "
            "one chunk per state group, each alone, and its two full-attention blocks. Four other requests "
            "push it out of the GPU (no state of it is left to start from); the second turn (req-6) loads "
            "those 5 chunks back, the three states at 1,088 tokens and the two attention blocks, held while "
            "the load is in flight, then computes only the rest. Opens at the step that starts the load."
        ),
        workload=w,
        config=cfg,
        step=91,
        segment_names=names,
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
        labels=labels,
        system_prompts=[names.get(r[0][0][0]) for r in rows],
        max_tokens=f"max_tokens {STATE_MAX_TOKENS} each",
    )


MOONCAKE_FILE = "mooncake/conversation_trace.jsonl"
MOONCAKE_SLICE = 120


def mooncake() -> Preset:
    """The first 120 requests of the Mooncake conversation trace (FAST'25): real prompts of thousands of
    tokens whose hash ids share prefixes across turns."""
    path = traces_dir() / MOONCAKE_FILE
    if not path.exists():
        raise InvalidArgumentError(
            f"preset 'mooncake' needs the Mooncake conversation trace at {path}, which is absent "
            "(set KVSIM_TRACES to the traces folder)"
        )
    full = load_mooncake(path)
    w = with_max_tokens(full[:MOONCAKE_SLICE], MOONCAKE_MAX_TOKENS)
    ids = np.unique(np.asarray(w.segment_id))
    # (Llama-3.1-8B, whose 131,072-token context holds the trace's prompts: Llama-3-8B's 8,192, now the
    # default max_model_len, refused 6 of the first 120 at arrival where the contiguous side ran them;
    # the same KV a token)
    cfg = SimConfig(model="llama-3.1-8b", num_blocks=16384, block_size=16)
    return Preset(
        name="mooncake",
        title="Mooncake trace (first 120 requests)",
        description=(
            "A slice of the real Mooncake conversation trace: multi-turn prompts of thousands of tokens; "
            "later turns find their conversation's earlier blocks in the prefix cache."
        ),
        workload=w,
        config=cfg,
        step=200,
        segment_names={int(i): f"mooncake-{int(i)}" for i in ids},
        request_names=[f"req-{i + 1}" for i in range(len(w))],
        max_tokens=f"max_tokens {MOONCAKE_MAX_TOKENS:,} each (the trace records each output length, not the max_tokens sent)",
    )


PRESETS: dict[str, Callable[[], Preset]] = {
    "copilot": copilot,
    "chat": chat,
    "parallel-sampling": parallel_sampling,
    "memory-pressure": memory_pressure,
    "cpu-tier": cpu_tier,
    "mooncake": mooncake,
    "sliding-window": sliding_window,
    "sliding-window-tier": sliding_window_tier,
    "state-layers": state_layers,
    "state-layers-caching": state_layers_caching,
    "state-layers-tier": state_layers_tier,
}


def names() -> list[str]:
    """Preset names, in the page's order."""
    return list(PRESETS)


def get(name: str) -> Preset:
    """The preset called `name`.

    Raises:
        InvalidArgumentError: an unknown name (the message lists the known ones), or a trace preset whose
            trace is absent.
    """
    if not isinstance(name, str) or name not in PRESETS:
        raise InvalidArgumentError(f"preset {name!r} is not one of {', '.join(map(repr, PRESETS))}")
    return PRESETS[name]()


__all__ = ["PRESETS", "Preset", "get", "load_mooncake", "names", "synthetic", "traces_dir"]
