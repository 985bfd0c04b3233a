"""What vLLM loads beside a language model's weights (DESIGN.md §Defaults and sizing, "Encoders" and "Rotary
caches"): a multimodal checkpoint's towers and projectors, split or whole under tensor parallelism, and the
rotary embeddings' cos/sin caches, in "Model loading took".

The tower counts are vLLM 0.33.0's: its own encoder modules (`siglip.py`, `mllama4.py`, `pixtral.py` with
`mistral3.py`, `qwen3_vl.py`, `gemma4_mm.py` with transformers' Gemma 4 towers) built on PyTorch's meta
device at tensor parallelism 1, 2, 4 and 8, their parameters summed per rank; Llama 4's also matches a
published per-module parameter table of Llama-4-Scout's vision model (class embedding 1,408, position
embedding 812,416, patch embedding 827,904, ...). The rotary caches are the buffers `get_rope` registers
for the arguments each model file passes, replayed the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvsim
from kvsim.cli import main
from kvsim.model import catalogue, encoders, hf_config, models, rope
from kvsim.model.shard import shard

HF = Path(__file__).parent / "data" / "hf"
MiB = 2**20

# name: (kind, parameters split by tensor parallelism, parameters whole on every rank)
TOWERS = {
    "gemma-3-12b": ("siglip_vision_model", 411_279_984, 10_010_880),
    "gemma-3-27b": ("siglip_vision_model", 411_279_984, 11_780_352),
    "llama-4-scout": ("llama4_vision_model", 870_825_728, 1_106_688),
    "llama-4-maverick": (
        "llama4_vision_model",
        870_825_728,
        1_106_688,
    ),  # (Scout's tower: the same vision_config)
    "mistral-small-3.1-24b": ("pixtral", 434_110_464, 4_847_616),
    "qwen3.6-35b-a3b": ("qwen3_5_moe_vision", 441_955_440, 4_615_808),
    "gemma-4-31b": ("gemma4_vision", 0, 575_743_536),
    "gemma-4-e4b": ("gemma4_vision", 0, 169_331_136),
}
# Gemma 4 E4B's audio tower and embed_audio (transformers' module, vLLM's replicated linears).
E4B_AUDIO = 308_757_248

# vLLM 0.33.0's cos/sin caches, MiB a GPU, for every preset (`get_rope` replayed per model file).
ROPE_MIB = {
    "deepseek-v3": 20,
    "deepseek-v4-flash": 512,  # two, float32
    "gemma-3-12b": 576,  # sliding 131,072 rows; global linear x8, 1,048,576 rows; heads of 256
    "gemma-3-27b": 288,
    "gemma-4-26b-a4b": 384,  # sliding 256 wide; global `proportional`, its 512-wide head
    "gemma-4-31b": 384,
    "gemma-4-e4b": 192,
    "gpt-oss-20b": 32,  # float32, YaRN 4,096 x 32 rows
    "gpt-oss-120b": 32,
    "kimi-linear-48b-a3b": 0,
    "llama-2-7b": 1,
    "llama-3-8b": 2,
    "llama-3.1-8b": 32,  # llama3 scaling keeps 131,072 rows
    "llama-4-maverick": 256,
    "llama-4-scout": 2560,  # 10,485,760 rows of 128 in bf16 on every GPU
    "minimax-m2": 24,  # rotary_dim 64 of 128
    "mistral-7b": 8,
    "mistral-small-24b": 8,
    "mistral-small-3.1-24b": 32,
    "opt-13b": 0,
    "phi-4": 4,
    "qwen2.5-7b": 8,
    "qwen3-8b": 10,
    "qwen3-30b-a3b": 10,
    "qwen3-32b-awq": 10,
    "qwen3-next-80b-a3b": 32,  # partial 0.25 of 256
    "qwen3.6-35b-a3b": 32,  # mrope, positions factor 1
}


@pytest.mark.parametrize("name", sorted(TOWERS))
def test_towers_are_vllms_modules(name):
    kind, split, whole = TOWERS[name]
    for m in (models.get(name), models.from_hf_config(HF / f"{name}.json")):
        t = m.towers[0]
        assert (t.kind, t.split, t.whole) == (kind, 2 * split, 2 * whole), name  # bf16
        assert m.uncounted == ()
        if name == "gemma-4-e4b":
            assert [(a.kind, a.split, a.whole) for a in m.towers[1:]] == [("gemma4_audio", 0, 2 * E4B_AUDIO)]
        else:
            assert len(m.towers) == 1


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tensor_parallelism_splits_only_the_parallel_layers(tp):
    """Llama 4 Scout at tp 4: 218,813,120 parameters a GPU (vLLM's ranks, counted on the meta device)."""
    _kind, split, whole = TOWERS["llama-4-scout"]
    (t,) = shard(models.get("llama-4-scout"), None, tp).towers
    assert t.split == -(-2 * split // tp)
    assert t.whole == 2 * whole
    if tp == 4:
        assert (t.split + t.whole) // 2 == 218_813_120
    (g4,) = shard(models.get("gemma-4-31b"), None, tp).towers  # Gemma 4's towers are all replicated
    assert g4.total == 2 * TOWERS["gemma-4-31b"][2]


@pytest.mark.parametrize("name", sorted(ROPE_MIB))
def test_rotary_caches_are_vllms(name):
    m = models.get(name)
    assert m.rope_cache_bytes == ROPE_MIB[name] * MiB, name
    if (HF / f"{name}.json").exists():
        assert models.from_hf_config(HF / f"{name}.json").rope_cache_bytes == m.rope_cache_bytes
    # every GPU holds them whole
    assert shard(m, None, 2).rope_cache_bytes == m.rope_cache_bytes


def test_rows_follow_each_rope_type():
    assert rope.rows({"rope_type": "default"}, 4096) == 4096
    assert rope.rows({"rope_type": "llama3", "factor": 8}, 131072) == 131072
    assert rope.rows({"rope_type": "linear", "factor": 8}, 131072) == 1048576
    assert rope.rows({"rope_type": "linear", "factor": [2, 4]}, 1000) == 6000
    assert (
        rope.rows({"rope_type": "yarn", "factor": 32, "original_max_position_embeddings": 4096}, 131072)
        == 131072
    )
    assert rope.rows({"rope_type": "longrope", "original_max_position_embeddings": 4096}, 131072) == 135168
    assert rope.rows({"rope_type": "default", "mrope_section": [16, 24, 24]}, 32768) == 4 * 32768
    assert rope.rows({"rope_type": "default", "mrope_section": [16, 24, 24]}, 32768, mrope_factor=1) == 32768


def test_weights_memory_is_model_loading_took():
    """The pool's weights are the language model's, its counted towers' share and its rotary caches, and
    `language_model_only` (vLLM's --language-model-only) drops the towers and their notes."""
    cfg = kvsim.SimConfig(model="gemma-3-12b", gpu="h100-80gb")
    lm = kvsim.SimConfig(model="gemma-3-12b", gpu="h100-80gb", language_model_only=True)
    m = models.get("gemma-3-12b")
    assert cfg.pool.weight_bytes == m.param_bytes + 2 * sum(TOWERS["gemma-3-12b"][1:]) + 576 * MiB
    assert cfg.pool.tower_bytes == 2 * sum(TOWERS["gemma-3-12b"][1:])
    assert lm.pool.weight_bytes == m.param_bytes + 576 * MiB
    assert lm.pool.tower_bytes == 0
    assert lm.pool.kv_cache_bytes - cfg.pool.kv_cache_bytes == cfg.pool.tower_bytes
    assert cfg.pool.figures is not None
    assert cfg.pool.figures.model_loading_bytes == cfg.pool.weight_bytes
    # Under tensor parallelism: one GPU's share of the split layers, the whole of the rest.
    tp4 = kvsim.SimConfig(model="llama-4-scout", gpu="h100-80gb", tensor_parallel_size=4, max_model_len=8192)
    assert tp4.pool.tower_bytes == 2 * 218_813_120
    assert tp4.pool.rope_cache_bytes == 2560 * MiB
    text = kvsim.SimConfig(model="qwen3-8b", gpu="h100-80gb")
    assert text.pool.tower_bytes == 0
    assert text.pool.rope_cache_bytes == 10 * MiB
    assert text.pool.to_dict()["rope_cache_bytes"] == 10 * MiB


def test_a_tower_kvsim_cannot_count_says_why():
    """An unknown tower is named in the run's note (kvsim cannot size it); a known one whose config lacks a
    size kvsim reads, or holds a wrong one, is refused (the counted tower would be guessed)."""
    from kvsim.errors import InvalidArgumentError

    cfg = json.loads((HF / "llama-4-scout.json").read_text())
    del cfg["vision_config"]["intermediate_size"]
    with pytest.raises(InvalidArgumentError, match="has no 'intermediate_size'"):
        encoders.tower(cfg, "vision", 5120)
    cfg["vision_config"] = {"model_type": "clip_vision_model"}
    with pytest.raises(
        encoders.Uncounted, match="does not count a clip_vision_model vision tower under llama4"
    ):
        encoders.tower(cfg, "vision", 5120)
    cfg = json.loads((HF / "gemma-4-e4b.json").read_text())
    cfg["audio_config"] = {"model_type": "whisper"}
    m = hf_config._from_dict(cfg, "e4b", "e4b", "e4b", None)
    assert m.encoders == ("vision", "audio")
    assert m.uncounted == ("audio: kvsim does not count a whisper audio tower under gemma4",)
    cfg["audio_config"] = {"model_type": "gemma4_audio", "subsampling_conv_channels": [128]}
    with pytest.raises(InvalidArgumentError, match="audio_config: its subsampling_conv_channels"):
        hf_config._from_dict(cfg, "e4b", "e4b", "e4b", None)


def test_presets_carry_their_published_wrappers():
    """Every preset whose published config.json has towers carries them (`catalogue.WRAPPERS`, field for
    field the file's), as a config file read gives them."""
    for name in catalogue.ENTRIES:
        published = json.loads((HF / f"{name}.json").read_text())
        want = tuple(e for e in ("vision", "audio") if isinstance(published.get(f"{e}_config"), dict))
        assert models.get(name).encoders == want == models.from_hf_config(HF / f"{name}.json").encoders, name
        wrapper = catalogue.WRAPPERS.get(name, {})
        for key, value in wrapper.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    assert published[key].get(k, 3 if k == "num_channels" else None) == v, (name, key, k)
            else:
                assert published.get(key) == value, (name, key)
    assert (
        models.with_quantization(models.get("gemma-3-12b"), "fp8").towers == models.get("gemma-3-12b").towers
    )


def test_kvsim_run_says_what_it_counts(capsys):
    for argv, count, says in (
        (
            ["gemma-3-12b", "--gpu", "h100-80gb"],
            2,
            ["multimodal checkpoint", "siglip_vision_model", "rotary"],
        ),
        (["gemma-3-12b", "--gpu", "h100-80gb", "--language-model-only"], 1, ["rotary"]),
        (["gemma-3-12b", "--kv-cache-memory-bytes", "10GiB"], 0, []),
        (["gemma-4-e4b", "--gpu", "h100-80gb"], 1, ["gemma4_vision, gemma4_audio"]),
        (
            ["llama-4-scout", "--gpu", "h100-80gb", "-tp", "4", "--max-model-len", "8192"],
            2,
            ["2.5 GiB of cos/sin"],
        ),
        (["qwen3-8b", "--gpu", "h100-80gb"], 0, []),
    ):
        assert main(["run", *argv, "--requests", "5"]) == 0
        notes = [n for n in capsys.readouterr().out.splitlines() if n.startswith("note:")]
        ours = [n for n in notes if "multimodal" in n or "does not count" in n or "rotary" in n]
        assert len(ours) == count, (argv, ours)
        for s in says:
            assert any(s in n for n in ours), (argv, s, ours)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": -1, "original_max_position_embeddings": 4096}},
            "'factor'",
        ),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": "a"}},
            "'original_max_position_embeddings'",
        ),
        ({"partial_rotary_factor": 2}, "'partial_rotary_factor'"),
        ({"rotary_dim": 0}, "'rotary_dim'"),
        ({"rotary_dim": 4096}, "'rotary_dim'"),
    ],
)
def test_a_rope_field_vllm_cannot_take_is_refused_by_name(fields, named):
    from kvsim.errors import InvalidArgumentError

    cfg = {**json.loads((HF / "qwen3-8b.json").read_text()), **fields}
    with pytest.raises(InvalidArgumentError, match=named):
        hf_config._from_dict(cfg, "t", "t", "t", None)


def _file(tmp_path, name, edit):
    cfg = json.loads((HF / f"{name}.json").read_text())
    edit(cfg)
    path = tmp_path / f"{name}-edited.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    ("name", "edit", "named"),
    [
        ("gemma-4-31b", lambda c: c["text_config"].update(global_head_dim="x"), "'global_head_dim'"),
        (
            "llama-3.1-8b",
            lambda c: c.update(
                rope_scaling={
                    "rope_type": "yarn",
                    "factor": [None, 2],
                    "original_max_position_embeddings": 8192,
                }
            ),
            "'factor'",
        ),
        (
            "llama-3.1-8b",
            lambda c: c.update(
                rope_scaling={"rope_type": "yarn", "factor": [], "original_max_position_embeddings": 8192}
            ),
            "'factor'",
        ),
        (
            "gemma-3-12b",
            lambda c: c["vision_config"].update(hidden_size="1152"),
            "vision_config: .*'hidden_size'",
        ),
        ("llama-4-scout", lambda c: c["vision_config"].update(num_hidden_layers=True), "'num_hidden_layers'"),
        ("mistral-small-3.1-24b", lambda c: c.update(vision_feature_layer=99), "vision_feature_layer 99"),
        ("gemma-3-12b", lambda c: c["text_config"].update(dtype={"a": 1}), "torch_dtype"),
        ("gemma-4-e4b", lambda c: c["text_config"].update(hidden_size_per_layer_input={}), "per_layer_input"),
        ("llama-3.1-8b", lambda c: c.update(num_hidden_layers=2**40), "layers is more than kvsim models"),
    ],
)
def test_a_bad_field_is_refused_in_one_line(tmp_path, capsys, name, edit, named):
    """An adversarial pass found tracebacks (a Gemma 4 `global_head_dim` that is no number, a list of YaRN
    factors with a null, a `torch_dtype` that is an object, a per-layer input width that is one, a layer
    count no model has) and a tower silently left uncounted for a wrong field: each is now refused by
    name, from the API and from the CLI (exit status 2, one line)."""
    import re

    from kvsim.errors import InvalidArgumentError

    path = _file(tmp_path, name, edit)
    with pytest.raises(InvalidArgumentError, match=named):
        kvsim.SimConfig(model=str(path), gpu="h100-80gb")
    assert main(["run", str(path), "--gpu", "h100-80gb", "--requests", "5"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert re.search(named, err[0]), err


def test_rotary_caches_read_every_spelling(tmp_path):
    """transformers 5's `rope_parameters` per layer type for Gemma 3 (vLLM reads `rope_parameters[layer_type]`)
    gives the same caches as transformers 4's `rope_scaling`; Llama 4's `no_rope_layers: []` is transformers'
    default pattern (RoPE on three layers of four), not NoPE everywhere; and a checkpoint quantized at load
    keeps its RoPE scaling's context (the fields are kept for the rebuild)."""

    def nested(c):
        t = c["text_config"]
        t["rope_parameters"] = {
            "full_attention": {**t.pop("rope_scaling"), "rope_theta": t.pop("rope_theta")},
            "sliding_attention": {"rope_type": "default", "rope_theta": t.pop("rope_local_base_freq")},
        }

    g3 = models.from_hf_config(_file(tmp_path, "gemma-3-12b", nested))
    assert g3.rope_cache_bytes == ROPE_MIB["gemma-3-12b"] * MiB
    scout = models.from_hf_config(
        _file(tmp_path, "llama-4-scout", lambda c: c["text_config"].update(no_rope_layers=[]))
    )
    assert scout.rope_cache_bytes == ROPE_MIB["llama-4-scout"] * MiB
    linear = models.from_hf_config(
        _file(tmp_path, "llama-3-8b", lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 4.0}))
    )
    assert linear.max_model_len == 4 * 8192
    assert models.with_quantization(linear, "fp8").max_model_len == 4 * 8192
    assert linear.rope_cache_bytes == 4 * 8192 * 128 * 2


def test_a_path_with_a_huge_number_in_it_is_a_path():
    from kvsim.workloads.registry import literal

    assert literal("data/1e400") == "data/1e400"
    assert literal("1/2") == (1, 2)
    from kvsim.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="beyond a float's range"):
        literal("1/1e400")
