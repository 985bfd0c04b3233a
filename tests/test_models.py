"""Tests of the model presets and config.json reading, pool sizing and the roofline time coefficients (DESIGN.md
§Defaults and sizing, §Time model); the GPU presets: tests/test_gpu_presets.py."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import catalogue, gpus, hf_config, models, sizing

GIB = 1 << 30


def _params_from_config(m: models.Model) -> int:
    """Parameter count re-derived from the architecture fields (an independent check of the presets)."""
    h, layers, vocab, ffn = m.hidden_size, m.num_layers, m.vocab_size, m.intermediate_size
    q = m.num_attention_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    if m.name.startswith("opt"):
        # Learned positions (2048 + 2 offset rows), tied embeddings, biases everywhere, two LayerNorms
        # per layer and a final one.
        per_layer = 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h
        return vocab * h + 2050 * h + layers * per_layer + 2 * h
    # Llama family: untied embeddings, gated MLP, RMSNorm; Qwen2.5 adds q/k/v biases.
    bias = q + 2 * kv if m.name.startswith("qwen") else 0
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * ffn + 2 * h + bias
    return 2 * vocab * h + layers * per_layer + h


def test_check_values_of_the_spec() -> None:
    assert models.get("opt-13b").kv_bytes_per_token == 819_200 == 800 * 1024
    assert models.get("llama-3-8b").kv_bytes_per_token == 131_072
    # 12 GiB of OPT-13B KV holds 15,728 token slots (the paper's Table 1 says 15.7K): vLLM v1's pool of
    # that many blocks (the null block one of them), v0's that many usable blocks and kvsim's null block.
    assert kvsim.pool_blocks("opt-13b", None, 1, kv_cache_bytes=12 * GIB) == 15_728
    assert kvsim.pool_blocks("opt-13b", None, 1, kv_cache_bytes=12 * GIB, null_block="extra") == 15_729


def test_kv_bytes_formula_for_every_preset() -> None:
    for name in models.names():
        m = models.get(name)
        if any(lay.kind == "deepseek_v4" for lay in m.layer_list()):
            continue  # its caches' bytes per token: tests/test_catalogue.py, from the per-layer arithmetic
        # Attention layers only: a state layer (Qwen3-Next's gated delta net, Kimi's KDA) keeps no KV per token,
        # nor a layer without attention (Nemotron-NAS's no-op attention). Gemma 4's global layers have their
        # own KV heads and head width (the layer's, else the model's).
        attention = [lay for lay in m.layer_list() if lay.kind not in ("mamba", "shared", "none")]
        if m.is_mla:
            expected = len(attention) * (m.kv_lora_rank + m.qk_rope_head_dim) * 2
            # DeepSeek-V3.2's indexer keys: 128 fp8 values and an fp32 scale, a layer with an indexer
            expected += sum(132 for lay in attention if lay.index_head_dim)
        else:
            expected = sum(
                2 * (lay.num_kv_heads or m.num_kv_heads) * (lay.head_dim or m.head_dim) * 2
                for lay in attention
            )
        assert m.kv_bytes_per_token == expected, name
        assert m.num_kv_heads <= m.num_attention_heads
        assert m.source


def test_deepseek_v3_uses_mla() -> None:
    m = models.get("deepseek-v3")
    assert m.is_mla
    assert (m.num_layers, m.kv_lora_rank, m.qk_rope_head_dim) == (61, 512, 64)
    assert m.kv_bytes_per_token == 61 * 576 * 2
    assert m.num_active_params < m.num_params


def test_deepseek_v3_is_a_mixture_of_experts() -> None:
    """DeepSeek-V3 (and R1) were a preset of the README's 671B / 37B without experts, which kvsim took for a
    dense model: data and expert parallelism refused. Its config.json (tests/data/hf/deepseek-v3.json): 3
    dense layers of ffn 18432, then 58 MoE layers of 256 routed experts of 2048 (8 a token) and one shared
    expert; fp8 weights in 128 x 128 blocks."""
    m = models.get("deepseek-v3")
    assert models.get("deepseek-r1") is m
    assert (m.num_experts, m.experts_per_token, m.expert_ffn) == (256, 8, 2048)
    assert m.weight_dtype == "fp8"
    assert m.quant_method == "fp8"
    # Every count by hand from the config fields (no MTP layer): embeddings and lm_head, each layer's MLA
    # (q_a 7168x1536, q_b 1536x128x192, kv_a 7168x576, kv_b 512x128x256, o 16384x7168, the two latent
    # norms), two layer norms, the dense MLP (3 x 7168 x 18432) or the MoE (router 256 x 7168 and its 256
    # correction biases, 256 + 1 experts of 3 x 7168 x 2048), the final norm.
    h, v = 7168, 129280
    mla = h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h
    expert = 3 * h * 2048
    dense, moe = 3 * h * 18432, 256 * h + 256 + 257 * expert
    base = 2 * v * h + 61 * (mla + 2 * h) + h
    assert m.num_params == base + 3 * dense + 58 * moe == 671_026_419_200
    assert m.num_active_params == base + 3 * dense + 58 * (moe - 248 * expert) == 37_552_297_472
    # README: 671B total, 37B activated (MTP excluded)
    assert m.num_params / 1e9 == pytest.approx(671, rel=0.001)
    assert m.num_active_params / 1e9 == pytest.approx(37, rel=0.02)
    # Loaded: one byte a parameter but the bf16 embeddings, lm_head, norms and routers, plus the fp32 scale
    # of each 128 x 128 block.
    assert m.num_params < m.param_bytes < 1.005 * m.num_params


@pytest.mark.parametrize(
    "name", [n for n in models.names() if n not in catalogue.ENTRIES]
)  # the catalogue's (Qwen3, MoE, hybrid) are checked against their model cards in tests/test_catalogue.py
def test_parameter_counts_match_the_architecture(name: str) -> None:
    m = models.get(name)
    assert m.num_params == _params_from_config(m)
    assert m.param_bytes == 2 * m.num_params
    assert m.num_active_params == m.num_params


def test_gqa_and_kv_dtype() -> None:
    l70 = models.get("llama-2-70b")
    assert l70.num_kv_heads == 8
    assert l70.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    fp8 = l70.with_kv_dtype("fp8")
    assert fp8.kv_bytes_per_token * 2 == l70.kv_bytes_per_token
    assert fp8.param_bytes == l70.param_bytes
    assert l70.kv_dtype == "fp16"  # presets are immutable; with_* returns a copy
    assert l70.with_weight_dtype("int4").param_bytes == math.ceil(l70.num_params / 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        l70.num_layers = 1  # type: ignore[misc]


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        models.get("gpt-5")
    assert "gpt-5" in str(info.value)
    for name in ("opt-13b", "llama-2-70b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "deepseek-v3"):
        assert name in str(info.value)
    with pytest.raises(InvalidArgumentError, match="a100-40gb"):
        gpus.get("a100")
    with pytest.raises(InvalidArgumentError, match="fp8"):
        models.get("opt-13b").with_kv_dtype("fp7")


def test_pool_blocks_on_a_gpu() -> None:
    m, g = models.get("opt-13b"), gpus.get("a100-40gb")
    kv = sizing.available_kv_bytes(m, g, 0.9)
    assert kv == math.floor(g.memory_bytes * 0.9) - m.param_bytes
    # The paper's "12 GB" of KV for OPT-13B on an A100-40GB (rounded; CUDA's 39.39 GiB x 0.9 less the weights
    # is 12.4 GB)
    assert kv / 1e9 == pytest.approx(12, rel=0.04)
    blocks = kvsim.pool_blocks("opt-13b", "a100-40gb", 16, 0.9)  # the paper's vLLM (v0) share
    assert blocks == kv // (16 * 819_200)  # (vLLM v1's count: the null block one of them)
    assert kvsim.pool_blocks(m, g, 16, 0.9, null_block="extra") == blocks + 1
    reserved = kvsim.pool_blocks(m, g, 16, 0.9, activation_reserve_bytes=GIB)
    assert reserved == (kv - GIB) // (16 * 819_200)
    assert kvsim.pool_blocks(m, g, 16, 0.9, kv_dtype="fp8") == kv // (16 * 409_600)
    assert kvsim.pool_blocks(m, g, 16, 0.8) < blocks
    # Unset, the share is vLLM 0.20.0 and later's 0.92 (DESIGN.md §Presets), as SimConfig's.
    newest = (math.floor(g.memory_bytes * 0.92) - m.param_bytes) // (16 * 819_200)
    assert kvsim.pool_blocks(m, g, 16) == newest > blocks
    assert sizing.available_kv_bytes(m, g) == math.floor(g.memory_bytes * 0.92) - m.param_bytes


def test_pool_blocks_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        kvsim.pool_blocks("llama-2-70b", "a100-80gb", 16)
    # vLLM v1's count: one usable block needs two blocks' bytes (the null block one of them); v0's one
    with pytest.raises(InvalidArgumentError, match=r"one block of 16 tokens .* beside the null block"):
        kvsim.pool_blocks("opt-13b", None, 16, kv_cache_bytes=2 * 16 * 819_200 - 1)
    assert kvsim.pool_blocks("opt-13b", None, 16, kv_cache_bytes=2 * 16 * 819_200) == 2
    with pytest.raises(InvalidArgumentError, match="one block"):
        kvsim.pool_blocks("opt-13b", None, 16, kv_cache_bytes=16 * 819_200 - 1, null_block="extra")
    assert kvsim.pool_blocks("opt-13b", None, 16, kv_cache_bytes=16 * 819_200, null_block="extra") == 2
    with pytest.raises(InvalidArgumentError, match="block_size"):
        kvsim.pool_blocks("opt-13b", "a100-40gb", 0)
    with pytest.raises(InvalidArgumentError, match="gpu_memory_utilization"):
        kvsim.pool_blocks("opt-13b", "a100-40gb", 16, 1.5)
    with pytest.raises(InvalidArgumentError, match="kv_cache_bytes"):
        kvsim.pool_blocks("opt-13b", None, 16)


def test_linear_time_model_roofline() -> None:
    m, g = models.get("opt-13b"), gpus.get("a100-40gb")
    t = sizing.linear_time_model(m, g, block_size=16)
    for value in dataclasses.astuple(t):
        assert isinstance(value, int)
        assert value > 0
    # Weights over HBM: 25.7 GB / 1.555 TB/s = 16.5 ms per iteration.
    assert t.c0_ps == round(m.param_bytes / g.hbm_bandwidth * 1e12)
    assert t.c0_ps == pytest.approx(16.53e9, rel=1e-3)
    # 2 FLOPs per parameter per token at 312 TFLOP/s = 82.4 us per token.
    assert t.c_tok_ps == round(2 * m.num_params / g.peak_flops * 1e12)
    # One token's KV (800 KiB) over HBM = 527 ns; over PCIe Gen4 (32 GB/s) = 25.6 us.
    assert t.c_ctx_ps == round(819_200 / g.hbm_bandwidth * 1e12)
    assert t.swap_ps_per_token == 25_600_000
    assert t.swap_ps_per_block == 16 * t.swap_ps_per_token
    assert (
        t.iteration_ps(10, 1000, 2) == t.c0_ps + 10 * t.c_tok_ps + 1000 * t.c_ctx_ps + 2 * t.swap_ps_per_block
    )
    slow = sizing.linear_time_model(m, g, flops_efficiency=0.5, bandwidth_efficiency=0.5)
    assert slow.c_tok_ps == pytest.approx(2 * t.c_tok_ps, abs=1)
    assert slow.c0_ps == pytest.approx(2 * t.c0_ps, abs=1)
    # MoE: FLOPs follow the active parameters, weight traffic all of them.
    ds, h200 = sizing.linear_time_model("deepseek-v3", "h200"), gpus.get("h200")
    assert ds.c_tok_ps == round(2 * 37_552_297_472 / 989.4e12 * 1e12)
    assert ds.c0_ps == round(models.get("deepseek-v3").param_bytes / h200.hbm_bandwidth * 1e12)
    with pytest.raises(InvalidArgumentError, match="flops_efficiency"):
        sizing.linear_time_model(m, g, flops_efficiency=0)


# -- Hugging Face config.json (issue 13 part 1) ----------------------------------------------------------------
HF = Path(__file__).parent / "data" / "hf"


@pytest.mark.parametrize("name", ["llama-3-8b", "mistral-7b", "opt-13b", "deepseek-v3"])
def test_hf_config_gives_the_presets_architecture(name):
    """Hand-written copies of the published config.json files: the model built from one has the preset's
    KV bytes per token and (derived from the architecture) its parameter count."""
    m = models.from_hf_config(HF / f"{name}.json")
    p = models.get(name)
    assert m.kv_bytes_per_token == p.kv_bytes_per_token
    assert (m.num_layers, m.num_kv_heads, m.hidden_size) == (p.num_layers, p.num_kv_heads, p.hidden_size)
    assert m.weight_dtype == p.weight_dtype
    assert m.is_mla == p.is_mla
    # exact: the presets' counts are the safetensors totals (DeepSeek-V3's is built from this file)
    assert m.num_params == p.num_params
    assert m.num_active_params == p.num_active_params


def test_hf_moe_config_counts_total_and_active_experts():
    m = models.from_hf_config(HF / "mixtral-8x7b.json")
    assert m.num_params == pytest.approx(46.7e9, rel=1e-3)  # Mixtral's published 46.7B total
    assert m.num_active_params == pytest.approx(12.9e9, rel=1e-2)  # and 12.9B active


@pytest.mark.parametrize(
    ("name", "fields", "message"),
    [
        # gpt-oss without experts was priced as a dense MLP; a top-k of 0 or past the experts gave fewer or
        # more active parameters than the model has.
        ("gpt-oss-20b", {"num_local_experts": 0}, "'num_local_experts' 0 must be at least 1"),
        (
            "gpt-oss-20b",
            {"num_experts_per_tok": 0},
            "'num_experts_per_tok' 0 must be from 1 to the 32 experts",
        ),
        (
            "qwen3-30b-a3b",
            {"num_experts_per_tok": 999},
            "'num_experts_per_tok' 999 must be from 1 to the 128",
        ),
        # A step of MoE layers of 0 (vLLM's modulo: a ZeroDivisionError there) was read as 1.
        ("qwen3-30b-a3b", {"decoder_sparse_step": 0}, "'decoder_sparse_step' 0 must be a whole number of at"),
        # A list in mlp_only_layers was a bare TypeError (unhashable).
        ("qwen3-30b-a3b", {"mlp_only_layers": [[1]]}, "'mlp_only_layers' [[1]] must list layer numbers"),
    ],
)
def test_hf_moe_fields_no_model_has_are_refused_by_name(tmp_path, name, fields, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / f"{name}.json").read_text()), **fields}))
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as info:
        models.from_hf_config(path)
    assert str(info.value).startswith(f"model {path}: field ")


def test_moe_layers_take_the_first_of_a_deepseek_step_and_the_last_of_a_qwen_step():
    """vLLM's DeepSeek / Kimi put experts on `layer_idx % moe_layer_freq == 0` (after the first dense
    ones); Qwen's `decoder_sparse_step` on `(layer_idx + 1) % step == 0`. Both were read the second way."""
    from kvsim.model.params import _layer_flags

    def flags(cfg):
        def pick(*keys, default=None, required=True):
            return next((cfg[k] for k in keys if cfg.get(k) is not None), default)

        return [i for i, f in enumerate(_layer_flags(cfg, 7, 8, pick, "m")) if f]

    assert flags({"moe_layer_freq": 2, "first_k_dense_replace": 1}) == [2, 4, 6]
    assert flags({"moe_layer_freq": 3}) == [0, 3, 6]
    assert flags({"moe_layer_freq": 1, "first_k_dense_replace": 2}) == [2, 3, 4, 5, 6]
    assert flags({"decoder_sparse_step": 2}) == [1, 3, 5]
    assert flags({"interleave_moe_layer_step": 3}) == [2, 5]


@pytest.mark.parametrize(
    ("name", "fields", "message"),
    [
        # vLLM's DeepSeek / Kimi MoE layers are `layer_idx % moe_layer_freq == 0` (a ZeroDivisionError at
        # 0): 0, a negative step or a string was read as 1 (every layer MoE), a mask of the wrong length too.
        ("deepseek-v3", {"moe_layer_freq": 0}, "'moe_layer_freq' 0 must be a whole number of at least 1"),
        ("kimi-linear-48b-a3b", {"moe_layer_freq": -2}, "'moe_layer_freq' -2 must be a whole number of at"),
        ("deepseek-v3", {"moe_layer_freq": "2"}, "'moe_layer_freq' '2' must be a whole number of at least 1"),
        ("deepseek-v3", {"moe_layer_freq": [1, 0]}, "'moe_layer_freq' [1, 0] must be a whole number of at"),
        # DeepSeek-V4 builds an MoE block on every layer: 0 experts priced none; a top-k of 0 or past the
        # experts gave fewer or more active parameters than the model has.
        ("deepseek-v4-flash", {"n_routed_experts": 0}, "'n_routed_experts' 0 must be a whole number of at"),
        (
            "deepseek-v4-flash",
            {"num_experts_per_tok": 0},
            "'num_experts_per_tok' 0 must be from 1 to the 256 experts",
        ),
        # (refused before, by the layer, with a message naming no field)
        (
            "deepseek-v4-flash",
            {"sliding_window": 0},
            "'sliding_window' 0 must be a whole number of at least 1",
        ),
        # Gemma 4: 0 experts was read as a dense model (None is one; vLLM's MoE block builds `num_experts`),
        # a top-k of 0 priced no active experts, a global head width of 0 was read as `head_dim`.
        ("gemma-4-26b-a4b", {"num_experts": 0}, "'num_experts' 0 must be a whole number of at least 1"),
        ("gemma-4-26b-a4b", {"top_k_experts": 0}, "'top_k_experts' 0 must be from 1 to the 128 experts"),
        ("gemma-4-26b-a4b", {"top_k_experts": 129}, "'top_k_experts' 129 must be from 1 to the 128 experts"),
        ("gemma-4-31b", {"global_head_dim": 0}, "'global_head_dim' 0 must be a whole number of at least 1"),
    ],
)
def test_hf_fields_no_model_has_are_refused_by_name(tmp_path, name, fields, message):
    cfg = json.loads((HF / f"{name}.json").read_text())
    (cfg.get("text_config") or cfg).update(fields)  # Gemma 4's fields are its text_config's
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InvalidArgumentError, match=re.escape(f"field {message}")) as info:
        models.from_hf_config(path)
    assert str(path) in str(info.value)


def test_hf_gemma_4_dense_fields_left_null_still_load(tmp_path):
    """The dense Gemma 4 configs hold `num_experts` / `top_k_experts` null (no experts), and a null
    `global_head_dim` is `head_dim`, as vLLM's getattr default: kept."""
    cfg = json.loads((HF / "gemma-4-31b.json").read_text())
    assert cfg["text_config"]["num_experts"] is None
    cfg["text_config"]["global_head_dim"] = None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = models.from_hf_config(path)
    assert m.num_experts == 0
    assert {lay.head_dim for lay in m.layer_list() if lay.kind == "full"} == {cfg["text_config"]["head_dim"]}


@pytest.mark.parametrize("field", ["max_position_embeddings", "vocab_size", "intermediate_size"])
def test_hf_sizes_of_zero_are_refused_by_name(tmp_path, field):
    """A context of 0 was a ZeroDivisionError (vLLM's concurrency figure divides by it); a vocabulary or
    an MLP of 0 priced a model that has none."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "llama-3-8b.json").read_text()), field: 0}))
    with pytest.raises(InvalidArgumentError, match=f"field '{field}' 0 must be a whole number of at least 1"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="8GiB")


def test_hf_qwen3_moe_without_experts_is_dense():
    """vLLM's Qwen3-MoE builds a dense MLP where `num_experts` is 0 (`config.num_experts > 0`): kept."""
    cfg = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    m = hf_config._from_dict({**cfg, "num_experts": 0}, "q", "q", "q", None)
    assert (m.num_experts, m.num_params == m.num_active_params) == (0, True)


@pytest.mark.parametrize(
    ("preset", "field"),
    [
        ("deepseek-v3", "n_routed_experts"),
        ("kimi-linear-48b-a3b", "num_experts"),
        ("mixtral-8x7b", "num_local_experts"),
    ],
)
def test_hf_zero_experts_where_vllm_builds_the_moe_block_anyway_is_refused(tmp_path, preset, field):
    """DeepSeek's, Kimi-Linear's and Mixtral's layers in vLLM build their MoE block whenever the count is
    set (`is not None`, not `> 0`): a count of 0 is no model vLLM loads, where kvsim ran it dense. Left
    out (or null), the model is dense."""
    cfg = json.loads((HF / f"{preset}.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, field: 0}))
    with pytest.raises(InvalidArgumentError, match=f"field '{field}' 0: vLLM builds this model's MoE block"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="8GiB")
    path.write_text(json.dumps({**cfg, field: None}))
    assert models.from_hf_config(path).num_experts == 0


def test_simconfig_takes_a_config_path(tmp_path):
    path = str(HF / "llama-3-8b.json")
    by_path = kvsim.SimConfig(model=path, gpu="h100-80gb")
    by_name = kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb")
    assert by_path.num_blocks == by_name.num_blocks
    assert by_path.c0_ps == by_name.c0_ps
    assert by_path.to_dict()["model"] == path
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "llama-3-8b.json").read_text())
    assert kvsim.SimConfig(model=str(folder), gpu="h100-80gb").num_blocks == by_name.num_blocks


def test_bad_hf_configs_name_file_and_field(tmp_path):
    missing = tmp_path / "c.json"
    missing.write_text('{"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}')
    with pytest.raises(InvalidArgumentError, match="num_hidden_layers"):
        kvsim.SimConfig(model=str(missing), kv_cache_bytes="1GiB")
    broken = tmp_path / "b.json"
    broken.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="is not a JSON config"):
        models.from_hf_config(broken)
    wrong = tmp_path / "w.json"
    wrong.write_text(
        '{"num_hidden_layers": "32", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 1}'
    )
    with pytest.raises(InvalidArgumentError, match="'num_hidden_layers' '32'"):
        models.from_hf_config(wrong)
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        models.from_hf_config(tmp_path / "absent.json")


def test_hf_config_with_heads_not_a_multiple_of_kv_heads_is_refused(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(
        '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, '
        '"num_key_value_heads": 7, "vocab_size": 100, "intermediate_size": 10}'
    )
    with pytest.raises(
        InvalidArgumentError, match="num_attention_heads 32 is not a multiple of num_key_value_heads 7"
    ):
        models.from_hf_config(cfg)


def test_hf_mla_config_deepseek_v2_lite_shapes(tmp_path):
    """DeepSeek-V2-Lite's MLA: 27 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes per token,
    replicated on every GPU under tensor parallelism; fp8 halves it."""
    cfg = tmp_path / "config.json"
    cfg.write_text(
        '{"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048, "intermediate_size": 10944, '
        '"kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2", '
        '"moe_intermediate_size": 1408, "moe_layer_freq": 1, "first_k_dense_replace": 1, '
        '"n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 16, '
        '"num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16, '
        '"q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, '
        '"tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 102400}'
    )
    m = models.from_hf_config(tmp_path)
    assert m.is_mla
    assert m.kv_bytes_per_token == 27 * (512 + 64) * 2
    assert sizing.kv_bytes_per_token(m, tensor_parallel_size=2) == 27 * 576 * 2
    assert sizing.kv_bytes_per_token(m, "fp8") == 27 * 576
    assert 15.5e9 < m.num_params < 16e9  # published: 15.7B total
    # MLA's widths as the config states them (the roofline's, `timing.mla_layer_values`); a null q_lora_rank
    # is none (the query projected from the hidden state), and head_dim stays hidden / heads
    assert (m.qk_nope_head_dim, m.v_head_dim, m.q_lora_rank, m.head_dim) == (128, 128, 0, 2048 // 16)


def test_mla_widths_are_read_from_the_config_and_default_as_the_weights_read_them():
    """DeepSeek-V3's config.json: q_lora_rank 1536, qk_nope_head_dim 128, v_head_dim 128 (its head_dim, absent,
    is hidden / heads = 56). Without `v_head_dim` the value heads are `head_dim` wide, as the weights count
    them (`params`); a model without a latent has none of these widths."""
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    m = hf_config._from_dict(cfg, "d", "d", "d", None)
    assert (m.q_lora_rank, m.qk_nope_head_dim, m.v_head_dim, m.head_dim) == (1536, 128, 128, 56)
    no_v = hf_config._from_dict({k: v for k, v in cfg.items() if k != "v_head_dim"}, "d", "d", "d", None)
    assert no_v.v_head_dim == 56
    glm = models.get("glm-5")  # (its own widths: q_lora 2048, qk_nope 192, v_head 256)
    assert (glm.q_lora_rank, glm.qk_nope_head_dim, glm.v_head_dim) == (2048, 192, 256)
    llama = models.get("llama-3.1-8b")
    assert (llama.q_lora_rank, llama.qk_nope_head_dim, llama.v_head_dim) == (0, 0, 0)


def test_an_mla_latent_of_zero_is_refused_not_read_as_ordinary_attention():
    """Kimi-Linear with `kv_lora_rank: 0` ran its MLA layers as ordinary attention (63 KiB a token
    against 7.9); vLLM reads any latent given (`kv_lora_rank is not None`), and none is 0 wide."""
    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    with pytest.raises(InvalidArgumentError, match="'kv_lora_rank' 0 must be a whole number of at least 1"):
        hf_config._from_dict({**cfg, "kv_lora_rank": 0}, "k", "k", "k", None)
    assert hf_config._from_dict({**cfg, "kv_lora_rank": 512}, "k", "k", "k", None).kv_lora_rank == 512


def test_a_float32_checkpoint_is_served_in_two_bytes_as_vllm_serves_it():
    """vLLM's `--dtype auto` downcasts a float32 checkpoint (`_resolve_auto_dtype`): kvsim counted its
    weights and KV cache at four bytes, twice what vLLM allocates."""
    cfg = json.loads((HF / "llama-3-8b.json").read_text())
    half = hf_config._from_dict({**cfg, "torch_dtype": "bfloat16"}, "a", "a", "a", None)
    full = hf_config._from_dict({**cfg, "torch_dtype": "float32"}, "b", "b", "b", None)
    assert full.kv_bytes_per_token == half.kv_bytes_per_token
    assert full.param_bytes == half.param_bytes


@pytest.mark.parametrize(
    ("rope", "extra", "context"),
    [
        (None, {}, 8192),
        ({"rope_type": "linear", "factor": 2.0}, {}, 16384),
        ({"type": "dynamic", "factor": 4}, {}, 32768),  # (the older spelling, `type`)
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}, {}, 8192),
        ({"rope_type": "llama3", "factor": 8.0}, {}, 8192),
        ({"rope_type": "linear", "factor": None}, {}, 8192),  # (vLLM falls back to 1)
        ({"rope_type": "longrope", "factor": 4.0}, {"original_max_position_embeddings": 4096}, 4096),
        # (legacy names, as the type vLLM renames them to: they scaled by the factor here before)
        ({"rope_type": "su", "factor": 4.0}, {"original_max_position_embeddings": 4096}, 4096),
        ({"rope_type": "telechat3-yarn", "factor": 4.0}, {}, 8192),
        ({"full_attention": {"rope_type": "linear", "factor": 2.0}}, {}, 16384),  # (per layer type)
    ],
)
def test_the_context_follows_vllms_rope_scaling(rope, extra, context):
    """vLLM 0.33.0 derives the default context from max_position_embeddings times a RoPE scaling factor,
    except for the types that leave it scaled already (YaRN, Llama 3's, LongRoPE, whose default is its
    original context); kvsim read no RoPE scaling (`_get_and_verify_max_len`)."""
    cfg = json.loads((HF / "llama-3-8b.json").read_text())
    cfg = {**cfg, "rope_scaling": rope, **extra}
    assert hf_config._from_dict(cfg, "r", "r", "r", None).max_model_len == context


@pytest.mark.parametrize(
    ("extra", "context", "key"),
    [
        ({"seq_length": 4096}, 4096, "seq_length"),  # (kvsim took the first present: 8192)
        ({"max_seq_len": 16384}, 8192, "max_position_embeddings"),
        ({"n_positions": 2048, "max_sequence_length": 1024}, 1024, "max_sequence_length"),
        ({"model_max_length": 32768}, 32768, "model_max_length"),  # (Command-R's: it replaces the rest)
        ({"max_position_embeddings": None, "seq_len": 3000}, 3000, "seq_len"),
        ({"max_position_embeddings": None}, 2048, ""),  # (none of the keys: vLLM assumes 2048)
    ],
)
def test_the_context_is_the_smallest_of_vllms_keys(extra, context, key):
    """vLLM 0.33.0's `derive_max_model_len_and_key`: the smallest of nine keys present, `model_max_length` in
    their place when set, 2048 when none is; the key is what its refusal names."""
    cfg = {**json.loads((HF / "llama-3-8b.json").read_text()), **extra}
    m = hf_config._from_dict(cfg, "c", "c", "c", None)
    assert (m.max_model_len, m.longest_context) == (context, context)
    assert m.context_key == (key or "default")


def test_a_max_model_len_past_the_context_is_refused_as_vllm_refuses_it(tmp_path):
    """vLLM 0.33.0 refuses a `--max-model-len` longer than the derived context unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (`_get_and_verify_max_len`); kvsim took it silently. A LongRoPE model
    defaults to its original context but accepts up to its derived one; a wrapper's `model_max_length`
    larger than the context is accepted up to it."""
    with pytest.raises(InvalidArgumentError) as e:
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len=131_073)
    assert str(e.value) == (
        "max_model_len 131,073 is longer than model llama-3.1-8b's context (max_position_embeddings 131,072): "
        "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (allow_long_max_model_len, --allow-long-max-model-len, simulates that)"
    )
    assert (
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len=131_072).max_model_len == 131_072
    )
    long = kvsim.SimConfig(
        model="llama-3.1-8b", gpu="h100-80gb", max_model_len=262_144, allow_long_max_model_len=True
    )
    assert long.max_model_len == 262_144
    with pytest.raises(
        InvalidArgumentError, match=re.escape("opt-13b's context (max_position_embeddings 2,048)")
    ):
        kvsim.SimConfig(model="opt-13b", num_blocks=100, max_model_len=2049)  # (a 2024 preset)
    assert (
        kvsim.SimConfig(num_blocks=100, max_model_len=10**9).max_model_len == 10**9
    )  # (no model: no context)

    base = json.loads((HF / "llama-3-8b.json").read_text())
    longrope = {
        **base,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "longrope", "long_factor": [1.0], "short_factor": [1.0]},
    }
    path = tmp_path / "longrope.json"
    path.write_text(json.dumps(longrope))
    m = kvsim.models.resolve(str(path))
    assert (m.max_model_len, m.longest_context) == (4096, 131072)
    assert kvsim.SimConfig(model=str(path), num_blocks=100, max_model_len=131072).max_model_len == 131072
    with pytest.raises(InvalidArgumentError, match="131,073 is longer"):
        kvsim.SimConfig(model=str(path), num_blocks=100, max_model_len=131073)

    # A text config's model_max_length larger than its context is accepted up to it; a multimodal wrapper's
    # own is not the language model's (vLLM reads `hf_text_config`).
    inner = {**base, "text_config": {"max_position_embeddings": 8192, "model_max_length": 65536}}
    m = hf_config._from_dict(inner, "w", "w", "w", None)
    assert (m.max_model_len, m.longest_context, m.context_key) == (65536, 65536, "model_max_length")
    outer = {**base, "model_max_length": 65536, "text_config": {"max_position_embeddings": 8192}}
    m = hf_config._from_dict(outer, "w", "w", "w", None)
    assert (m.max_model_len, m.longest_context, m.context_key) == (8192, 8192, "max_position_embeddings")
    none = {k: v for k, v in base.items() if k != "max_position_embeddings"}
    path = tmp_path / "none.json"
    path.write_text(json.dumps(none))
    with pytest.raises(InvalidArgumentError, match=re.escape("(no context field: vLLM assumes 2,048)")):
        kvsim.SimConfig(model=str(path), num_blocks=100, max_model_len=4096)


def test_the_cli_refuses_a_max_model_len_past_the_context_in_one_line(capsys):
    from kvsim.cli import main

    args = ["run", "--model", "opt-13b", "--num-blocks", "100", "--max-model-len", "4096", "--requests", "5"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "longer than model opt-13b's context" in err
    assert main([*args, "--allow-long-max-model-len", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["completed"] == 5


@pytest.mark.parametrize(
    ("fields", "kv_heads"),
    [
        # Falcon-40B: new_decoder_architecture reads num_kv_heads (kvsim cached all 128 heads)
        ({"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 8}, 8),
        ({"model_type": "falcon", "multi_query": True}, 1),  # Falcon-7B
        (
            {
                "model_type": "falcon",
                "new_decoder_architecture": True,
                "multi_query": True,
                "num_kv_heads": 8,
            },
            8,
        ),
        ({"model_type": "falcon"}, 32),
        # ChatGLM3: multi_query_group_num under multi_query_attention (kvsim cached all 32 heads)
        ({"model_type": "chatglm", "multi_query_attention": True, "multi_query_group_num": 2}, 2),
        ({"model_type": "chatglm", "multi_query_attention": False, "multi_query_group_num": 2}, 32),
        # vLLM's other names for the KV heads (Step-3.5's num_attention_groups), first of its order
        ({"model_type": "step3p5", "num_attention_groups": 8}, 8),
        ({"model_type": "llama", "num_key_value_heads": 8}, 8),
        ({"model_type": "llama", "num_key_value_heads": None}, 32),
        ({"model_type": "gpt_bigcode", "num_key_value_heads": None, "multi_query": True}, 1),
    ],
)
def test_the_kv_heads_are_those_vllms_layers_cache(fields, kv_heads):
    """vLLM 0.33.0: falcon.py, chatglm.py, and `CONFIG_FIELD_ALIASES["total_num_kv_heads"]` elsewhere."""
    cfg = {**json.loads((HF / "llama-3-8b.json").read_text()), **fields}
    assert hf_config._from_dict(cfg, "h", "h", "h", None).num_kv_heads == kv_heads


def test_minicpm3_caches_every_heads_k_and_v_not_an_mla_latent():
    """vLLM 0.33.0 runs MLA only for DeepSeek-style model types (`is_deepseek_mla`); MiniCPM3's low-rank
    attention is an `Attention` of `qk_nope_head_dim + qk_rope_head_dim` per head for K and V
    (minicpm3.py): 62 layers x 40 heads x 96 x 2 x 2 bytes a token, where kvsim cached a 288-wide latent
    (26.7 times fewer bytes). A `kv_lora_rank` on another model type is refused by name."""
    base = json.loads((HF / "llama-3-8b.json").read_text())
    mini = {
        **base,
        "model_type": "minicpm3",
        "hidden_size": 2560,
        "num_attention_heads": 40,
        "num_key_value_heads": 40,
        "num_hidden_layers": 62,
        "intermediate_size": 6400,
        "q_lora_rank": 768,
        "kv_lora_rank": 256,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 32,
        "v_head_dim": 64,
    }
    m = hf_config._from_dict(mini, "m", "m", "m", None)
    assert not m.is_mla
    assert (m.num_kv_heads, m.head_dim) == (40, 96)
    assert m.kv_bytes_per_token == 62 * 40 * 96 * 2 * 2
    # The weights still count the low-rank projections (the same as read as MLA).
    assert (
        m.num_params
        == hf_config._from_dict({**mini, "model_type": "deepseek_v2"}, "d", "d", "d", None).num_params
    )
    with pytest.raises(InvalidArgumentError, match="field 'kv_lora_rank' on model_type 'custom'"):
        hf_config._from_dict({**mini, "model_type": "custom"}, "c", "c", "c", None)
    # vLLM 0.34.0 adds Mistral Large 4 to its MLA model types (MLA with a DSA indexer): named, not modelled.
    with pytest.raises(InvalidArgumentError, match=r"model_type 'mistral_large_4' .*new in vLLM 0\.34\.0"):
        hf_config._from_dict({**mini, "model_type": "mistral_large_4"}, "l", "l", "l", None)


@pytest.mark.parametrize("rope", ["linear", {"rope_type": "linear", "factor": "x"}, {"rope_type": 3}])
def test_a_rope_scaling_kvsim_cannot_read_is_refused_by_name(rope):
    cfg = {**json.loads((HF / "llama-3-8b.json").read_text()), "rope_scaling": rope}
    with pytest.raises(InvalidArgumentError, match="field 'rope_scaling"):
        hf_config._from_dict(cfg, "r", "r", "r", None)


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"block_size": 16.5}, "block_size 16.5 must be an integer"),  # (it returned 28744.0, a float)
        ({"block_size": True}, "block_size True must be an integer"),  # (it took 1)
        ({"block_size": "16"}, "block_size '16' must be an integer"),  # (TypeError)
        ({"block_size": None}, "block_size None must be given"),  # (TypeError, once the knob was optional)
        ({"gpu_memory_utilization": "0.9"}, "gpu_memory_utilization '0.9' must be a number"),
        ({"kv_cache_bytes": float("nan")}, "kv_cache_bytes nan"),  # (ValueError)
        ({"activation_reserve_bytes": float("nan")}, "activation_reserve_bytes nan"),  # (it returned nan)
        ({"kv_dtype": "int4"}, "kv_cache_dtype 'int4' is not one of"),  # (SimConfig refuses it; this took it)
        ({"null_block": "no"}, "pool_null_block 'no' is not one of"),
    ],
)
def test_pool_blocks_takes_its_arguments_as_simconfig_does(kw, said):
    args = {"block_size": 16, **kw}
    with pytest.raises(InvalidArgumentError, match=re.escape(said)):
        kvsim.pool_blocks("llama-3-8b", "h100-80gb", **args)
    # Units are taken as SimConfig takes them: "1GiB" of 2 MiB blocks, the null block one of them.
    assert kvsim.pool_blocks("llama-3-8b", None, 16, kv_cache_bytes="1GiB") == 512


@pytest.mark.parametrize(
    ("rope", "said"),
    [
        (
            {"rope_type": "mystery", "factor": 4.0},
            "rope_type 'mystery' is not one vLLM 0.33.0 or 0.34.0 builds",
        ),
        ({"type": "mystery"}, "rope_type 'mystery' is not one vLLM 0.33.0 or 0.34.0 builds"),
        ({"rope_type": "dynamic"}, "rope_type 'dynamic' needs a 'factor' or an 'alpha'"),
        # (an empty name: the rope cache took it for 'default' while the context scaled by its factor, 8192
        # tokens to 32768)
        ({"rope_type": "", "factor": 4.0}, "is empty; name a rope type"),
        ({"type": "", "factor": 4.0}, "is empty; name a rope type"),
    ],
)
def test_a_rope_type_vllm_cannot_build_is_refused_by_name(rope, said, tmp_path, capsys):
    """vLLM 0.33.0's get_rope raises on a rope_type it has no class for (kvsim had counted such a cache as
    `max_position_embeddings` rows); the CLI says so in one line, exit 2."""
    cfg = {**json.loads((HF / "llama-3-8b.json").read_text()), "rope_scaling": rope}
    _refused_in_one_line(cfg, said, tmp_path, capsys)


def _refused_in_one_line(cfg, said, tmp_path, capsys):
    """`cfg` is refused by `_from_dict` with `said`, and `kvsim run --model` of it in one line, exit 2."""
    from kvsim.cli import main

    with pytest.raises(InvalidArgumentError, match=re.escape(said)):
        hf_config._from_dict(cfg, "r", "r", "r", None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["run", "--model", str(path), "--gpu", "h200", "--requests", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert said in err[0]


def test_dynamic_ntk_and_telechat_yarn_rows_follow_vllm():
    """vLLM 0.33.0: DynamicNTKScalingRotaryEmbedding builds `max_position_embeddings` rows (its
    `_compute_cos_sin_cache` takes `torch.arange(self.max_position_embeddings)`), and `telechat3-yarn` is
    renamed `yarn` before get_rope (`patch_legacy_rope_type`): `original × factor` rows."""
    from kvsim.model.rope import rows

    assert rows({"rope_type": "dynamic", "factor": 4.0}, 8192) == 8192
    yarn = {"factor": 4.0, "original_max_position_embeddings": 4096}
    assert (
        rows({"rope_type": "telechat3-yarn", **yarn}, 8192)
        == rows({"rope_type": "yarn", **yarn}, 8192)
        == 16384
    )


@pytest.mark.parametrize(
    ("cfg", "said"),
    [
        (
            {"architectures": ["Rwkv7ForCausalLM"], "model_type": "rwkv7", "hidden_size": 4096},
            "Rwkv7ForCausalLM (model_type 'rwkv7') is an RWKV model, which vLLM 0.33.0 and 0.34.0 do not serve",
        ),
        (
            {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 2560},
            "MambaForCausalLM (model_type 'mamba') is a state-space model without attention layers",
        ),
        # (by its architecture alone, with no model_type: it was refused for its missing heads)
        (
            {"architectures": ["MambaForCausalLM"], "hidden_size": 768},
            "MambaForCausalLM is a state-space model",
        ),
        (  # (a multimodal wrapper around a Mamba language model: read past, to its missing heads)
            {
                "model_type": "llava",
                "architectures": ["LlavaForConditionalGeneration"],
                "text_config": {"model_type": "mamba", "hidden_size": 768},
                "vision_config": {"hidden_size": 1024},
            },
            "LlavaForConditionalGeneration (text_config.model_type 'mamba') is a state-space model",
        ),
        # (odd types refused by name: str(['rwkv']) starts with "['", so it was not seen as RWKV)
        (
            {"model_type": ["rwkv"], "architectures": "Rwkv7ForCausalLM"},
            "field 'model_type' ['rwkv'] must be a name",
        ),
        (
            {"model_type": "rwkv7", "architectures": "Rwkv7ForCausalLM"},
            "field 'architectures' 'Rwkv7ForCausalLM' must be a list",
        ),
    ],
)
def test_an_attention_free_architecture_is_refused_by_name(cfg, said, tmp_path, capsys):
    """An RWKV-7 config was refused as having no 'num_attention_heads': now by its architecture (vLLM 0.33.0's
    registry has no RWKV; kvsim models Mamba layers only beside attention), one line, exit 2."""
    _refused_in_one_line({**cfg, "num_hidden_layers": 32, "vocab_size": 65536}, said, tmp_path, capsys)


def test_gpt_oss_on_an_arch_without_an_mxfp4_row_is_refused():
    """Jetson Thor (`sm_110`): vLLM 0.33.0 runs gpt-oss's MXFP4 experts on the OAI Triton kernels there and
    0.34.0 on Marlin; kvsim has no row for it and took the padding as none (gpt-oss-20b loaded 12.85 GiB,
    where sm_120's Marlin padding gives 13.70). Refused by name; other models on sm_110 still size."""
    thor = gpus.from_spec(
        {"memory": "128GiB", "bandwidth": "273GB/s", "tflops": 500, "arch": "sm_110", "name": "thor"}
    )
    with pytest.raises(
        InvalidArgumentError, match=r"gpt-oss-20b on sm_110: kvsim has no MXFP4 MoE backend row"
    ):
        kvsim.SimConfig(model="gpt-oss-20b", gpu=thor)
    orin = gpus.from_spec({"memory": "64GiB", "bandwidth": "204GB/s", "tflops": 100, "arch": "sm_87"})
    with pytest.raises(InvalidArgumentError, match=r"on sm_87: kvsim has no MXFP4 MoE backend row"):
        kvsim.SimConfig(model="gpt-oss-20b", gpu=orin)
    assert kvsim.SimConfig(model="llama-3.1-8b", gpu=thor).pool.num_blocks > 0
