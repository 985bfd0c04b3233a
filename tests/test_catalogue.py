"""The 2026 catalogue (models, GPUs), weights as vLLM loads them (quantization), vLLM's memory accounting
and start-up figures (issue 25; DESIGN.md §Defaults and sizing)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import catalogue, gpus, hf_config, memory, models, quant, sizing
from kvsim.model.layers import kv_layout
from kvsim.model.shard import replicated
from kvsim.model.sizing import size_pool

HF = Path(__file__).parent / "data" / "hf"
GIB = 1 << 30

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


def _text(cfg: dict) -> dict:
    return {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg


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


# -- quantization -------------------------------------------------------------------------------------------


def test_mxfp4_prices_the_experts_at_4_25_bits_and_the_rest_in_bf16():
    """gpt-oss-120b: every expert matrix at 4 bits plus an 8-bit scale per 32 inputs; attention, router,
    embeddings, lm_head, biases and norms at 2 bytes (re-derived here from the config)."""
    cfg = json.loads((HF / "gpt-oss-120b.json").read_text())
    h, f, e, n = (
        cfg["hidden_size"],
        cfg["intermediate_size"],
        cfg["num_local_experts"],
        cfg["num_hidden_layers"],
    )
    expert_weights = n * e * (h * 2 * f + f * h)
    expert_bytes = n * e * (2 * f * h // 2 + 2 * f * (h // 32) + h * f // 2 + h * (f // 32))
    m = models.get("gpt-oss-120b")
    rest = m.num_params - expert_weights
    assert m.weight_bytes == expert_bytes + 2 * rest
    assert m.weight_bytes / GIB == pytest.approx(60.77, abs=0.01)
    # vLLM 0.14.1 logged 64.38 GiB on an H100 (vllm-project/vllm#33155): its Triton backend pads the experts.
    assert m.weight_bytes / GIB < 64.38


def test_awq_and_gptq_count_scales_and_zero_points(tmp_path):
    """AWQ int4 in groups of 128: half a byte a weight, an fp16 scale and a 4-bit zero per group; GPTQ the
    same in vLLM 0.33.0 (no g_idx: it refuses group act-order), a desc_act of true with per-channel scales
    being no act-order at all."""
    one = quant.Format("int", 4, "group", group=128, zeros=True)
    from kvsim.model.params import Matrix

    m = Matrix(4096, 4096)
    assert one.matrix_bytes(m) == 4096 * 4096 // 2 + 32 * 4096 * 2 + 32 * 4096 // 2
    gptq = quant.from_config(
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}, "q"
    )
    assert gptq.formats["mlp"].matrix_bytes(m) == one.matrix_bytes(m)
    channel = quant.from_config(
        {"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": True, "sym": True}, "q"
    )
    assert channel.formats["attn"].group == -1
    awq = models.get("qwen3-32b-awq")
    dense = models.get("qwen3-32b")
    assert awq.num_params == dense.num_params
    # The embeddings and lm_head stay fp16 (2 x 151936 x 5120 x 2 bytes); the linear layers ~4.16 bits.
    embeds = 2 * 151936 * 5120 * 2
    linear = dense.num_params - 2 * 151936 * 5120
    assert awq.weight_bytes == pytest.approx(embeds + linear * (4 + 20 / 128) / 8, rel=1e-3)


@pytest.mark.parametrize(
    ("kv", "dtype"),
    [
        ({"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8"),  # (kvsim: bf16)
        (
            {
                "quantization": {
                    "quant_algo": "FP8",
                    "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False},
                }
            },
            "fp8",
        ),
        ({"kv_cache_quant_algo": "fp8"}, "fp8"),
        ({"kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, "bf16"),  # (vLLM: auto)
        ({"kv_cache_quant_algo": "INT8"}, "bf16"),  # (vLLM warns and serves auto; kvsim refused it)
        ({}, "bf16"),
    ],
)
def test_a_modelopt_kv_cache_is_fp8_as_vllm_resolves_it(tmp_path, kv, dtype):
    """vLLM 0.33.0's `get_kv_cache_quant_algo_string`: ModelOpt's exporter writes the KV cache's format as
    `kv_cache_scheme` (a dict) or, older, `kv_cache_quant_algo`; an 8-bit float scheme that is not dynamic
    is fp8. kvsim read only `kv_cache_quant_algo`: half the blocks for such a checkpoint."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "FP8", **kv}
    (tmp_path / "m.json").write_text(json.dumps({**base, "quantization_config": qc}))
    m = models.from_hf_config(tmp_path / "m.json")
    assert m.kv_dtype == dtype
    assert (
        m.kv_bytes_per_token * (2 if dtype == "fp8" else 1) == models.get("llama-3.1-8b").kv_bytes_per_token
    )


@pytest.mark.parametrize(
    "kv", [{"kv_cache_scheme": {"num_bits": 4, "type": "float"}}, {"kv_cache_quant_algo": "NVFP4"}]
)
def test_a_modelopt_nvfp4_kv_cache_is_refused_by_name(tmp_path, kv):
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "FP8", **kv}
    (tmp_path / "m.json").write_text(json.dumps({**base, "quantization_config": qc}))
    with pytest.raises(InvalidArgumentError, match="an NVFP4 KV cache is not modelled by kvsim"):
        models.from_hf_config(tmp_path / "m.json")


def test_nvfp4_fp8_block_and_compressed_tensors(tmp_path):
    """A ModelOpt NVFP4 checkpoint: 4 bits + an fp8 scale per 16 inputs (scale tiles of 128 rows x 4), lm_head
    excluded, and its FP8 KV cache makes --kv-cache-dtype auto fp8; compressed-tensors fp8 per channel; a
    checkpoint ignoring attention keeps it in bf16."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    nv = {
        **base,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "exclude_modules": ["lm_head"],
            "kv_cache_quant_algo": "FP8",
        },
    }
    (tmp_path / "nv.json").write_text(json.dumps(nv))
    m = models.from_hf_config(tmp_path / "nv.json")
    dense = models.get("llama-3.1-8b")
    assert m.kv_dtype == "fp8"
    assert m.kv_bytes_per_token * 2 == dense.kv_bytes_per_token
    h = 4096
    linear = dense.num_params - 2 * 128256 * h - (2 * 32 + 1) * h  # less embeddings, lm_head, norms
    assert m.weight_bytes / (linear * 4.5 / 8 + 2 * (2 * 128256 * h + 65 * h)) == pytest.approx(1, rel=2e-3)
    ct = {
        **base,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "ignore": ["lm_head", "re:.*self_attn.*"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
                }
            },
        },
    }
    (tmp_path / "ct.json").write_text(json.dumps(ct))
    c = models.from_hf_config(tmp_path / "ct.json")
    attn = 32 * (2 * h * h + 2 * h * 1024)
    mlp = 32 * 3 * h * 14336
    # the MLP at a byte a weight plus an fp32 scale per output row; attention (ignored) at 2 bytes
    assert c.weight_bytes == dense.param_bytes - mlp + 32 * (2 * 14336 + h) * 4
    assert attn > 0


def _ct(weights: dict, **extra: object) -> dict:
    """A compressed-tensors quantization_config of one scheme on every Linear layer."""
    return {
        "quant_method": "compressed-tensors",
        **extra,
        "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
    }


def test_unmodelled_quantization_is_refused_by_name(tmp_path):
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    for qc, needle in (
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "vLLM 0.33.0 has no bitsandbytes"),
        ({"quant_method": "gguf"}, "quant_method 'gguf' is not modelled"),
        (
            {
                "quant_method": "gptq",
                "bits": 4,
                "group_size": 128,
                "desc_act": False,
                "sym": True,
                "dynamic": {"-:.*": {}},
            },
            "dynamic",
        ),
        # vLLM 0.33.0's GPTQ: symmetric 4/8-bit, Marlin's group sizes, no group act-order; every key read.
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, "has no 'desc_act'"),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True},
            "desc_act true with group_size 128: vLLM 0.33.0 refuses it",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False},
            "sym False",
        ),
        ({"quant_method": "gptq", "bits": 3, "group_size": 128, "desc_act": False, "sym": True}, "bits 3"),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 256, "desc_act": False, "sym": True},
            "Marlin does not support group_size = 256",
        ),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo 'W4A8_AWQ'"),
        # A group size of 0 or below -1 was priced per channel; a block of 'abc' or 0 was a bare ValueError
        # or ZeroDivisionError, a block of true taken as 1.
        (
            {"quant_method": "awq", "bits": 4, "group_size": 0, "zero_point": True},
            "quantization_config.group_size 0 must be at least 1",
        ),
        (
            {"quant_method": "awq", "bits": 4, "q_group_size": -5, "zero_point": True},
            "quantization_config.q_group_size -5 must",
        ),
        # vLLM 0.33.0's AWQ: 4-bit with zero points, every key read, `w_bit` before `bits` (an adversarial
        # pass found `w_bit: 8, bits: 4` taken as 4-bit) and a null one refused.
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "has no 'zero_point'"),
        (
            {"quant_method": "awq", "w_bit": 8, "bits": 4, "group_size": 128, "zero_point": True},
            "AWQ bits 8: vLLM 0.33.0 loads 4-bit AWQ only",
        ),
        (
            {"quant_method": "awq", "w_bit": None, "bits": 4, "group_size": 128, "zero_point": True},
            "quantization_config.w_bit is null",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": None, "desc_act": False, "sym": True},
            "group_size is null",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": "x"}},
            "config group 'x' must be a JSON object",
        ),
        (
            {"quant_method": "awq", "bits": 8, "group_size": 128, "zero_point": True},
            "vLLM 0.33.0 loads 4-bit AWQ only",
        ),
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False},
            "takes zero points only",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": -7, "desc_act": False, "sym": True},
            "quantization_config.group_size -7 must",
        ),
        (
            _ct(
                {
                    "num_bits": 4,
                    "type": "int",
                    "strategy": "group",
                    "group_size": 128,
                    "actorder": "group",
                }
            ),
            "compressed-tensors actorder 'group': vLLM 0.33.0 refuses it",
        ),
        # compressed-tensors' QuantizationArgs lower-cases its strings and reads an actorder of true as group.
        (
            _ct(
                {
                    "num_bits": 4,
                    "type": "INT",
                    "strategy": "GROUP",
                    "group_size": 128,
                    "actorder": True,
                }
            ),
            "compressed-tensors actorder True: vLLM 0.33.0 refuses it",
        ),
        # A group that splits a layer's inputs, at any tensor-parallel size (verify_group_size_divides_partition).
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 100}),
            "weights.group_size 100 does not divide the 4096 input features",
        ),
        ({"quant_method": "fp8", "weight_block_size": [True, 128]}, "weight_block_size [True, 128] must"),
        (
            _ct(
                {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "block",
                    "block_structure": ["abc", 1],
                }
            ),
            "block_structure ['abc', 1] must be two whole numbers",
        ),
        (
            _ct(
                {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "block",
                    "block_structure": [0, 128],
                }
            ),
            "block_structure [0, 128] must be two whole numbers",
        ),
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": None}),
            "group_size None must be a whole number of at least 1 with strategy 'group'",
        ),
    ):
        p = tmp_path / "q.json"
        p.write_text(json.dumps({**base, "quantization_config": qc}))
        hf_config._HF_CACHE.clear()
        with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
            models.from_hf_config(p)


def test_compressed_tensors_int_weights_without_inputs_in_an_activation_format_are_refused(tmp_path):
    """vLLM 0.33.0's compressed-tensors config reader (`_quantization_scheme_map_from_config`,
    compressed_tensors.py:360-369) asserts float weights where the group's format (else the global one) is an
    activation-quantization format (naive-, int-, float-, nvfp4-pack-quantized) and the group has no
    input_activations: int weights there fail at load, on a dense model as on a MoE one. The nearest
    schemes load: the same int8 with dynamic per-token inputs, the same int4 in pack-quantized, fp8 weights
    without inputs in float-quantized (W8A16), a per-group pack-quantized format overriding the global one."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    p = tmp_path / "q.json"

    def load(qc: dict) -> object:
        p.write_text(json.dumps({**base, "quantization_config": qc}))
        hf_config._HF_CACHE.clear()
        return models.from_hf_config(p)

    int8 = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
    int4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    for qc, fmt in (
        (_ct(int8, format="int-quantized"), "int-quantized"),
        (_ct(int4, format="naive-quantized"), "naive-quantized"),
        (_ct({**int4, "type": "INT"}, format="float-quantized"), "float-quantized"),
        (_ct(int8, format="nvfp4-pack-quantized"), "nvfp4-pack-quantized"),
    ):
        with pytest.raises(
            InvalidArgumentError,
            match=re.escape(
                f"compressed-tensors 'int' weights without input_activations in format {fmt!r}: vLLM 0.33.0 "
                "asserts float weights there"
            ),
        ):
            load(qc)
    # The group's own format wins over the global one, as in vLLM.
    per_group = _ct(int4, format="pack-quantized")
    per_group["config_groups"]["g"]["format"] = "int-quantized"
    with pytest.raises(
        InvalidArgumentError, match=re.escape("in format 'int-quantized': vLLM 0.33.0 asserts")
    ):
        load(per_group)
    per_group = _ct(int4, format="int-quantized")
    per_group["config_groups"]["g"]["format"] = "pack-quantized"
    assert load(per_group).quantization
    token = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}
    w8a8 = _ct(int8, format="int-quantized")
    w8a8["config_groups"]["g"]["input_activations"] = token
    assert load(w8a8).quantization
    assert load(_ct(int4, format="pack-quantized")).quantization
    assert load(_ct(int4)).quantization  # no format at all: no assertion
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}
    assert load(_ct(fp8, format="float-quantized")).quantization


def test_an_awq_group_size_that_splits_a_layers_inputs_is_refused(tmp_path):
    """vLLM's AWQ takes whole groups of input features (`AWQLinearMethod.create_weights`: "The input size
    is not aligned with the quantized weight shape"), so `group_size` 7 on Qwen3-32B (5120-wide attention
    inputs) or one wider than the layer is no checkpoint vLLM loads: refused naming `group_size`, where it
    was priced as ceil(5120 / 7) groups. Groups that divide every layer (32, 64, 128), per channel (-1),
    are kept; an ignore list exempts only the matrices it names, layer by layer (a vision tower, the lm_head,
    one layer's down projection: the other layers' are checked; a review found llm-compressor's usual
    `ignore: ["lm_head"]` skipping the check at tp 1 while the tensor-parallel one was made)."""
    cfg = json.loads((HF / "qwen3-32b-awq.json").read_text())
    path = tmp_path / "config.json"
    for group, kept in ((7, False), (10240, False), (32, True), (64, True), (128, True), (-1, True)):
        path.write_text(
            json.dumps({**cfg, "quantization_config": {**cfg["quantization_config"], "group_size": group}})
        )
        hf_config._HF_CACHE.clear()
        if kept:
            assert models.from_hf_config(path).quantization.startswith("awq: attn int4")
            continue
        with pytest.raises(
            InvalidArgumentError, match=f"quantization_config.group_size {group} does not divide the 5120"
        ):
            models.from_hf_config(path)
    qc = {**cfg["quantization_config"], "group_size": 7, "modules_to_not_convert": ["visual"]}
    path.write_text(json.dumps({**cfg, "quantization_config": qc}))
    hf_config._HF_CACHE.clear()
    with pytest.raises(InvalidArgumentError, match="group_size 7 does not divide"):
        models.from_hf_config(path)
    qc = {
        **cfg["quantization_config"],
        "group_size": 7,
        "modules_to_not_convert": ["model.layers.3.mlp.down_proj"],
    }
    path.write_text(json.dumps({**cfg, "quantization_config": qc}))
    hf_config._HF_CACHE.clear()
    # (one layer's down projection left unquantized: every other matrix is still quantized, and split by 7;
    # kvsim skipped the check whenever an entry named a layer's module, a review found)
    with pytest.raises(InvalidArgumentError, match="group_size 7 does not divide the 5120"):
        models.from_hf_config(path)
    # compressed-tensors with llm-compressor's ignore list: checked at tp 1 as at tp 2.
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    ct = _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 7}, ignore=["lm_head"])
    path.write_text(json.dumps({**base, "quantization_config": ct}))
    hf_config._HF_CACHE.clear()
    with pytest.raises(
        InvalidArgumentError, match=re.escape("weights.group_size 7 does not divide the 4096")
    ):
        models.from_hf_config(path)


def test_tensor_parallelism_must_split_layers_as_vllm_does(tmp_path):
    """vLLM refuses a tensor-parallel size that splits an AWQ group on a rank's share of a row-parallel input
    (Qwen2.5-72B's 29,568-wide down projection at tp 2, 4 and 8: "The input size is not aligned with the
    quantized weight shape"; Qwen padded its AWQ checkpoints to 29,696 for this), one that does not divide a
    row-parallel input at all, or KV heads that neither split nor replicate evenly; where kvsim priced
    each as weights / tp."""
    cfg = json.loads((HF / "qwen2.5-72b.json").read_text())
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "quantization_config": awq}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB")
    for tp in (2, 4, 8):
        with pytest.raises(
            InvalidArgumentError, match=f"29568 // {tp} = {29568 // tp} input features a GPU, not a whole"
        ):
            kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
    path.write_text(json.dumps({**cfg, "intermediate_size": 29696, "quantization_config": awq}))
    hf_config._HF_CACHE.clear()
    for tp in (2, 4, 8):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
    # GPTQ loads a split group without an error, its scales then wrong: refused too (tests/test_shard.py).
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    path.write_text(json.dumps({**cfg, "quantization_config": gptq}))
    hf_config._HF_CACHE.clear()
    with pytest.raises(InvalidArgumentError, match="not a whole number of its gptq groups of 128"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)
    # Unquantized: the split only has to be even.
    path.write_text(json.dumps({**cfg, "intermediate_size": 29570}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)
    with pytest.raises(InvalidArgumentError, match='vLLM: "29570 is not divisible by 4"'):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=4)
    # KV heads: 8 split over 2, 4 or 8, replicated over 16; 6 over 4 neither.
    path.write_text(json.dumps({**cfg, "num_attention_heads": 48, "num_key_value_heads": 6}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)
    with pytest.raises(InvalidArgumentError, match="6 KV heads neither divide among 4 GPUs nor replicate"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=4)
    kvsim.SimConfig(model="qwen3-32b-awq", kv_cache_bytes="10GiB", tensor_parallel_size=8)  # 3,200 = 25 x 128
    # Gemma 4's global layers have KV heads of their own: checked as the others (an adversarial pass found
    # 3 of them taken at tp 2, and 0 given a pool group).
    g4 = json.loads((HF / "gemma-4-31b.json").read_text())
    for global_kv, tp, needle in (
        (3, 1, "num_attention_heads 32 is not a multiple of num_global_key_value_heads 3"),
        (0, 1, "'num_global_key_value_heads' 0 must be a whole number of at least 1"),
        (8, 16, None),
        (16, 8, None),
    ):
        text = {**g4["text_config"], "num_global_key_value_heads": global_kv}
        path.write_text(json.dumps({**g4, "text_config": text}))
        hf_config._HF_CACHE.clear()
        if needle is None:
            kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
        else:
            with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
                kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
    text = {**g4["text_config"], "num_global_key_value_heads": 3, "num_attention_heads": 48}
    path.write_text(json.dumps({**g4, "text_config": text}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB")
    with pytest.raises(InvalidArgumentError, match="3 KV heads neither divide among 2 GPUs"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)


def test_a_quantization_below_its_least_compute_capability_is_refused(tmp_path):
    """vLLM refuses a method on an NVIDIA GPU below its config's `get_min_capability` (MXFP4 8.0: gpt-oss on
    an RTX 2070, sm_75), with its words; an online fp8 (7.5) runs there (a Qwen3 of 12 layers: Qwen3-8B's
    8.8 GiB in fp8 would not fit its 7.8 GiB); AMD GPUs are not NVIDIA sm_XY."""
    with pytest.raises(
        InvalidArgumentError, match=re.escape("Minimum capability: 80. Current capability: 75")
    ):
        kvsim.SimConfig(model="gpt-oss-20b", gpu="rtx-2070", max_model_len=1024)
    small = tmp_path / "config.json"
    small.write_text(json.dumps(json.loads((HF / "qwen3-8b.json").read_text()) | {"num_hidden_layers": 12}))
    kvsim.SimConfig(
        model=str(small), gpu="rtx-2070", quantization="fp8", kv_cache_bytes="1GiB", max_model_len=1024
    )
    kvsim.SimConfig(model="gpt-oss-20b", gpu="mi300x", max_model_len=1024)


def test_gpt_oss_experts_are_padded_as_vllms_default_backend_pads_them():
    """vLLM 0.33.0 pads gpt-oss's MXFP4 experts for the kernels it picks by default
    (`mxfp4_round_up_hidden_size_and_intermediate_size`): none on an H100 at tp 1 (Triton: the 2,880-wide
    intermediate is a multiple of 64), each rank's 1,440 to 1,472 at tp 2; hidden 3,072 and intermediate
    2,944 with Marlin (A100, RTX 5090) and FlashInfer's TRT-LLM kernels (B200): 5.13 GiB more for
    gpt-oss-120b, whose "Model loading took 65.9651 GiB" vLLM 0.11.2 logged with Marlin (blog.huikang.dev,
    quoted in robertelee78/hf2q). Expert parallelism pads whole experts; other models are untouched."""
    from kvsim.model.mxfp4_padding import mxfp4_padding_bytes

    m = models.get("gpt-oss-120b")
    per = m.num_experts * m.num_layers * 3 * 17 / 32  # elements of (hidden x a rank's intermediate) to bytes
    assert mxfp4_padding_bytes(m, "sm_90", 1) == 0
    assert mxfp4_padding_bytes(m, "sm_90", 2) == int(per * 2880 * (1472 - 1440))
    assert mxfp4_padding_bytes(m, "sm_100", 1) == int(per * (3072 * 2944 - 2880 * 2880))
    assert mxfp4_padding_bytes(m, "sm_90", 2, ep=2) == 0  # whole experts: 2,880 is a multiple of 64
    assert mxfp4_padding_bytes(m, "sm_80", 2, ep=2) == int(per / 2 * (3072 * 2944 - 2880 * 2880))
    assert (
        mxfp4_padding_bytes(m, None, 1) == mxfp4_padding_bytes(models.get("qwen3-30b-a3b"), "sm_80", 1) == 0
    )
    h100 = kvsim.SimConfig(model="gpt-oss-120b", gpu="h100-80gb").pool.figures
    a100 = kvsim.SimConfig(model="gpt-oss-120b", gpu="a100-80gb", max_model_len=32768).pool.figures
    # (the loaded bytes: the weights and gpt-oss's float32 rotary cache, 32 MiB)
    assert m.loaded_bytes == m.param_bytes + 32 * 2**20
    # (on the H100's Triton kernels, float32 expert biases and Hopper's padded scale layout beside them:
    # tests/test_weights_after_load.py)
    assert h100.model_loading_bytes == m.loaded_bytes + 294_912_000
    assert a100.model_loading_bytes == m.loaded_bytes + mxfp4_padding_bytes(m, "sm_80", 1)
    assert abs(a100.model_loading_bytes / GIB - 65.97) < 0.1
    # The KV memory is what the padded weights leave.
    flat = kvsim.SimConfig(model="gpt-oss-20b", gpu="rtx-5090", activation_reserve_bytes="2GiB").pool
    assert flat.kv_cache_bytes == (
        math.floor(gpus.get("rtx-5090").memory_bytes * 0.92)
        - models.get("gpt-oss-20b").loaded_bytes
        - mxfp4_padding_bytes(models.get("gpt-oss-20b"), "sm_120", 1)
        - 2 * GIB
    )


def test_vllms_quantization_flag():
    """--quantization fp8 halves an unquantized model's linear layers at load time; naming another method than
    the checkpoint's is vLLM's refusal; naming the checkpoint's (or its alias) changes nothing."""
    bf16 = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    fp8 = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="fp8")
    embeds, rope = 2 * 128256 * 4096 * 2, bf16.pool.rope_cache_bytes  # (the rotary cache stays bf16)
    assert rope == fp8.pool.rope_cache_bytes == 32 * 2**20
    assert fp8.pool.weight_bytes - rope == pytest.approx(
        embeds + (bf16.pool.weight_bytes - rope - embeds) / 2, rel=1e-3
    )
    assert fp8.num_blocks > bf16.num_blocks
    with pytest.raises(InvalidArgumentError, match=r"model config \(awq\) does not match .* \(gptq\)"):
        kvsim.SimConfig(model="qwen3-32b-awq", gpu="h100-80gb", quantization="gptq")
    same = kvsim.SimConfig(model="qwen3-32b-awq", gpu="h100-80gb", quantization="awq_marlin")
    assert same.num_blocks == kvsim.SimConfig(model="qwen3-32b-awq", gpu="h100-80gb").num_blocks
    with pytest.raises(InvalidArgumentError, match="only 'fp8' quantizes an unquantized checkpoint"):
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="awq")


# -- memory accounting and start-up figures ------------------------------------------------------------------


def test_vllms_four_startup_figures_for_one_full_attention_group():
    """Model loading = one GPU's weights; Available KV = the sized KV bytes; concurrency = vLLM's blocks
    (kvsim's: the null block one of them, as vLLM v1 counts them) over ceil(L / 16); tokens = int(concurrency
    x L); under v0's count (`pool_null_block="extra"`) vLLM's blocks are kvsim's less its extra null block."""
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len=32768)
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
    given = kvsim.SimConfig(model="llama-3.1-8b", kv_cache_bytes="20GiB")
    assert given.pool.figures.available_kv_bytes == 20 * GIB
    # --num-gpu-blocks-override: vLLM's num_blocks is the override itself.
    over = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", num_blocks=5000)
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
    0.20.0 subtracted no graph memory; activation_reserve_bytes replaces all three."""
    base = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    p = base.pool
    g = gpus.get("h100-80gb")
    assert p.kv_cache_bytes == math.floor(g.memory_bytes * 0.92) - p.weight_bytes - (
        p.activation_reserve_bytes + p.non_torch_bytes + p.cudagraph_bytes
    )
    assert p.non_torch_bytes == memory.NON_TORCH_BYTES
    assert p.cudagraph_bytes == memory.cudagraph_estimate(models.get("llama-3.1-8b"), 1024, 8192) > 0
    eager = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", enforce_eager=True)
    assert eager.pool.cudagraph_bytes == 0
    assert eager.pool.kv_cache_bytes == p.kv_cache_bytes + p.cudagraph_bytes
    measured = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", cudagraph_memory_bytes="2GiB")
    assert measured.pool.kv_cache_bytes == p.kv_cache_bytes + p.cudagraph_bytes - 2 * GIB
    old = kvsim.SimConfig.preset("vllm-0.19", model="llama-3.1-8b", gpu="h100-80gb")
    assert old.pool.cudagraph_bytes == 0
    # Under tensor parallelism: NCCL's and the custom all-reduce's buffers over NVLink (2.1 GiB measured on
    # H100s), far less over PCIe (an L40S has no peer link).
    tp = kvsim.SimConfig(model="llama-3.1-70b", gpu="h100-80gb", tensor_parallel_size=4)
    assert tp.pool.non_torch_bytes == memory.NON_TORCH_BYTES_TP_PEER
    pcie = kvsim.SimConfig(model="llama-3.1-8b", gpu="l40s", tensor_parallel_size=2, max_model_len=8192)
    assert gpus.get("l40s").peer_bandwidth == 0
    assert pcie.pool.non_torch_bytes == memory.NON_TORCH_BYTES_TP
    total = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", activation_reserve_bytes="3GiB")
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
        f'memory = "{l40s.memory_bytes}"\nbandwidth = "864GB/s"\ntflops = 362.05\nfp8_tflops = 733\nlink = "32GB/s"\n'
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
    four start-up lines, the same as the JSON's and the config's."""
    from kvsim.cli import main

    argv = ["run", "--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--requests", "20"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    cfg = kvsim.SimConfig(model="gpt-oss-120b", gpu="h100-80gb")
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
        str(l40s.memory_bytes),
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


# -- 2026 families: state layers, full-attention MoE, refusals ------------------------------------------------


def test_qwen3_next_state_and_kv_bytes_from_the_config_by_hand():
    """Qwen3-Next: 36 gated delta net layers keep a state per request, 12 gated-attention layers keep KV.
    Per token (bf16): 2 (K, V) x 2 KV heads x 256 x 2 bytes = 2,048 B a full layer, x 12 = 24,576 B.
    Per request a delta-net layer keeps its convolution state, conv_dim = 2 x 16 x 128 + 32 x 128 = 8,192
    channels x (kernel 4 - 1) x 2 B, and its recurrent state, 32 value heads x 128 x 128 x 2 B (vLLM's
    gated_delta_net_state_shape): 49,152 + 1,048,576 = 1,097,728 B. A 16-token attention block (32 KiB)
    cannot hold it, so vLLM raises the block to 16 x ceil(1,097,728 / (16 x 2,048)) = 544 tokens."""
    from kvsim.model.layers import kv_layout

    cfg = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    m = models.get("qwen3-next-80b-a3b")
    kinds = [lay.kind for lay in m.layers]
    assert kinds == (["mamba"] * 3 + ["full"]) * 12
    per_layer = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    assert per_layer == 2048
    assert m.kv_bytes_per_token == 12 * per_layer
    conv_dim = 2 * 16 * 128 + 32 * 128
    state = conv_dim * (4 - 1) * 2 + 32 * 128 * 128 * 2
    assert state == 1_097_728
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == state
    layout = kv_layout(m, 16, enable_prefix_caching=False)
    assert layout.block_size == 16 * -(-state // (16 * per_layer)) == 544
    assert {g.kind for g in layout.groups} == {"mamba", "full"}
    assert all(g.page_bytes == 544 * per_layer for g in layout.groups)
    # Two GPUs halve the KV heads and the state's heads and channels.
    assert st.page_bytes(2, 16) == state // 2


def test_qwen3_next_weights_count_the_gated_delta_net_and_the_gated_attention():
    """The parameters re-derived by hand: per delta-net layer in_proj_qkvz (2048 -> 2 x 2048 + 2 x 4096),
    in_proj_ba (2048 -> 64), out_proj (4096 -> 2048), conv1d 8,192 x 4, dt_bias and A_log 32 each, a norm
    of 128; per attention layer a query twice as wide (its output gate), k, v, o and two 256-wide norms;
    512 + 1 shared experts of 512 per layer with a router and the shared expert's gate; embeddings and
    lm_head. The model card's 80B total, 79B without embeddings, 3B activated (rounded)."""
    h, layers, lin, full = 2048, 48, 36, 12
    delta = h * (2 * 2048 + 2 * 4096) + h * 64 + 4096 * h + 8192 * 4 + 32 + 32 + 128
    attn = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
    moe = 512 * 3 * h * 512 + 3 * h * 512 + 512 * h + h
    embeds = 2 * 151936 * h
    norms = (2 * layers + 1) * h
    total = lin * delta + full * attn + layers * moe + embeds + norms
    m = models.get("qwen3-next-80b-a3b")
    assert m.num_params == total
    assert (m.num_params - embeds) / 1e9 == pytest.approx(79, rel=0.01)
    active = m.num_params - layers * 512 * 3 * h * 512 + layers * 10 * 3 * h * 512
    assert m.num_active_params == active
    assert (active - embeds) / 1e9 == pytest.approx(3, rel=0.1)


def test_qwen3_next_runs_as_vllm_serves_it():
    """On two H200s, with prefix caching on (`vllm serve`'s default: vLLM's Mamba 'align' mode) and off, the
    four start-up figures come out; a request counts 3 blocks per state group with caching (two states and
    the gated delta net's prefill checkpoint, which its FlashInfer prefill kernel on Hopper exports, with
    blocks a multiple of 64 tokens: 576 where 544), one without, so the concurrency is a little lower with
    it; on A100s (Triton's kernel, no checkpoint) 2 a state group, on 544-token blocks."""
    off = kvsim.SimConfig(
        model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel_size=2, enable_prefix_caching=False
    )
    fig = off.pool.figures
    m = models.get("qwen3-next-80b-a3b")
    rep = replicated(m)[0]  # (and the routers and norms)
    assert (
        fig.model_loading_bytes == -(-(m.param_bytes - rep) // 2) + rep + m.rope_cache_bytes
    )  # (rotary cache whole)
    assert fig.max_concurrency > 1
    on = kvsim.SimConfig(model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel_size=2)
    assert on.pool.layout.mamba_align
    assert [g.cap for g in on.kv_groups if g.kind == "mamba"] == [3, 3, 3]
    blocks = on.pool.layout.blocks_per_request(262_144, on.max_in_flight_tokens)
    assert on.engine_block_size == 576
    assert blocks == -(-262_144 // 576) + 3 * 3
    assert on.pool.figures.max_concurrency < fig.max_concurrency
    a100 = kvsim.SimConfig(model="qwen3-next-80b-a3b", gpu="a100-80gb", tensor_parallel_size=4)
    assert [g.cap for g in a100.kv_groups if g.kind == "mamba"] == [2, 2, 2]
    assert (
        a100.pool.layout.blocks_per_request(262_144, a100.max_in_flight_tokens)
        == -(-262_144 // a100.engine_block_size) + 3 * 2
    )
    assert a100.engine_block_size % 16 == 0
    assert a100.engine_block_size % 64 != 0


def test_minimax_m2_is_full_attention_moe_in_fp8_blocks():
    """MiniMax-M2: every layer full attention (vLLM's minimax_m2.py), 62 x 2 x 8 x 128 x 2 B = 253,952 B a
    token; 256 experts of 1536 per layer at a byte a weight plus an fp32 scale per 128 x 128 block, the
    embeddings and lm_head at 2 bytes, the router at 4; 230B total and 10B active (without embeddings) on the card."""
    m = models.get("minimax-m2")
    assert not m.is_hybrid
    assert m.kv_bytes_per_token == 62 * 2 * 8 * 128 * 2
    h, f, e, n = 3072, 1536, 256, 62

    def blocks(rows, cols):
        return -(-rows // 128) * -(-cols // 128)

    experts = n * e * (2 * (f * h + 4 * blocks(f, h)) + h * f + 4 * blocks(h, f))
    attn = n * (
        (48 * 128 + 2 * 8 * 128) * h
        + 4 * (blocks(48 * 128, h) + 2 * blocks(8 * 128, h))
        + h * 48 * 128
        + 4 * blocks(h, 48 * 128)
    )
    embeds = 2 * 200064 * h
    router = n * e * h
    rest = m.num_params - embeds - router - n * (3 * f * h * e + (48 + 2 * 8) * 128 * h + 48 * 128 * h)
    # (the router in float32: vLLM 0.33.0's GateLinear(params_dtype=torch.float32), minimax_m2.py 110-117)
    assert m.weight_bytes == experts + attn + 2 * (embeds + rest) + 4 * router
    assert (m.num_active_params - embeds) / 1e9 == pytest.approx(10, rel=0.05)
    bad = {**json.loads((HF / "minimax-m2.json").read_text()), "attn_type_list": [0] + [1] * 61}
    with pytest.raises(InvalidArgumentError, match="attn_type_list"):
        hf_config._from_dict(bad, "m", "m", "m", None)


def test_deepseek_v4_caches_and_groups_from_first_principles():
    """DeepSeek-V4-Flash's KV, from the per-layer arithmetic (DESIGN.md §Hybrid attention, "DeepSeek-V4"):
    fp8_ds_mla entries of 448 fp8 + 64 bf16 RoPE values + 8 scale bytes, pages rounded up to 576 bytes; a
    block id holds one page of every cache in the largest packed group; a run on a B200 prints vLLM's figures
    from those bytes."""
    m = models.get("deepseek-v4-flash")
    ratios = json.loads((HF / "deepseek-v4-flash.json").read_text())["compress_ratios"][:43]
    entry = 448 + 64 * 2 + 8
    assert entry == 584

    def page(n_bytes):
        return -(-n_bytes // 576) * 576

    swa, c4, c128 = page(64 * entry), page(256 // 4 * entry), page(256 // 128 * entry)
    idx_keys, idx_state = page(64 * (128 + 4)), page(4 * 2 * 2 * 128 * 4)
    state4, state128 = page(4 * 2 * 2 * 512 * 4), page(8 * 2 * 512 * 4)
    n4, n128 = ratios.count(4), ratios.count(128)
    assert (n4, n128, len(ratios)) == (21, 20, 43)
    full_group = n4 * (idx_keys + c4) + n128 * c128
    expected_groups = [
        ("sliding_window", 128, 64, 22 * swa),
        ("sliding_window", 128, 64, 21 * swa),
        ("full", 0, 256, full_group),
        ("sliding_window", 8, 4, n4 * (idx_state + state4)),
        ("sliding_window", 128, 8, n128 * state128),
    ]
    for tp in (1, 4):  # one latent head, replicated: tensor parallelism changes no page
        layout = kv_layout(m, 16, tensor_parallel_size=tp)
        got = [(g.kind, g.window, g.block_size, g.bytes_per_block) for g in layout.groups]
        assert got == expected_groups
        assert layout.bytes_per_block == max(b for *_, b in expected_groups) == full_group
        assert layout.scheduler_block_size == 256
    # A 1M-token request holds, per group, what vLLM's admission bound gives (two batches in flight).
    layout = kv_layout(m, 16)
    in_flight = 2 * 8192
    per_request = (
        2 * (-(-(127 + in_flight) // 64) + 1)
        + -(-(1 << 20) // 256)
        + (-(-(7 + in_flight) // 4) + 1)
        + (-(-(127 + in_flight) // 8) + 1)
    )
    assert layout.blocks_per_request(1 << 20, in_flight) == per_request
    # Per token if every cache kept every token: the latent everywhere, 1/r of one where compressed, the
    # indexer's 132-byte key per 4 tokens.
    exact = 43 * entry + n4 * (entry / 4 + 132 / 4) + n128 * entry / 128
    assert m.kv_bytes_per_token == math.ceil(exact)
    # The pool on a B200 (tensor parallel 2) is whole blocks of that size, and vLLM's figures follow.
    p = size_pool("deepseek-v4-flash", "b200", 16, tensor_parallel_size=2, max_num_batched_tokens=8192)
    assert p.layout is not None
    assert p.layout.bytes_per_block == full_group
    assert p.figures is not None
    ctx = 1 << 20
    assert p.figures.max_concurrency == pytest.approx(p.figures.num_blocks / per_request)
    assert p.figures.kv_cache_tokens == int(p.figures.num_blocks / per_request * ctx)


def test_deepseek_v4_weights_and_refusals():
    """DeepSeek-V4-Flash's weights: fp8 128 x 128 blocks, MXFP4 experts (`expert_dtype` fp4), 284B (model
    card); what kvsim cannot price is refused by name."""
    m = models.get("deepseek-v4-flash")
    assert m.quantization.startswith("deepseek_v4_fp8")
    assert "experts mxfp4" in m.quantization
    assert m.num_params / 1e9 == pytest.approx(284, rel=0.01)  # model card: 284B (MTP layer not loaded)
    experts = 43 * 256 * 3 * 2048 * 4096
    mxfp4 = experts // 2 + experts // 32  # 4-bit values + one E8M0 byte per 32
    fp8_experts = {**json.loads((HF / "deepseek-v4-flash.json").read_text()), "expert_dtype": "fp8"}
    m8 = hf_config._from_dict(fp8_experts, "v4", "v4", "v4", None)
    block_scales = 43 * 256 * 3 * (2048 // 128) * (4096 // 128) * 4
    assert m8.weight_bytes - m.weight_bytes == experts + block_scales - mxfp4
    base = json.loads((HF / "deepseek-v4-flash.json").read_text())
    # NVIDIA's DeepSeek-V4-Flash-NVFP4 (its config.json: `quant_method` fp8, `moe_quant_algo` NVFP4): the
    # routed experts NVFP4 (4-bit values, one fp8 scale per 16 padded to 128 x 4 tiles, a global scale),
    # the rest as the fp8 release's (each expert matrix one fp32 global scale, as kvsim prices NVFP4).
    nv = {**base, "quantization_config": {**base["quantization_config"], "moe_quant_algo": "NVFP4"}}
    m4 = hf_config._from_dict(nv, "v4", "v4", "v4", None)
    assert "experts nvfp4" in m4.quantization
    per = 43 * 256  # the routed experts: w1 and w3 (2,048 x 4,096 each, out x in), w2 (4,096 x 2,048)
    up = 2048 * 4096 // 2 + 2048 * (4096 // 16) + 8  # rows 2,048 (a multiple of 128), 256 scale columns
    down = 4096 * 2048 // 2 + 4096 * (2048 // 16) + 8
    assert m4.weight_bytes - m.weight_bytes == per * (2 * up + down) - mxfp4
    for change, match in (
        ({"compress_ratios": [0, 2] + [4] * 42}, "compress_ratios\\[1\\] 2"),
        ({"compress_ratios": [4] * 10}, "compress_ratios"),
        ({"head_dim": 256}, "head_dim"),
        # vLLM 0.33.0 registers DeepSeek-V4.1 (DeepseekV41Config): not modelled, not "no config class"
        (
            {"model_type": "deepseek_v41"},
            r"'deepseek_v41' \(DeepSeek-V4.1, vLLM 0.33.0's DeepseekV41Config\)",
        ),
        (
            {"model_type": "deepseek_v3"},
            r"model_type 'deepseek_v3' with 'compress_ratios': only DeepSeek-V4 "
            r"\('deepseek_v4'\) is modelled \(",
        ),
        # SGLang's copies of the V4 releases (model_type 'deepseek_ref'): no config class in vLLM 0.33.0
        ({"model_type": "deepseek_ref"}, "registers no config class named 'deepseek_ref'"),
        ({"expert_dtype": "fp6"}, "expert_dtype"),
        (
            {"quantization_config": {**base["quantization_config"], "moe_quant_algo": "MXFP8"}},
            "moe_quant_algo 'MXFP8' is not modelled",
        ),
    ):
        with pytest.raises(InvalidArgumentError, match=match):
            hf_config._from_dict({**base, **change}, "v4", "v4", "v4", None)
    no_ratios = {k: v for k, v in base.items() if k != "compress_ratios"}
    with pytest.raises(InvalidArgumentError, match="compress_ratios"):
        hf_config._from_dict(no_ratios, "v4", "v4", "v4", None)
    with pytest.raises(InvalidArgumentError, match="hybrid_kv_cache_manager"):
        kv_layout(m, 16, hybrid_kv_cache_manager="off")
    with pytest.raises(InvalidArgumentError, match="block_size 32"):
        kv_layout(m, 32)


def _gemma4_text(**changes):
    """A small Gemma 4 text config (six layers: five sliding, one global) with `changes`."""
    text = {
        "model_type": "gemma4_text",
        "num_hidden_layers": 6,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "num_global_key_value_heads": 2,
        "attention_k_eq_v": True,
        "head_dim": 32,
        "global_head_dim": 64,
        "vocab_size": 100,
        "sliding_window": 512,
        "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    }
    text.update(changes)
    return {"model_type": "gemma4", "text_config": text}


def test_gemma_4_unmodelled_layers_are_refused_by_name():
    """A layer type Gemma 4 does not have, and a KV-shared layer with no earlier layer of its type to read,
    are refused, naming them."""
    chunked = _gemma4_text(layer_types=["sliding_attention"] * 5 + ["chunked_attention"])
    with pytest.raises(InvalidArgumentError, match="'chunked_attention' is not"):
        hf_config._from_dict(chunked, "g4", "g4", "g4", None)
    lone = _gemma4_text(num_kv_shared_layers=1)  # the one global layer is the last: nothing to read
    with pytest.raises(InvalidArgumentError, match="no earlier 'full_attention' layer"):
        hf_config._from_dict(lone, "g4", "g4", "g4", None)
    with pytest.raises(InvalidArgumentError, match="'layer_types' must list the 6 layers"):
        hf_config._from_dict(_gemma4_text(layer_types=None), "g4", "g4", "g4", None)


def test_gemma_4_e4b_per_layer_embeddings_and_shared_kv_by_hand():
    """Gemma 4 E4B (config.json text_config): per-layer embeddings add a table of vocab 262,144 x 42 layers
    x 256, the projection 2560 -> 42 x 256 and per layer a gate (2560 -> 256), a projection (256 -> 2560)
    and a 2560-wide norm; the last 18 layers keep no KV: 20 sliding layers of 2 x 2 x 256 x 2 B and 4 global
    layers of 2 x 2 x 512 x 2 B a token (attention_k_eq_v off: the global layers keep num_key_value_heads)."""
    m = models.get("gemma-4-e4b")
    assert sum(lay.kind == "shared" for lay in m.layers) == 18
    assert m.kv_bytes_per_token == 20 * 2 * 2 * 256 * 2 + 4 * 2 * 2 * 512 * 2
    published = json.loads((HF / "gemma-4-e4b.json").read_text())
    published["text_config"]["hidden_size_per_layer_input"] = 0
    without = hf_config._from_dict(published, "x", "x", "x", None)
    ple = 262144 * 42 * 256 + 2560 * 42 * 256 + 42 * (2 * 2560 * 256 + 2560) + 256
    assert m.num_params - without.num_params == ple
    # The model card's 4.5B "effective" parameters: everything but the per-layer table (and the encoders).
    assert (m.num_params - 262144 * 42 * 256) / 1e9 == pytest.approx(4.5, rel=0.035)
    from kvsim.model.layers import kv_layout

    sizes = {(g.kind, g.block_size) for g in kv_layout(m, 16).groups}
    assert sizes == {("sliding_window", 32), ("full", 16)}  # the sliding page is half the global one


def test_gemma_4_kv_shared_layers_keep_no_cache_and_double_their_mlp():
    """vLLM's gemma4.py: the last `num_kv_shared_layers` read the last earlier layer of their type (no cache
    of their own), have only q and o projections and q_norm, and under `use_double_wide_mlp` an MLP twice
    as wide; without `attention_k_eq_v` a global layer keeps `num_key_value_heads`."""
    types = ["sliding_attention", "full_attention"] * 3
    base = hf_config._from_dict(_gemma4_text(layer_types=types), "a", "a", "a", None)
    m = hf_config._from_dict(
        _gemma4_text(layer_types=types, num_kv_shared_layers=2, use_double_wide_mlp=True), "b", "b", "b", None
    )
    assert [lay.kind for lay in m.layers] == ["sliding_window", "full"] * 2 + ["shared"] * 2
    # bf16 by default here (float16): sliding 2 x 4 x 32 x 2 B, global 2 x 2 x 64 x 2 B, two of each kept.
    assert m.kv_bytes_per_token == 2 * (2 * 4 * 32 * 2) + 2 * (2 * 2 * 64 * 2)
    # The two shared layers lose k, v and k_norm and gain a second MLP's width (3 x 128 x 64 each).
    kv_weights = 64 * (2 * 4 * 32 + 2 * 2 * 64) + 32 + 64
    assert m.num_params - base.num_params == 2 * 3 * 128 * 64 - kv_weights
    plain = hf_config._from_dict(_gemma4_text(layer_types=types, attention_k_eq_v=False), "c", "c", "c", None)
    assert {lay.num_kv_heads for lay in plain.layers} == {4}
    assert {lay.head_dim for lay in plain.layers if lay.kind == "full"} == {64}


def test_gemma_4_31b_kv_bytes_per_group_by_hand():
    """Gemma 4 31B (config.json text_config), bf16 KV, block 16, one GPU:
    - a sliding layer: num_key_value_heads 16 x head_dim 256 x 2 (K and V) x 2 B = 16,384 B a token, kept for
      the last sliding_window 1,024 tokens; a block of 16 tokens: 262,144 B;
    - a global layer: num_global_key_value_heads 4 x global_head_dim 512 x 2 x 2 B = 8,192 B a token (K is
      loaded into V's slot under attention_k_eq_v, but the layer still caches V), every token;
    vLLM's unify_kv_cache_spec_page_size grows the global layers' block to 32 tokens (262,144 B too); the 50
    sliding layers form 5 groups of 10, the 10 global layers one: a block id = 10 x 262,144 B."""
    m = models.get("gemma-4-31b")
    cfg = _text(json.loads((HF / "gemma-4-31b.json").read_text()))
    sliding = cfg["num_key_value_heads"] * cfg["head_dim"] * 2 * 2
    glob = cfg["num_global_key_value_heads"] * cfg["global_head_dim"] * 2 * 2
    assert (sliding, glob) == (16_384, 8_192)
    n_full = cfg["layer_types"].count("full_attention")
    assert m.kv_bytes_per_token == (60 - n_full) * sliding + n_full * glob
    from kvsim.model.layers import kv_layout

    layout = kv_layout(m, 16)
    groups = [(g.kind, g.window, g.block_size, g.page_bytes, len(g.layer_ids)) for g in layout.groups]
    assert groups == [("sliding_window", 1024, 16, 16 * sliding, 10)] * 5 + [("full", 0, 32, 32 * glob, 10)]
    assert layout.bytes_per_block == 10 * 16 * sliding
    for g in layout.groups:
        assert g.bytes_per_block == 10 * g.block_size * (sliding if g.kind == "sliding_window" else glob)
    assert all(cfg["layer_types"][i] == "full_attention" for i in layout.groups[-1].layer_ids)


@pytest.mark.parametrize(
    ("model", "sliding_block", "full_block", "blocks"),
    [
        ("gemma-4-31b", 64, 128, 13_162),
        ("gemma-4-26b-a4b", 64, 128, 62_034),
        ("gemma-4-e4b", 128, 64, 222_333),
    ],
)
def test_gemma_4_with_an_fp8_cache_on_hopper_takes_flashattention_4s_64_token_pages(
    model, sliding_block, full_block, blocks
):
    """vLLM 0.33.0's model head size is the widest layer's, 512 (the global layers'); FlashAttention 3 takes
    up to 256 on 9.x, so vLLM upgrades to FlashAttention 4, whose fp8 kernel reads 64-token pages: the cache
    block is 64 where it was 16. The sliding layers take it (31B: 16 kv x 256 x 2 x 1 B = 8,192 B a token, a
    page of 524,288 B); the global ones (4 kv x 512 x 2 x 1 B = 4,096 B) unify to 128 tokens for the same
    page. E4B's are the other way (2 kv x 256 x 2 = 1,024 B sliding, 2 kv x 512 x 2 = 2,048 B global): the
    global layers keep 64, the sliding ones grow to 128. The same bytes a token, 4x larger blocks."""
    fp8 = kvsim.SimConfig(model=model, gpu="h200", kv_cache_dtype="fp8")
    assert fp8.block_size == 64
    layout = fp8.pool.layout
    assert {(g.kind, g.block_size) for g in layout.groups} == {
        ("sliding_window", sliding_block),
        ("full", full_block),
    }
    assert fp8.num_blocks == blocks
    bf16 = kvsim.SimConfig(model=model, gpu="h200")  # (bf16: FlashAttention 3 takes it at 16 as before)
    assert bf16.block_size == 16
    b200 = kvsim.SimConfig(model=model, gpu="b200", kv_cache_dtype="fp8")  # (the page rule is 9.x's)
    assert b200.block_size == 16
    if model == "gemma-4-31b":
        assert layout.bytes_per_block == 10 * 64 * 8_192 == 5_242_880
        assert fp8.pool.figures.kv_cache_tokens == 1_010_940


def test_gemma_4_fp8_on_hopper_refuses_a_block_its_global_layers_cannot_take():
    """A block of 16 makes the 31B's global layers' blocks 32 tokens: FlashAttention 4's fp8 kernel on 9.x
    has no kernel block for it (64 only). A block of 32 makes them 64: taken."""
    with pytest.raises(
        InvalidArgumentError, match=r"512-wide layers .* blocks of 32 tokens, not a multiple of 64"
    ):
        kvsim.SimConfig(model="gemma-4-31b", gpu="h200", kv_cache_dtype="fp8", block_size=16)
    ok = kvsim.SimConfig(model="gemma-4-31b", gpu="h200", kv_cache_dtype="fp8", block_size=32)
    assert {g.block_size for g in ok.pool.layout.groups} == {32, 64}
    with pytest.raises(InvalidArgumentError, match="not a multiple of 64"):
        kvsim.SimConfig(model="gemma-4-e4b", gpu="h200", kv_cache_dtype="fp8_e4m3", block_size=32)


def test_gemma_4_26b_a4b_counts_the_moe_block_beside_the_mlp():
    """Gemma 4 26B A4B: on each of 30 layers a dense gated MLP (3 x 2112 x 2816) and beside it 128 experts of
    3 x 704 x 2816 (8 a token) with a 128 x 2816 router: experts 30 x 128 x 3 x 704 x 2816."""
    m = models.get("gemma-4-26b-a4b")
    assert (m.num_experts, m.experts_per_token, m.expert_ffn) == (128, 8, 704)
    experts = 30 * 128 * 3 * 704 * 2816
    assert m.num_params - m.num_active_params == experts - experts * 8 // 128
    published = json.loads((HF / "gemma-4-26b-a4b.json").read_text())
    published["text_config"]["num_experts"] = None
    no_moe = hf_config._from_dict(published, "x", "x", "x", None)
    # Without the MoE block: the experts, the router (matrix, scale, per-expert scale) and three norms go.
    assert m.num_params - no_moe.num_params == experts + 30 * (128 * 2816 + 2816 + 128 + 3 * 2816)


def test_gemma_4_runs_as_vllm_serves_it(capsys):
    """`kvsim run --model gemma-4-... --gpu h100-80gb` prints vLLM's four start-up figures (the 26B A4B at its
    262,144-token context; the 31B's 57 GiB of bf16 weights leave room for 8,192 tokens, and at its own
    context the run is refused with vLLM's message and numbers)."""
    from kvsim.cli import main

    for model, extra in (("gemma-4-26b-a4b", []), ("gemma-4-31b", ["--max-model-len", "8192"])):
        argv = ["run", "--model", model, "--gpu", "h100-80gb", "--requests", "10", *extra]
        assert main(argv) == 0
        out = capsys.readouterr().out
        cfg = kvsim.SimConfig(model=model, gpu="h100-80gb", **({"max_model_len": 8192} if extra else {}))
        lines = cfg.pool.figures.lines()
        assert [f"vllm: {line}" for line in lines] == [x for x in out.splitlines() if x.startswith("vllm: ")]
        assert len(lines) == 3  # the KV cache size and the concurrency on one line, as 0.33.0 logs them
        assert lines[0].startswith("Model loading took ")
        assert len(cfg.pool.layout.groups) == 6
    assert main(["run", "--model", "gemma-4-31b", "--gpu", "h100-80gb"]) == 2
    assert "estimated maximum model length" in capsys.readouterr().err


def test_quantization_flag_keeps_a_hybrid_presets_layers_fields():
    """--quantization fp8 re-prices a preset from its kept config fields: Gemma 3's sliding window and
    Qwen3-Next's delta-net fields are among them (the window was lost before, and the rebuild refused)."""
    for name in ("gemma-3-27b", "qwen3-next-80b-a3b"):
        dense = models.get(name)
        fp8 = models.with_quantization(dense, "fp8")
        assert fp8.num_params == dense.num_params
        assert fp8.weight_bytes < 0.6 * dense.param_bytes


def test_qwen3_5_keeps_its_recurrent_state_in_mamba_ssm_dtype():
    """Qwen3.5 (a `text_config` with `linear_attention` layer types) keeps the delta net's temporal state
    in its config's `mamba_ssm_dtype` (float32: 4 bytes), the convolution in the model's dtype; without the
    field, Qwen3-Next's rule (the model's dtype) holds."""
    text = {
        "model_type": "qwen3_5_moe_text",
        "num_hidden_layers": 4,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "vocab_size": 1000,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "mamba_ssm_dtype": "float32",
    }
    m = hf_config._from_dict({"model_type": "qwen3_5_moe", "text_config": text}, "q", "q", "q", None)
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == 8192 * 3 * 2 + 32 * 128 * 128 * 4
    plain = hf_config._from_dict({**text, "mamba_ssm_dtype": None}, "q", "q", "q", None)
    st2 = plain.layers[0].state
    assert st2 is not None
    assert st2.page_bytes(1, 16) == 8192 * 3 * 2 + 32 * 128 * 128 * 2
    # One gated-attention layer: q (and its gate) 2 x 4096, k and v 512 each, o 4096, from d 2048.
    delta = 2048 * (2 * 2048 + 2 * 4096) + 2048 * 64 + 4096 * 2048
    attn = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048
    dense = 3 * 2048 * 2048 * 4 * 4  # the default MLP width 4 x hidden, 4 layers
    assert m.num_params - plain.num_params == 0
    matrices = m.num_params - 2 * 1000 * 2048 - dense
    assert matrices - 3 * delta - attn == 3 * (8192 * 4 + 32 + 32 + 128) + 2 * 256 + 9 * 2048


def test_gemma_3_non_embedding_parameters_are_the_technical_reports():
    """Gemma 3 technical report (arXiv 2503.19786, Table 1): 12B has 10,759M non-embedding parameters and 27B
    25,600M (a 417M vision encoder apart); kvsim's count less the tied embeddings (vocabulary x width)."""
    for name, width, published in (("gemma-3-12b", 3840, 10_759e6), ("gemma-3-27b", 5376, 25_600e6)):
        m = models.get(name)
        assert m.num_params - 262208 * width == pytest.approx(published, rel=2e-4)


def test_gemma_3_12b_kv_bytes_by_hand():
    """Gemma 3 12B: 48 layers of 8 KV heads x 256, bf16: 2 x 8 x 256 x 2 B = 8,192 B a layer, 393,216 B a
    token if every layer kept it; 40 layers keep only the last 1,024 tokens, 8 keep every token."""
    m = models.get("gemma-3-12b")
    assert m.kv_bytes_per_token == 48 * 2 * 8 * 256 * 2
    assert sum(lay.kind == "full" for lay in m.layers) == 8
    assert {lay.window for lay in m.layers if lay.kind == "sliding_window"} == {1024}


def test_llama_4_maverick_alternates_moe_and_dense_layers():
    """Maverick (interleave_moe_layer_step 2): layers 1, 3, ..., 47 hold 128 experts of 8192 plus a shared
    expert of 8192, the others a dense MLP of 16384; its attention is Scout's (12 full layers, 36 in
    8,192-token chunks: 2 x 8 x 128 x 2 B = 4,096 B a layer a token if every layer kept every token)."""
    m = models.get("llama-4-maverick")
    h = 5120
    attn = h * 40 * 128 + 2 * h * 8 * 128 + 40 * 128 * h
    moe = 128 * 3 * h * 8192 + 3 * h * 8192 + 128 * h
    dense = 3 * h * 16384
    embeds = 2 * 202048 * h
    norms = (2 * 48 + 1) * h
    assert m.num_params == 48 * attn + 24 * moe + 24 * dense + embeds + norms
    assert m.num_active_params == m.num_params - 24 * 127 * 3 * h * 8192
    assert sum(lay.kind == "full" for lay in m.layers) == 12
    assert {lay.window for lay in m.layers if lay.kind == "chunked_local"} == {8192}
    assert m.kv_bytes_per_token == 48 * 4096


def test_kimi_linear_state_kv_and_weights_by_hand():
    """Kimi-Linear-48B-A3B: 7 MLA layers keep one latent per token, (512 + 64) x 2 B = 1,152 B, 8,064 B a
    token; 20 KDA layers keep per request three short-convolution states, 3 x 32 x 128 channels x (4 - 1) x
    2 B, and a float32 recurrent state, 32 heads x 128 x 128 x 4 B (vLLM's kda_state_shape / kda_state_dtype):
    73,728 + 2,097,152 = 2,170,880 B; vLLM raises the attention block to 128 x ceil(2,170,880 / (128 x
    1,152)) = 1,920 tokens (an MLA model's hybrid block is a multiple of 128, `_align_hybrid_block_size`;
    kvsim took 16's, 1,888). Weights: KDA's q, k, v, o, the two gates' low-rank pairs, b_proj; MLA without a q
    low-rank; 256 experts of 1024 and a shared expert on 26 layers, a dense MLP of 9216 on the first."""
    from kvsim.model.layers import kv_layout

    m = models.get("kimi-linear-48b-a3b")
    assert [lay.kind for lay in m.layers].count("mamba") == 20
    assert m.kv_bytes_per_token == 7 * (512 + 64) * 2 == 8064
    state = 3 * 32 * 128 * 3 * 2 + 32 * 128 * 128 * 4
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == state == 2_170_880
    assert kv_layout(m, 16, enable_prefix_caching=False).block_size == 128 * -(-state // (128 * 1152)) == 1920
    h, p, d = 2304, 32 * 128, 128
    kda = 3 * h * p + 2 * h * d + 2 * d * p + h * 32 + p * h + 3 * p * 4 + p + 32 + d
    mla = h * 32 * 192 + h * 576 + 512 * 32 * 256 + 32 * 128 * h + 512
    moe = 256 * 3 * h * 1024 + 3 * h * 1024 + 256 * h + 256  # the router's e_score_correction_bias
    dense = 3 * h * 9216
    embeds = 2 * 163840 * h
    norms = (2 * 27 + 1) * h
    assert m.num_params == 20 * kda + 7 * mla + 26 * moe + dense + embeds + norms
    # The checkpoint's own count (moonshotai/Kimi-Linear-48B-A3B-Instruct's safetensors index, as
    # pmains/kimi-linear-48b-ssd-streaming's benchmarks/results/phase-02-static-inventory.json sums it:
    # router 15,342,080 with the 26 x 256 biases). kvsim left the bias out (KimiMoE builds it on every MoE
    # layer, not only DeepSeek's noaux_tc): 49,122,675,072.
    assert m.num_params == 49_122_681_728
    active = m.num_params - 26 * 248 * 3 * h * 1024
    assert m.num_active_params == active
    assert (active - embeds) / 1e9 == pytest.approx(3, rel=0.1)  # the card's "3B activated"
    assert m.max_model_len == 1048576


def test_qwen3_6_state_in_float32_and_weights_by_hand():
    """Qwen3.6-35B-A3B (Qwen3.5's architecture): a delta-net layer keeps 8,192 conv channels x 3 x 2 B and a
    float32 recurrent state, 32 x 128 x 128 x 4 B: 2,146,304 B; a gated-attention layer 2 x 2 x 256 x 2 B =
    2,048 B a token, so vLLM's block is 16 x ceil(2,146,304 / (16 x 2,048)) = 1,056 tokens. Weights: as
    Qwen3-Next's mixer and gated attention, 256 experts of 512 and a shared expert on every layer."""
    from kvsim.model.layers import kv_layout

    m = models.get("qwen3.6-35b-a3b")
    st = m.layers[0].state
    assert st is not None
    state = 8192 * 3 * 2 + 32 * 128 * 128 * 4
    assert st.page_bytes(1, 16) == state == 2_146_304
    assert m.kv_bytes_per_token == 10 * 2048
    assert kv_layout(m, 16, enable_prefix_caching=False).block_size == 16 * -(-state // (16 * 2048)) == 1056
    h = 2048
    delta = h * (2 * 2048 + 2 * 4096) + h * 64 + 4096 * h + 8192 * 4 + 32 + 32 + 128
    attn = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
    moe = 256 * 3 * h * 512 + 3 * h * 512 + 256 * h + h
    total = 30 * delta + 10 * attn + 40 * moe + 2 * 248320 * h + (2 * 40 + 1) * h
    assert m.num_params == total


@pytest.mark.parametrize(
    "pattern",
    [
        "model.language_model.layers.*.self_attn*",  # NVIDIA's NVFP4 Gemma 4 spelling
        "language_model.model.layers.*.self_attn",  # LLaVA-style wrappers
        "model.layers.*.self_attn",  # a text model's own
    ],
)
def test_an_ignore_list_in_a_multimodal_wrappers_spelling_keeps_attention_unquantized(tmp_path, pattern):
    """A multimodal checkpoint names its text model's modules under `model.language_model.` (or
    `language_model.model.`): attention its ignore list names stays in bf16 whichever spelling it uses."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    plain, ignoring = (
        {**base, "quantization_config": qc},
        {
            **base,
            "quantization_config": {**qc, "exclude_modules": ["lm_head", pattern]},
        },
    )
    (tmp_path / "a.json").write_text(json.dumps(plain))
    (tmp_path / "b.json").write_text(json.dumps(ignoring))
    a, b = models.from_hf_config(tmp_path / "a.json"), models.from_hf_config(tmp_path / "b.json")
    h = 4096
    attn = 32 * (2 * h * h + 2 * h * 1024)  # q, o: h x h; k, v: h x 1024
    # attention at 2 bytes a weight rather than NVFP4's 4.5 bits (4 bits + an fp8 scale per 16)
    assert b.weight_bytes - a.weight_bytes == pytest.approx(attn * (2 - 4.5 / 8), rel=1e-3)


def test_kimi_k3_by_hand():
    """Kimi-K3 (moonshotai/Kimi-K3's config.json) as vLLM 0.33.0 builds it (models/kimi_k3/nvidia/model.py,
    kda.py, mla.py): 69 KDA layers with the full-rank gate (q, k, v, g of 96 x 128 on d 7168, f_a whole on
    every GPU, b; f_b; o; three float32 convolutions of 4, dt_bias, A_log, o_norm), 24 MLA layers (q_a 1536
    and kv_a 576 whole on every GPU, the output gate split; q_b, kv_b, o; two norms), 92 latent MoE layers (896
    experts of 3072 on a 3584 latent between a replicated down and up projection, its norm; two shared
    experts of 3072 on d; the router and its bias), a dense first layer of 33792, the attention residuals'
    two norms and two 1 x d projections a layer and the final pair: 2,779,484,476,000 parameters, NVIDIA's
    2.8T; 104.19B active without the input embedding (its 104B). KV: the 24 MLA layers' 576-wide latent, 27,648 B
    a token in bf16; a KDA state of 3 x 12,288 x 3 x 2 B conv and 96 x 128 x 128 x 4 B, with a FlashKDA
    prefill checkpoint block on Hopper / Blackwell (3 blocks a request in align mode, 2 on an A100)."""
    from kvsim.model.layers import kv_layout
    from kvsim.model.weights import model_breakdown, weight_groups

    m = models.get("kimi-k3")
    h, p, d, lat, e = 7168, 96 * 128, 128, 3584, 3072
    kda = 4 * p * h + 96 * h + d * h + p * d + h * p + 3 * p * 4 + p + 96 + d
    mla = (1536 + 576 + 96 * 128) * h + 96 * 192 * 1536 + 96 * 256 * 512 + h * 96 * 128 + 1536 + 512
    moe = 896 * 3 * lat * e + 2 * lat * h + lat + 3 * h * 2 * e + 896 * h + 896
    dense = 3 * h * 33792
    embeds = 2 * 163840 * h
    norms = (2 * 93 + 1) * h * 2 + (
        2 * 93 + 1
    ) * h  # two norms a layer, two residual norms, the res projections
    assert m.num_params == 69 * kda + 24 * mla + 92 * moe + dense + embeds + norms == 2_779_484_476_000
    active = m.num_params - 92 * (896 - 16) * 3 * lat * e
    assert m.num_active_params == active
    assert round((active - embeds // 2) / 1e9) == 104  # without the input embedding (lm_head computed)
    assert m.kv_bytes_per_token == 24 * 576 * 2
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == 3 * p * 3 * 2 + 96 * d * d * 4
    assert st.checkpoint_blocks == 1
    for arch, blocks in (("sm_90", 3), ("sm_100", 3), ("sm_80", 2)):
        mamba = [g for g in kv_layout(m, 16, gpu_arch=arch).groups if g.kind == "mamba"]
        assert {g.max_blocks_per_request(1, 1, True) for g in mamba} == {blocks}, arch
    # MXFP4 (compressed-tensors' mxfp4-pack-quantized): the routed experts and the latent projections; the
    # ignore list keeps attention, shared experts, the dense MLP and lm_head in bf16.
    assert m.quantization == "compressed-tensors: mlp mxfp4, experts mxfp4"
    groups = weight_groups(m)
    experts = 92 * 896 * 3 * lat * e
    assert groups["experts"].bytes == experts // 2 + experts // 32
    assert groups["attn"].bytes == 2 * groups["attn"].params
    b = model_breakdown(m)[0]
    latent = [mat for mat in b.matrices["mlp"] if "routed_expert" in mat.module]
    assert [mat.whole for mat in latent] == [True, True]
    assert m.uncounted == ("vision: kvsim does not count a untyped vision tower under kimi_k3",)


@pytest.mark.parametrize(
    ("field", "value"),
    [("mla_use_output_gate", True), ("routed_expert_hidden_size", 1024), ("attn_res_block_size", 12)],
)
def test_kimi_k3_fields_without_its_full_rank_gate_are_refused_by_name(field, value):
    """Kimi-K3's output gate, latent experts and attention residuals are read on its path only (a
    `use_full_rank_gate` config): on a Kimi-Linear config kvsim ignored them, where vLLM builds them."""
    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    with pytest.raises(InvalidArgumentError, match=f"field '{field}' \\(Kimi-K3's\\)"):
        hf_config._from_dict({**cfg, field: value}, "k", "k", "k", None)


@pytest.mark.parametrize("value", [[], "", {}, "false", 1])
def test_kimi_full_rank_gate_must_be_true_or_false(value):
    """`use_full_rank_gate` decides Kimi-K3's layer: `[]` (false by its truth) was read as a full-rank gate
    (an adversarial pass); a value not true or false is refused by name."""
    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    lac = {**cfg["linear_attn_config"], "use_full_rank_gate": value}
    with pytest.raises(InvalidArgumentError, match=r"use_full_rank_gate' .* must be true or false"):
        hf_config._from_dict({**cfg, "linear_attn_config": lac}, "k", "k", "k", None)


def test_a_config_json_python_cannot_read_and_a_changed_hf_quant_config(tmp_path):
    """An integer past Python's 4,300 digits, or arrays nested too deep, raised a bare ValueError or
    RecursionError; an hf_quant_config.json changed beside an unchanged config.json was not read again
    (the cache keyed config.json alone). Both found by an adversarial pass."""
    cfg = json.loads((HF / "qwen3-8b.json").read_text())
    path = tmp_path / "config.json"
    for text in ('{"pretraining_tp": ' + "1" * 5000 + "}", "[" * 100_000 + "]" * 100_000):
        path.write_text(text)
        hf_config._HF_CACHE.clear()
        with pytest.raises(InvalidArgumentError, match="is not a JSON config"):
            models.from_hf_config(path)
    path.write_text(json.dumps(cfg))
    side = tmp_path / "hf_quant_config.json"
    side.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}))
    assert "fp8" in models.from_hf_config(path).quantization
    side.unlink()
    assert models.from_hf_config(path).quantization == ""


def test_heads_zero_wide_name_the_model_and_its_fields():
    """hidden_size // num_attention_heads of 0 said "head_dim 0 must be at least 1", naming neither the model
    nor the fields (an adversarial pass)."""
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    with pytest.raises(
        InvalidArgumentError, match=r"model 'x': hidden_size 4096 over num_attention_heads 8192"
    ):
        hf_config._from_dict({**cfg, "num_attention_heads": 8192}, "x", "x", "x", None)


def test_an_error_in_an_hf_quant_config_json_says_which_file_holds_it(tmp_path):
    """The fields of an hf_quant_config.json beside a config.json are read as its `quantization_config`:
    an error naming `quantization_config.*` now says which file holds them (the user's config.json has no
    such field; an adversarial pass)."""
    cfg = json.loads((HF / "qwen3-8b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    side = {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "FP8", "exclude_modules": "mtp*"},
    }
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(side))
    hf_config._HF_CACHE.clear()
    with pytest.raises(InvalidArgumentError, match=r"read from .*hf_quant_config\.json"):
        models.from_hf_config(tmp_path / "config.json")
