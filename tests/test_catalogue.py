"""The 2026 catalogue (models, GPUs), weights as vLLM loads them (quantization), vLLM's memory accounting
and start-up figures (issue 25; DESIGN.md §Defaults and sizing)."""

from __future__ import annotations

import json
import math
import re

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import catalogue, gpus, memory, models, sizing
from tests.catalogue_common import GIB, HF, _text

# Fields every preset is compared on (the config's numbers; layers are checked against the raw config below).
FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_params",
    "num_active_params",
    "max_model_len",
    "weight_dtype",
    "kv_dtype",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "v_head_dim",
    "weight_bytes",
    "quantization",
    "num_experts",
    "experts_per_token",
    "expert_ffn",
)


def test_catalogue_families_hold_each_preset_once_in_its_order():
    """The family modules (`catalogue_dense`, ...) hold every name `catalogue.ORDER` lists, each in one family,
    so the merged `ENTRIES` loses none and keeps the catalogue's order."""
    names = [name for family in catalogue.FAMILIES for name in family]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(catalogue.ORDER)
    assert list(catalogue.ENTRIES) == list(catalogue.ORDER)


@pytest.mark.parametrize("name", sorted(catalogue.ENTRIES))
def test_every_catalogue_preset_is_its_published_config(name):
    """Field by field: the preset's config fields are the published file's, and the model built from the
    file is the preset."""
    published = _text(json.loads((HF / f"{name}.json").read_text()))
    _, fields = catalogue.ENTRIES[name]
    for key, value in fields.items():
        assert published.get(key) == value, (name, key)
    preset = models.get(name)
    from_file = models.from_hf_config(HF / f"{name}.json")
    for f in FIELDS:
        assert getattr(preset, f) == getattr(from_file, f), (name, f)
    assert preset.source.startswith("https://huggingface.co/")


# The 2024 presets written by hand (`kvsim.model.models.MODELS`), each against its published config.json:
# every field the hand preset states. (DeepSeek-V3's, once one of them with its README's rounded 671B / 37B
# and no experts, is the catalogue's: checked field by field above.)
HAND_PRESETS = ("qwen2.5-7b", "qwen2.5-72b")


@pytest.mark.parametrize("name", HAND_PRESETS)
def test_the_hand_written_presets_are_their_published_configs(name):
    preset = models.get(name)
    from_file = models.from_hf_config(HF / f"{name}.json")
    for f in FIELDS:
        if f == "weight_bytes":
            assert preset.param_bytes == from_file.param_bytes, (name, f)
        else:
            assert getattr(preset, f) == getattr(from_file, f), (name, f)
    assert preset.kv_bytes_per_token == from_file.kv_bytes_per_token
    assert preset.source.startswith("https://huggingface.co/")


# Published totals (model cards): parameters in billions, total and active, and the tolerance of the rounding.
PUBLISHED = {
    "llama-3.1-8b": (8.030261248, None, 1e-9),  # safetensors total 8,030,261,248
    "llama-3.1-70b": (70.553706496, None, 1e-9),  # safetensors total 70,553,706,496
    "llama-3.1-405b": (405.85, None, 1e-3),  # model card: 405B (safetensors 405.85B)
    "qwen3-8b": (8.2, None, 0.01),  # model card: 8.2B
    "qwen3-32b": (32.8, None, 0.01),  # model card: 32.8B
    "qwen3-30b-a3b": (30.5, 3.3, 0.02),  # model card: 30.5B total, 3.3B activated
    "deepseek-v3": (671, 37, 0.001),  # README: 671B total (MTP excluded), 37B activated
    "qwen3-235b-a22b": (235, 22, 0.02),  # model card: 235B total, 22B activated
    "gpt-oss-20b": (20.9, None, 0.01),  # model card: 20.9B total (3.6B active without the embedding)
    "gpt-oss-120b": (116.8, None, 0.01),  # model card: 116.8B total (5.1B active without the embedding)
    "phi-4": (14.7, None, 0.01),  # Hugging Face's safetensors count: 14.7B
    "mistral-small-24b": (24, None, 0.02),  # model card: 24B
    "gemma-3-27b": (27.0, None, 0.02),  # language model of the 27B (the vision tower's 0.4B is not counted)
    "gemma-3-12b": (12.0, None, 0.025),  # model card: 12B (vision tower included); exact figures below
    "llama-4-scout": (109, 17, 0.02),  # model card: 109B total (vision included), 17B active
    "llama-4-maverick": (400, 17, 0.02),  # model card: 400B total (402B with vision), 17B active
    "qwen3-next-80b-a3b": (80, None, 0.02),
    "qwen3.6-35b-a3b": (
        35,
        None,
        0.02,
    ),  # model card: 35B total (the vision encoder not counted), 3B activated  # model card: 80B total (3B activated: below, without embeddings)
    "minimax-m2": (230, None, 0.02),  # model card: 230B total (10B active: below, without embeddings)
    "kimi-linear-48b-a3b": (48, None, 0.025),
    "kimi-k3": (2800, None, 0.01),  # NVIDIA NeMo AutoModel's Kimi K3 page: 2.8T total, 104B activated (below)
    "deepseek-v4-flash": (
        284,
        None,
        0.01,
    ),  # model card: 284B total (13B activated; the MTP layer not loaded)  # model card: 48B total (rounded; 49.12B counted), 3B activated
    # Google's model cards: 31B dense 30.7B (vision encoder apart; kvsim counts the V slot vLLM allocates in
    # the global layers' qkv_proj, 0.11B); 26B A4B 25.2B total, 3.8B active.
    "gemma-4-31b": (30.7, None, 0.01),
    "gemma-4-26b-a4b": (25.2, 3.8, 0.01),
    # E4B: "8B with embeddings" (per-layer embeddings included), which also counts the vision (~0.15B) and
    # audio (~0.3B) encoders kvsim leaves out: 7.46B of language model.
    "gemma-4-e4b": (8.0, None, 0.07),
    # Hugging Face's safetensors totals: 31,577,937,344 (kvsim counts the 23 MoE layers' 128-entry
    # float32 `e_score_correction_bias` vLLM allocates, which that total leaves out: +2,944); the card's
    # 3.5B active. granite-4.0-h-tiny 6,939,037,248 exactly (IBM's "1B active" is rounded far down: kvsim's
    # 1.47B counts the 0.15B embedding and 6 of 64 experts, so no active figure is checked).
    "nemotron-3-nano-30b-a3b": (31.577940288, 3.5, 1e-9),
    # GLM-5's model card: 744B total, 40B active (kvsim's 41.8B counts the embeddings and lm_head)
    "glm-5": (744, 40, 0.002),
    "granite-4.0-h-tiny": (6.939037248, None, 1e-9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_model_cards(name):
    total, active, rel = PUBLISHED[name]
    m = models.get(name)
    assert m.num_params / 1e9 == pytest.approx(total, rel=rel)
    if active is not None:
        assert m.num_active_params / 1e9 == pytest.approx(active, rel=0.05)
    else:
        assert m.num_active_params <= m.num_params


def test_hybrid_presets_carry_their_layers_from_the_config():
    """gpt-oss alternates 128-token windows with full attention (layer_types); Gemma 3 has one full layer in
    six (sliding_window_pattern); Llama 4's RoPE layers attend within 8,192-token chunks."""
    oss = models.get("gpt-oss-120b")
    raw = json.loads((HF / "gpt-oss-120b.json").read_text())
    kinds = ["sliding_window" if t == "sliding_attention" else "full" for t in raw["layer_types"]]
    assert [lay.kind for lay in oss.layers] == kinds
    assert {lay.window for lay in oss.layers if lay.kind == "sliding_window"} == {raw["sliding_window"]}
    gemma = models.get("gemma-3-27b")
    assert sum(lay.kind == "full" for lay in gemma.layers) == 62 // 6
    assert gemma.layers[5].kind == "full"
    assert gemma.layers[4].window == 1024
    scout = models.get("llama-4-scout")
    rope = _text(json.loads((HF / "llama-4-scout.json").read_text()))["no_rope_layers"]
    assert [lay.kind == "chunked_local" for lay in scout.layers] == [bool(r) for r in rope]
    assert all(m.is_hybrid for m in (oss, gemma, scout))
    assert not models.get("qwen3-32b").is_hybrid


def test_names_follow_the_hugging_face_id():
    """`llama-3.1-8b-instruct` and `llama-3.1-8b` are one preset; any case; a hub id not in the local cache
    falls back to the preset its last part names."""
    base = models.get("llama-3.1-8b")
    assert models.get("llama-3.1-8b-instruct") is base
    assert models.resolve("Llama-3.1-8B-Instruct") is base
    assert models.resolve("meta-llama/Llama-3.1-8B-Instruct") is base
    assert models.get("deepseek-r1") is models.get("deepseek-v3")


def test_a_hub_id_reads_the_local_hugging_face_cache(tmp_path, monkeypatch):
    """`--model org/name` reads config.json from $HF_HOME/hub's snapshot that refs/main names; nothing is
    downloaded, and a missing one is an error naming where kvsim looked."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    repo = tmp_path / "hub" / "models--acme--Tiny-Qwen3"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snap / "config.json").write_text((HF / "qwen3-8b.json").read_text())
    m = models.resolve("acme/Tiny-Qwen3")
    assert m.name == "acme/Tiny-Qwen3"
    assert m.num_params == models.get("qwen3-8b").num_params
    with pytest.raises(InvalidArgumentError) as info:
        models.resolve("acme/Absent-Model")
    msg = str(info.value)
    assert str(tmp_path / "hub" / "models--acme--Absent-Model") in msg
    assert "downloads nothing" in msg


# -- memory accounting and start-up figures ------------------------------------------------------------------


def test_vllms_four_startup_figures_for_one_full_attention_group():
    """Model loading = one GPU's weights; Available KV = the sized KV bytes; concurrency = vLLM's blocks
    (kvsim's: the null block one of them, as vLLM v1 counts them) over ceil(L / 16); tokens = int(concurrency
    x L); under v0's count (`pool_null_block="extra"`) vLLM's blocks are kvsim's less its extra null block. (vLLM 0.33.0's profiled pool: `vllm-0.33`.)"""
    cfg = kvsim.SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb", max_model_len=32768)
    fig = cfg.pool.figures
    assert fig.model_loading_bytes == models.get("llama-3.1-8b").loaded_bytes
    assert fig.available_kv_bytes == cfg.pool.kv_cache_bytes
    assert fig.num_blocks == cfg.num_blocks
    extra = cfg.replace(pool_null_block="extra")
    assert extra.num_blocks == cfg.num_blocks + 1
    assert extra.pool.figures.num_blocks == cfg.num_blocks
    assert fig.max_concurrency == fig.num_blocks / (32768 // 16)
    assert fig.kv_cache_tokens == int(fig.max_concurrency * 32768) == fig.num_blocks * 16
    lines = fig.lines()
    assert lines[0] == f"Model loading took {round(fig.model_loading_bytes / GIB, 2)} GiB memory"
    assert lines[2] == (
        f"GPU KV cache size: {fig.kv_cache_tokens:,} tokens, Maximum concurrency for 32,768 tokens per request: "
        f"{fig.max_concurrency:.2f}x"
    )  # one line, as vLLM 0.33.0's update_kv_cache_capacity logs them
    # --kv-cache-memory-bytes skips the profiling: the figure is the bytes given.
    given = kvsim.SimConfig.preset("vllm-0.33", model="llama-3.1-8b", kv_cache_bytes="20GiB")
    assert given.pool.figures.available_kv_bytes == 20 * GIB
    # --num-gpu-blocks-override: vLLM's num_blocks is the override itself.
    over = kvsim.SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb", num_blocks=5000)
    assert over.pool.figures.num_blocks == 5000


def test_a_v0_pool_logs_as_vllm_v0_did():
    """The `vllm-v0` preset's pool (all its blocks usable) prints v0's start-up lines, not v1's: the weights
    to four decimals, the memory profile's budget and terms adding up to it, "# cuda blocks" and "# CPU
    blocks" (the swap space's), and v0's concurrency, blocks x block size / max_model_len with no rounding
    up to whole blocks (v1 divides by ceil(L / block size) and has "GPU KV cache size")."""
    cfg = kvsim.SimConfig.preset("vllm-v0", model="llama-3-8b", gpu="h100-80gb", max_model_len=8000)
    fig, pool = cfg.pool.figures, cfg.pool
    assert fig.v0 is not None
    assert fig.num_blocks == cfg.num_blocks - 1
    lines = fig.lines()
    assert not any("GPU KV cache size" in x or "Available KV cache memory" in x for x in lines)
    assert lines[0] == f"Model loading took {pool.weight_bytes / GIB:.4f} GiB"
    usable = pool.memory_bytes * 0.9
    assert lines[1] == (
        f"the current vLLM instance can use total_gpu_memory ({pool.memory_bytes / GIB:.2f}GiB) x "
        f"gpu_memory_utilization (0.90) = {usable / GIB:.2f}GiB"
    )
    terms = [float(x) for x in re.findall(r"([0-9.]+)GiB", lines[2])]
    assert terms[-1] == round(pool.kv_cache_bytes / GIB, 2)
    assert abs(sum(terms) - usable / GIB) < 0.03  # weights + non-torch + activations + KV = the budget
    assert lines[3] == f"# cuda blocks: {fig.num_blocks}, # CPU blocks: {cfg.cpu_blocks}"
    assert cfg.cpu_blocks == 4 * GIB // pool.to_dict()["bytes_per_block"]  # v0's default swap space of 4 GiB
    # 8,000 tokens is 500 blocks of 16 exactly; v0 divides tokens by tokens, so 8,001 would not round up.
    assert lines[4] == f"Maximum concurrency for 8000 tokens per request: {fig.num_blocks * 16 / 8000:.2f}x"
    odd = cfg.replace(max_model_len=8001).pool.figures
    assert odd.lines()[4].endswith(f"{odd.num_blocks * 16 / 8001:.2f}x")
    # A pool given in bytes or blocks profiled nothing: the blocks and the concurrency only.
    given = kvsim.SimConfig.preset("vllm-v0", model="llama-3-8b", kv_cache_bytes="8GiB").pool.figures
    assert [x.split(" ")[0] for x in given.lines()] == ["Model", "#", "Maximum"]
    # v1's pool of the same model keeps v1's lines.
    assert kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb").pool.figures.v0 is None


def test_non_kv_memory_terms_and_enforce_eager():
    """The pool is the share less weights, the activation peak, non-torch memory and CUDA graphs;
    --enforce-eager keeps nothing for graphs; a measured graph figure replaces the estimate; releases before
    0.20.0 subtracted no graph memory; activation_reserve_bytes replaces all three. (vLLM 0.33.0's profiled pool: `vllm-0.33`.)"""
    base = kvsim.SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb")
    p = base.pool
    g = gpus.get("h100-80gb")
    assert p.kv_cache_bytes == math.floor(g.memory_bytes * 0.92) - p.weight_bytes - (
        p.activation_reserve_bytes + p.non_torch_bytes + p.cudagraph_bytes
    )
    assert p.non_torch_bytes == memory.NON_TORCH_BYTES
    assert p.cudagraph_bytes == memory.cudagraph_estimate(models.get("llama-3.1-8b"), 1024, 8192) > 0
    eager = kvsim.SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb", enforce_eager=True)
    assert eager.pool.cudagraph_bytes == 0
    assert eager.pool.kv_cache_bytes == p.kv_cache_bytes + p.cudagraph_bytes
    measured = kvsim.SimConfig.preset(
        "vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb", cudagraph_memory_bytes="2GiB"
    )
    assert measured.pool.kv_cache_bytes == p.kv_cache_bytes + p.cudagraph_bytes - 2 * GIB
    old = kvsim.SimConfig.preset("vllm-0.19", model="llama-3.1-8b", gpu="h100-80gb")
    assert old.pool.cudagraph_bytes == 0
    # Under tensor parallelism: NCCL's and the custom all-reduce's buffers over NVLink (2.1 GiB measured on
    # H100s), far less over PCIe (an L40S has no peer link).
    tp = kvsim.SimConfig.preset("vllm-0.33", model="llama-3.1-70b", gpu="h100-80gb", tensor_parallel_size=4)
    assert tp.pool.non_torch_bytes == memory.NON_TORCH_BYTES_TP_PEER
    pcie = kvsim.SimConfig.preset(
        "vllm-0.33", model="llama-3.1-8b", gpu="l40s", tensor_parallel_size=2, max_model_len=8192
    )
    assert gpus.get("l40s").peer_bandwidth == 0
    assert pcie.pool.non_torch_bytes == memory.NON_TORCH_BYTES_TP
    total = kvsim.SimConfig.preset(
        "vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb", activation_reserve_bytes="3GiB"
    )
    assert total.pool.kv_cache_bytes == math.floor(g.memory_bytes * 0.92) - p.weight_bytes - 3 * GIB


def test_cudagraph_capture_sizes_are_vllms():
    """vLLM 0.33.0's default sizes: 1, 2, 4, 8..248 by 8, 256..512 by 16 (51), capped at 2 x max_num_seqs."""
    sizes = memory.cudagraph_capture_sizes(1024, 8192)
    assert sizes[:4] == [1, 2, 4, 8]
    assert sizes[-1] == 512
    assert len(sizes) == 3 + 31 + 17
    assert memory.cudagraph_capture_sizes(4, 8192) == [1, 2, 4, 8]
    assert memory.cudagraph_capture_sizes(1024, 8192, blackwell=True)[-1] == 1024


def test_moe_activation_peak_counts_the_routed_copies():
    m = models.get("qwen3-30b-a3b")
    per_token = 4 * m.hidden_size + max(3 * m.intermediate_size, 8 * 3 * 768)
    assert sizing.activation_reserve_estimate(m, 1000, 0) == 1000 * per_token * 2


def test_a_moe_models_workspace_stays_held_beside_the_sampler():
    """vLLM keeps the fused-MoE workspace between passes (`WorkspaceManager`), so the sampler's peak sits on
    top of it: Qwen3-30B-A3B at 8,192 tokens, 8 routed copies of (max(768, 2048) + max(1536, 2048)) 16-bit
    values, 0.5 GiB (vLLM 0.19.0 logged a 2.68 GiB peak, 0.43 above its sampler's); gpt-oss's kernels and
    dense models keep none."""
    m = models.get("qwen3-30b-a3b")
    assert memory.moe_workspace(m, 8192) == 8192 * 8 * (2048 + 2048) * 2 == GIB // 2
    sampler = int(1024 * m.vocab_size * memory.SAMPLER_BYTES_PER_LOGIT)
    assert memory.activation_peak(m, 8192, 1024) == sampler + GIB // 2
    assert memory.moe_workspace(models.get("gpt-oss-120b"), 8192) == 0
    assert memory.moe_workspace(models.get("llama-3.1-8b"), 8192) == 0


def test_the_activation_peak_is_the_forward_pass_or_the_sampler_whichever_is_larger():
    """vLLM 0.19.0's logged peaks on H100s are the sampler's over 1,024 rows where the vocabulary is large
    (the same at tp 1, 2 and 4) and the forward pass's where it is small: never their sum."""
    m = models.get("llama-3.1-8b")
    forward = 8192 * (4 * 4096 + 3 * 14336) * 2
    sampler = int(1024 * 128256 * memory.SAMPLER_BYTES_PER_LOGIT)
    assert sampler > forward
    assert memory.activation_peak(m, 8192, 1024) == sampler
    assert memory.activation_peak(m, 8192, 1024, tp=4) == sampler  # the logits are whole on every rank
    assert memory.activation_peak(m, 8192, 64) == forward
    assert abs(sampler / GIB - 1.89) < 0.02  # the log's "torch peak memory increase: 1.89GiB"


# -- GPUs -----------------------------------------------------------------------------------------------------


def test_a_described_gpu_answers_as_the_preset_with_its_numbers(tmp_path):
    """A GPU described by a file (or flags, tests/test_cli_run.py) with an L40S's numbers sizes the same pool
    and the same roofline as the preset; a preset with one figure replaced changes only that."""
    l40s = gpus.get("l40s")
    f = tmp_path / "card.toml"
    f.write_text(
        f'memory = "{l40s.memory_bytes}B"\nbandwidth = "864GB/s"\ntflops = 362.05\nfp8_tflops = 733\nlink = "32GB/s"\n'
        'name = "l40s"\n'
    )
    mine = gpus.from_file(f)
    a = kvsim.SimConfig(model="qwen3-8b", gpu=str(f), max_model_len=8192)
    b = kvsim.SimConfig(model="qwen3-8b", gpu="l40s", max_model_len=8192)
    assert (a.num_blocks, a.c0_ps, a.c_tok_ps, a.c_ctx_ps) == (b.num_blocks, b.c0_ps, b.c_tok_ps, b.c_ctx_ps)
    assert mine.hbm_bandwidth == l40s.hbm_bandwidth
    assert mine.peak_flops == pytest.approx(l40s.peak_flops)
    bigger = gpus.from_spec({"memory": "96GiB"}, base=l40s)
    assert bigger.hbm_bandwidth == l40s.hbm_bandwidth
    assert bigger.memory_bytes == 96 * GIB
    for spec, needle in (
        ({"memory": "48GiB", "bandwidth": "864GB/s"}, "needs tflops"),
        # (text without a unit: a unit forgotten, user52; a count of bytes is pointed to its B)
        ({"memory": "48", "bandwidth": "864GB/s", "tflops": 1}, "is not a size (.*): did you mean 48GiB"),
        ({"memory": "47576711168"}, "did you mean 47576711168B"),
        ({"memory": "48GiB", "bandwidth": "fast", "tflops": 1}, "is not a bandwidth"),
        ({"memory": "48GiB", "bandwidth": "1TB/s", "tflops": 1, "colour": "red"}, "unknown key 'colour'"),
    ):
        with pytest.raises(InvalidArgumentError, match=needle):
            gpus.from_spec(spec)
    # A key beside a file's [gpu] table was read by nothing (without the table it was refused).
    beside = tmp_path / "beside.toml"
    beside.write_text('extra = 1\n[gpu]\nmemory = "48GiB"\nbandwidth = "864GB/s"\ntflops = 362\n')
    with pytest.raises(InvalidArgumentError, match="unknown key 'extra' beside the \\[gpu\\] table"):
        gpus.from_file(beside)


# -- kvsim run ------------------------------------------------------------------------------------------------


def _run_json(capsys, argv):
    from kvsim.cli import main

    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_kvsim_run_prints_vllms_four_startup_figures(capsys):
    """The issue's own command: gpt-oss-120b (MXFP4 experts) on one H100 starts, and the run prints vLLM's
    four start-up lines, the same as the JSON's and the config's. (vLLM 0.33.0's profiled pool: `vllm-0.33`.)"""
    from kvsim.cli import main

    argv = [
        "run",
        "--preset",
        "vllm-0.33",
        "--model",
        "gpt-oss-120b",
        "--gpu",
        "h100-80gb",
        "--requests",
        "20",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    cfg = kvsim.SimConfig.preset("vllm-0.33", model="gpt-oss-120b", gpu="h100-80gb")
    lines = cfg.pool.figures.lines()
    assert [f"vllm: {line}" for line in lines] == [x for x in out.splitlines() if x.startswith("vllm: ")]
    # 60.77 GiB of weights, 32 MiB of float32 RoPE cache, 0.27 GiB of Triton's float32 biases and padded scales
    assert lines[0] == "Model loading took 61.07 GiB memory"
    assert lines[1].startswith("Available KV cache memory: ")
    assert ", Maximum concurrency for 131,072 tokens per request: " in lines[2]
    data = _run_json(capsys, argv)
    assert data["startup"] == lines
    assert data["pool_sizing"]["startup"]["gpu_kv_cache_tokens"] == cfg.pool.figures.kv_cache_tokens


def test_a_positional_model_is_vllm_serves_spelling(capsys):
    a = _run_json(capsys, ["run", "qwen3-8b", "--gpu", "l40s", "--max-model-len", "8192", "--requests", "10"])
    b = _run_json(
        capsys, ["run", "--model", "qwen3-8b", "--gpu", "l40s", "--max-model-len", "8192", "--requests", "10"]
    )
    assert a["pool"] == b["pool"]
    assert a["summary"] == b["summary"]
    from kvsim.cli import main

    assert main(["run", "qwen3-8b", "--model", "qwen3-8b", "--gpu", "l40s"]) == 2
    assert "the model is given twice" in capsys.readouterr().err


def test_gpu_flags_describe_a_gpu_as_a_preset_would(capsys):
    """--gpu-memory/--gpu-bandwidth/--gpu-tflops/--gpu-link with an L40S's datasheet numbers give the L40S's
    pool and latencies; on top of --gpu NAME they replace that preset's figures; a bad value is one line
    naming the flag."""
    from kvsim.cli import main

    l40s = gpus.get("l40s")
    common = ["run", "qwen3-8b", "--max-model-len", "8192", "--requests", "30"]
    preset = _run_json(capsys, [*common, "--gpu", "l40s"])
    flags = [
        "--gpu-memory",
        f"{l40s.memory_bytes}B",
        "--gpu-bandwidth",
        "864GB/s",
        "--gpu-tflops",
        "362.05",
        "--gpu-link",
        "32GB/s",
        "--gpu-name",
        "l40s",
    ]
    described = _run_json(capsys, [*common, *flags])
    assert described["pool"] == preset["pool"]
    assert described["serving"] == preset["serving"]
    more = _run_json(capsys, [*common, "--gpu", "l40s", "--gpu-memory", "96GiB"])
    assert more["pool_sizing"]["kv_cache_bytes"] > preset["pool_sizing"]["kv_cache_bytes"]
    # a bare number is a unit forgotten, refused as --gpu-bandwidth refuses one (it was 48 bytes, and the
    # error blamed --model: user52), with or without the other figures
    for more in ([], ["--gpu-bandwidth", "864GB/s", "--gpu-tflops", "362"], ["--gpu", "l40s"]):
        assert main([*common, "--gpu-memory", "48", *more]) == 2
        assert capsys.readouterr().err.strip() == (
            "kvsim run: error: argument --gpu-memory: memory '48' is not a size (a number with its unit: 48GiB, "
            "23034MiB, or bytes as 48B): did you mean 48GiB?"
        )
    assert main([*common, "--gpu-memory", "48GiB", "--gpu-bandwidth", "fast", "--gpu-tflops", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvsim run: error: argument --gpu-bandwidth:"), err
    assert len(err.splitlines()) == 1
    # A described GPU short of its figures: the complaint on a flag given, the figures missing named as
    # their flags (it named --gpu-memory, which was not given, for `--gpu-arch sm_80` alone).
    assert main([*common, "--gpu-arch", "sm_80"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "kvsim run: error: argument --gpu-arch: a GPU described by flags needs --gpu-memory, "
        "--gpu-bandwidth, --gpu-tflops too"
    ), err
    assert main([*common, "--gpu", "l40s", "--gpu-arch", "sm_\u0669\u0660"]) == 2  # (not ASCII digits)
    assert "must be sm_XY" in capsys.readouterr().err
