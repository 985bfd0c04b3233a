"""DeepSeek-V3.2's sparse attention (DESIGN.md §Defaults and sizing, "DeepSeek-V3.2"): its indexer's key
cache beside the MLA latent, the 64-token blocks its indexer takes on CUDA, the indexer's weights, the
GPUs and KV dtypes whose layout kvsim does not model refused by name, and the roofline's sparse reads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import kvsim
from kvsim import models
from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, hf_config
from kvsim.model.layers import kv_layout
from kvsim.model.timing import roofline_time_model

HF = Path(__file__).parent / "data" / "hf"
LATENT = (512 + 64) * 2  # a bf16 latent entry: kv_lora_rank + qk_rope_head_dim
INDEX = 128 + 4  # 128 fp8 values and one fp32 scale


def test_the_indexer_keys_join_the_latent_in_one_group():
    m = models.get("deepseek-v3.2")
    v3 = models.from_hf_config(HF / "deepseek-v3.json")
    assert m.is_dsa
    assert not v3.is_dsa
    assert not m.is_hybrid  # every layer full attention: one group, as vLLM's UniformTypeKVCacheSpecs
    assert m.kv_bytes_per_token == 61 * (LATENT + INDEX) == 78_324
    assert v3.kv_bytes_per_token == 61 * LATENT
    layout = kv_layout(m, 64)
    assert len(layout.groups) == 1
    assert layout.bytes_per_block == 64 * 78_324 == 5_012_736
    # fp8 on a B200 (FlashInfer's sparse backend: 576-byte entries); the indexer's keys stay 132 bytes.
    fp8 = m.with_kv_dtype("fp8")
    assert fp8.kv_bytes_per_token == 61 * (576 + INDEX) == 43_188


def test_the_indexer_weights():
    """Per layer: wq_b (q_lora 1536 -> 64 heads x 128, fp8 like the rest), the fused wk + weights_proj (7168
    -> 128 + 64, bf16: vLLM loads it unquantized) and k_norm's weight and bias."""
    m = models.get("deepseek-v3.2")
    v3 = hf_config._from_dict(
        {**_v32(), "model_type": "deepseek_v3", "index_topk": None}, "v3", "v3", "v3", None
    )
    per_layer = 64 * 128 * 1536 + (128 + 64) * 7168 + 2 * 128
    assert m.num_params - v3.num_params == 61 * per_layer == 851_524_864
    assert (
        m.num_params == 671_877_944_064
    )  # (the MTP layer, loaded only for speculative decoding: not counted)
    fp8_part = 61 * 64 * 128 * 1536
    scales = 61 * (64 * 128 // 128) * (1536 // 128) * 4  # 128 x 128 blocks' fp32 scales
    bf16_part = 61 * ((128 + 64) * 7168 + 2 * 128) * 2
    assert m.param_bytes - v3.param_bytes == fp8_part + scales + bf16_part


def _v32() -> dict:
    import json

    return json.loads((HF / "deepseek-v3.2.json").read_text())


@pytest.mark.parametrize(
    ("gpu", "kv", "block"),
    [
        (None, "auto", 64),
        ("h200", "auto", 64),
        ("b200", "auto", 64),
        ("b200", "fp8", 64),
        ("mi300x", "auto", 64),
    ],
)
def test_block_size_when_unset(gpu, kv, block):
    """The indexer takes kernel blocks of 64 tokens only on CUDA, so vLLM 0.33.0 picks 64 there (no GPU named:
    vLLM's CUDA wheel); ROCm keeps the block offered: 0.34.0's 64, 0.33.0's 16."""
    sized = {"gpu": gpu} if gpu else {"num_blocks": 1000}
    cfg = kvsim.SimConfig(model="deepseek-v3.2", kv_cache_dtype=kv, tensor_parallel_size=8, **sized)
    assert cfg.block_size == block
    assert cfg.replace(default_block_size=16).block_size == (16 if gpu == "mi300x" else block)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpu": "h200", "block_size": 16}, "block_size 16 is not a multiple of 64"),
        ({"block_size": 96, "num_blocks": 1000}, "block_size 96 is not a multiple of 64"),
        ({"gpu": "a100-80gb"}, "no attention backend below compute capability 9.0"),
        ({"gpu": "l40s"}, "no attention backend below compute capability 9.0"),
        ({"gpu": "rtx-pro-6000", "kv_cache_dtype": "fp16"}, "SM120.*refuses kv_cache_dtype fp16"),
        ({"gpu": "h200", "kv_cache_dtype": "fp8_e4m3"}, "fp8_e4m3 on compute capability 9.x.*give fp8"),
        ({"kv_cache_dtype": "fp8", "num_blocks": 1000}, "name the GPU"),
    ],
)
def test_what_kvsim_does_not_model_is_refused(fields, message):
    with pytest.raises(InvalidArgumentError, match=message):
        kvsim.SimConfig(model="deepseek-v3.2", tensor_parallel_size=8, **fields)


def test_given_block_sizes():
    assert (
        kvsim.SimConfig(model="deepseek-v3.2", gpu="h200", block_size=128, tensor_parallel_size=8).block_size
        == 128
    )
    assert (
        kvsim.SimConfig(model="deepseek-v3.2", gpu="mi300x", block_size=16, tensor_parallel_size=8).block_size
        == 16
    )


def test_index_sharing_skips_layers_as_vllm_does():
    """`index_topk_freq` 4 with `index_skip_topk_offset` 3 (GLM-5.2's values): layers 0, 1, 2, 6, 10, ...
    keep an indexer (21 of 78); `index_topk_pattern` "S" skips a layer."""
    cfg = {**_v32(), "num_hidden_layers": 78, "index_topk_freq": 4, "index_skip_topk_offset": 3}
    m = hf_config._from_dict(cfg, "t", "t", "t", None)
    with_index = [i for i, lay in enumerate(m.layers) if lay.index_head_dim]
    assert with_index == [0, 1, 2, *range(6, 78, 4)]
    assert len(with_index) == 21
    assert m.kv_bytes_per_token == 78 * LATENT + 21 * INDEX
    full = hf_config._from_dict({**cfg, "index_topk_freq": 1}, "t", "t", "t", None)
    assert m.num_params < full.num_params  # the skipped layers build no indexer
    layout = kv_layout(m, 64)
    assert len(layout.groups) == 1  # one kind, per-layer pages: still one group
    assert layout.bytes_per_block == 64 * m.kv_bytes_per_token
    pattern = hf_config._from_dict({**_v32(), "index_topk_pattern": "FS" * 30 + "F"}, "t", "t", "t", None)
    assert [bool(lay.index_head_dim) for lay in pattern.layers] == [i % 2 == 0 for i in range(61)]


def test_sparse_attention_reads_top_k_latents_and_every_indexer_key():
    """At long contexts a decode reads 2,048 latents a layer (not the whole context) and every key's 132
    indexer bytes: far less than DeepSeek-V3's dense latent reads; at short ones, the same latents as V3 plus
    the indexer's."""
    h200 = gpus.get("h200")
    v32 = models.get("deepseek-v3.2")
    v3 = dataclasses.replace(v32, layers=())  # the same weights, dense MLA
    sparse = roofline_time_model(v32, h200, tensor_parallel_size=8)
    dense = roofline_time_model(v3, h200, tensor_parallel_size=8)
    long_ctx = [(100_000, 1)] * 64
    short = [(1024, 1)] * 64
    assert sparse.step_ps(long_ctx) < 0.5 * dense.step_ps(long_ctx)
    assert sparse.step_ps(short) > dense.step_ps(short)
    # Past the top-k, a longer context costs only the indexer's keys.
    grow = sparse.step_ps([(200_000, 1)] * 64) - sparse.step_ps(long_ctx)
    grow_dense = dense.step_ps([(200_000, 1)] * 64) - dense.step_ps(long_ctx)
    assert 0 < grow < grow_dense * INDEX / LATENT * 1.01


def test_vllm_v0s_rules_refused_as_v0_never_served_it():
    """vLLM's v0 engine was gone before DeepSeek-V3.2 came: the v0 preset's swapping (and its other
    v0-only rules) are refused by name, as for a hybrid model; DeepSeek-V3 (MLA, served by v0) is not."""
    base = dict(gpu="h200", tensor_parallel_size=8, max_model_len=32768)
    with pytest.raises(
        InvalidArgumentError, match=r"only vLLM v1 serves, so preemption 'auto' does not apply"
    ):
        kvsim.SimConfig.preset("vllm-v0", model="deepseek-v3.2", **base)
    with pytest.raises(InvalidArgumentError, match=r"watermark_rule 'always' does not apply"):
        kvsim.SimConfig(model="deepseek-v3.2", watermark_rule="always", **base)
    assert kvsim.SimConfig.preset("vllm-v0", model="deepseek-v3", **base).preemption == "auto"
    assert kvsim.SimConfig.preset("vllm-v1", model="deepseek-v3.2", **base).block_size == 64


def test_the_lab_does_not_offer_it():
    from kvsim.lab.query import model_names

    assert "deepseek-v3.2" not in model_names()
    assert "deepseek-v3" in model_names()


def test_glm_5_on_the_same_classes_with_fp8_forced_on_10x():
    """GLM-5 (`glm_moe_dsa`) is served on DeepSeek-V3.2's classes: its indexer (32 heads of 128) on every
    layer; vLLM 0.33.0 turns its KV cache auto into fp8 on compute capability 10.x only
    (`GlmMoeDsaForCausalLM.verify_and_update_config`), and `replace` derives it again."""
    m = models.get("glm-5")
    assert m.is_dsa
    assert m.kv_bytes_per_token == 78 * (LATENT + INDEX) == 100_152
    b200 = kvsim.SimConfig(model="glm-5", gpu="b200", tensor_parallel_size=8, quantization="fp8")
    assert b200.kv_cache_dtype == "fp8"
    assert b200.pool.layout.bytes_per_block == 64 * 78 * (576 + INDEX)
    h200 = b200.replace(gpu="h200")
    assert h200.kv_cache_dtype == "auto"
    assert h200.pool.layout.bytes_per_block == 64 * 100_152
    given = kvsim.SimConfig(
        model="glm-5", gpu="b200", tensor_parallel_size=8, quantization="fp8", kv_cache_dtype="bf16"
    )
    assert given.kv_cache_dtype == "bf16"  # (only auto is turned into fp8)
    v32 = kvsim.SimConfig(model="deepseek-v3.2", gpu="b200", tensor_parallel_size=8)
    assert v32.kv_cache_dtype == "auto"  # (DeepSeek-V3.2 keeps its bf16 cache there)


def test_other_sparse_attention_models_still_refused():
    other = {**_v32(), "model_type": "deepseek_v3"}
    with pytest.raises(InvalidArgumentError, match=r"modelled only for DeepSeek-V3\.2"):
        hf_config._from_dict(other, "t", "t", "t", None)


# -- A review against vLLM 0.33.0's wheel ------------------------------------------------------------------------


def test_pool_blocks_applies_the_same_rules():
    """`kvsim.pool_blocks` sized DeepSeek-V3.2 with 576-byte fp8 entries on an H200 (vLLM: 656) and took
    blocks of 16 and an A100; it sizes the 656-byte entries and refuses the rest as SimConfig does, and gives
    GLM-5 fp8 on a B200."""
    fp8 = kvsim.pool_blocks("deepseek-v3.2", "h200", 64, kv_cache_bytes=10**11, kv_dtype="fp8")
    assert fp8 == 10**11 // (64 * 61 * (656 + INDEX)) == 32_506
    with pytest.raises(InvalidArgumentError, match="not a multiple of 64"):
        kvsim.pool_blocks("deepseek-v3.2", "h200", 16, kv_cache_bytes=10**11)
    with pytest.raises(InvalidArgumentError, match=r"below compute capability 9\.0"):
        kvsim.pool_blocks("deepseek-v3.2", "a100-80gb", 64, kv_cache_bytes=10**11)
    glm = kvsim.pool_blocks("glm-5", "b200", 64, kv_cache_bytes=10**11)
    assert glm == 10**11 // (64 * 78 * (576 + INDEX))


@pytest.mark.parametrize(
    ("change", "gpu", "kv", "message"),
    [
        ({}, "b200", "fp8_e5m2", "fp8_e5m2: none of vLLM 0.33.0's sparse MLA backends"),
        ({}, "b200", "fp32", "fp32: none of vLLM 0.33.0's sparse MLA backends"),
        ({}, "gfx942", "fp8_e5m2", "fp8_e5m2: none"),
        (
            {"qk_nope_head_dim": 64},
            "b200",
            "fp8_e4m3",
            "fp8_e4m3 on compute capability 10.x for a qk_nope_head_dim of 64",
        ),
        (
            {"model_type": "glm_moe_dsa", "qk_nope_head_dim": 64},
            "b200",
            "auto",
            "fp8_e4m3 on compute capability 10.x",
        ),
        ({"index_topk": 1024}, "sm_120", "auto", "SM120.*refuses index_topk 1024"),
        ({"model_type": "glm_moe_dsa"}, "sm_120", "bf16", "SM120.*refuses kv_cache_dtype bf16"),
        ({"kv_lora_rank": 256}, "b200", "auto", r"a latent of 256 \+ 64"),
        ({}, "sm_110", "auto", "9.x, 10.x and 12.x only"),
    ],
)
def test_backends_that_do_not_take_the_model_are_refused(change, gpu, kv, message):
    m = hf_config._from_dict({**_v32(), **change}, "t", "t", "t", None)
    g = gpus.get("b200") if gpu == "b200" else dataclasses.replace(gpus.get("b200"), arch=gpu)
    with pytest.raises(InvalidArgumentError, match=message):
        kvsim.SimConfig(model=m, gpu=g, kv_cache_dtype=kv, tensor_parallel_size=8)


def test_two_rotary_caches_unless_the_indexer_rotates_as_the_latent():
    """DeepSeek-V3.2's indexer rotates neox-style, its MLA not: vLLM keeps two caches (`get_rope` keys on
    the style); GLM-5's `indexer_rope_interleave` makes them one."""
    v3 = models.from_hf_config(HF / "deepseek-v3.json")
    assert models.get("deepseek-v3.2").rope_cache_bytes == 2 * v3.rope_cache_bytes
    glm = _v32() | {"model_type": "glm_moe_dsa"}
    one = hf_config._from_dict({**glm, "indexer_rope_interleave": True}, "t", "t", "t", None)
    assert one.rope_cache_bytes == v3.rope_cache_bytes


def test_the_indexer_scores_at_the_fp8_rate():
    """A long prefill is mostly the indexer's scoring, an fp8 x fp8 product: its FLOPs are counted at the
    GPU's fp8 rate (H200: twice the bf16 rate), not the attention's bf16 one."""
    h200 = gpus.get("h200")
    v32 = models.get("deepseek-v3.2")
    fast = roofline_time_model(v32, h200, tensor_parallel_size=8)
    slow = roofline_time_model(
        v32, dataclasses.replace(h200, fp8_flops=h200.peak_flops), tensor_parallel_size=8
    )
    full = [a for a in fast.attention if a.kind == 0 and a.window == 0]
    assert len(full) == 1
    assert next(a.flop_ps for a in slow.attention if a.kind == 0 and a.window == 0) == pytest.approx(
        2 * full[0].flop_ps, rel=1e-3
    )


def test_the_weights_reread_from_kept_fields():
    """The roofline re-derives the weights from the fields a Model keeps: the index-sharing fields too."""
    from kvsim.model.weights import weight_groups

    cfg = {**_v32(), "index_topk_freq": 4, "index_skip_topk_offset": 3}
    m = hf_config._from_dict(cfg, "t", "t", "t", None)
    assert sum(g.bytes for g in weight_groups(m).values()) == m.param_bytes


def test_glm_5_2_index_sharing_and_its_per_layer_ignore_list():
    """NVIDIA's GLM-5.2 NVFP4 release: the index-sharing fields put an indexer on the layers its (unread)
    `indexer_types` marks "full" (21 of 78); its ModelOpt ignore list names single layers (`model.layers.0*`,
    every layer's attention and shared experts), which left every group unquantized when kvsim read layer 0
    alone: the routed experts are NVFP4, the attention and shared experts as the checkpoint keeps them."""
    import json

    raw = json.loads((HF / "glm-5.2-nvfp4.json").read_text())
    m = models.from_hf_config(HF / "glm-5.2-nvfp4.json")
    full = [i for i, t in enumerate(raw["indexer_types"]) if t == "full"]
    assert [i for i, lay in enumerate(m.layers) if lay.index_head_dim] == full
    assert len(full) == 21
    assert "experts nvfp4" in m.quantization
    assert "attn" not in m.quantization
    assert "shared_experts" not in m.quantization
    assert m.param_bytes < 0.35 * 2 * m.num_params  # mostly 4-bit experts (was 2 bytes a parameter)


def test_an_ignore_list_exempts_a_group_only_where_it_names_every_layer():
    from kvsim.model import quant
    from kvsim.model.params import Breakdown

    b = Breakdown()
    b.add("attn", 64, 64, 4, module="self_attn.q_proj", layers=range(4))
    b.add("mlp", 64, 64, 4, module="mlp.gate_proj", layers=range(4))

    def fp8(ignored: list[str]) -> tuple[str, ...]:
        qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": ignored}
        return tuple(quant.from_config(qc, "t", b).formats)

    every = fp8([])
    assert fp8(["model.layers.0*"]) == every  # one layer named: the others keep the group quantized
    assert "attn" not in fp8(["re:model.layers.*.self_attn.*"])
    named = [f"model.layers.{i}.self_attn" for i in range(4)]
    assert "attn" not in fp8(named)
    assert "attn" in fp8(named[:3])


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"sliding_window": 4096}, "sliding_window"),
        ({"attention_chunk_size": 8192}, "attention_chunk_size"),
        ({"hybrid_override_pattern": "M" * 61}, "hybrid_override_pattern"),
        ({"layer_types": ["sliding_attention"] * 61}, "layer_types"),
    ],
)
def test_layer_kind_fields_refused_on_sparse_attention(fields, key):
    """A layer-kind field another model type reads (a window, chunks, a pattern) was dropped silently on a
    sparse-attention model; GLM-5.2's own `layer_types` (every layer `deepseek_sparse_attention`) is taken."""
    with pytest.raises(InvalidArgumentError, match=f"'{key}'"):
        hf_config._from_dict({**_v32(), **fields}, "t", "t", "t", None)
    listed = {**_v32(), "layer_types": ["deepseek_sparse_attention"] * 61, "sliding_window": 4096}
    assert hf_config._from_dict(listed, "t", "t", "t", None).layers == models.get("deepseek-v3.2").layers


def test_a_prefill_pool_of_another_kv_dtype_says_where_each_came_from():
    """GLM-5's fp8 cache on a B200 is vLLM's own choice from auto: a prefill pool on an MI300X keeps bf16, and
    the refusal says so (it named 'auto' against 'fp8', neither typed); bf16 given against auto (the same
    bf16) is no difference."""
    decode = kvsim.SimConfig(
        model="glm-5", gpu="b200", tensor_parallel_size=8, quantization="fp8", replicas=2, prefill_replicas=1
    )
    prefill = decode.replace(gpu="mi300x", replicas=1, prefill_replicas=0)
    from kvsim.engine.cluster_pd import _pd_spec

    with pytest.raises(
        InvalidArgumentError, match=r"bf16 \(auto: the model's\) differs from .* fp8 \(auto: vLLM"
    ):
        _pd_spec([decode, decode], None, prefill)


def test_a_modelopt_hf_quant_config_beside_the_config_is_read():
    """NVIDIA's GLM-5-NVFP4 keeps its quantization in `hf_quant_config.json` (no `quantization_config` in
    config.json), which vLLM reads, naming the method from its producer and quant_algo: kvsim sized it as
    bf16 (1.49 TB). Its exclude list names every layer's MLA projections (`kv_a_proj_with_mqa`, ...), which
    an MLA model's attention is matched by: the attention stays bf16, the experts NVFP4, the KV cache fp8."""
    m = models.from_hf_config(HF / "glm-5-nvfp4")
    assert m.quantization.startswith("modelopt_fp4")
    assert "experts nvfp4" in m.quantization
    assert "attn" not in m.quantization
    assert m.kv_dtype == "fp8"
    assert m.param_bytes < 0.3 * 2 * m.num_params
    bare = models.from_hf_config(HF / "glm-5-nvfp4" / "config.json")  # (the same file, read as a folder's)
    assert bare.quantization == m.quantization


def test_a_modelopt_producer_with_an_unknown_algorithm_is_refused():
    from kvsim.model import quant

    qc = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A8_AWQ"}}
    with pytest.raises(InvalidArgumentError, match="Unknown ModelOpt quant algo"):
        quant.from_config(qc, "t")
    mixed = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION"}}
    with pytest.raises(InvalidArgumentError, match="MIXED_PRECISION"):
        quant.from_config(mixed, "t")


def test_fp8_on_a_gpu_without_its_arch_asks_for_the_arch():
    """A GPU described without `arch` was told to name the GPU it had named."""
    noarch = dataclasses.replace(gpus.get("h200"), arch="")
    with pytest.raises(InvalidArgumentError, match=r"give the GPU's arch \(sm_XY\)"):
        kvsim.SimConfig(model="deepseek-v3.2", gpu=noarch, kv_cache_dtype="fp8", tensor_parallel_size=8)


def test_fp8_spellings_are_one_layout_across_pools():
    """vLLM's fp8 is e4m3: a prefill pool of fp8_e4m3 beside decode replicas of fp8 is one layout."""
    from kvsim.engine.cluster_pd import _kv_cache_dtype

    a = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_cache_dtype="fp8")
    b = a.replace(kv_cache_dtype="fp8_e4m3")
    assert _kv_cache_dtype(a)[0] == _kv_cache_dtype(b)[0] == "fp8"


def test_the_replicated_weights_are_read_whole_by_every_rank():
    """A decode step streams a GPU's 1/tp of the dense weights but the whole of what vLLM replicates on
    every rank (the indexer, MLA's A projections, the routers: `WeightGroup.whole_bytes`; the indexer's
    fused key / weights projection, unquantized outside the groups: `other`'s `gemm_bytes`): at tp 8 the
    step's dense read is its tp-1 read over 8 plus 7/8 of the replicated bytes, about 1.9 GiB for
    DeepSeek-V3.2."""
    from kvsim.model.weights import weight_groups

    h200 = gpus.get("h200")
    v32 = models.get("deepseek-v3.2")
    groups = weight_groups(v32)
    dense = [g for name, g in groups.items() if name in ("attn", "mlp", "shared_experts", "router")]
    loose = groups["other"].gemm_bytes
    assert loose == 2 * 61 * (128 + 64) * 7168 + 2 * 61 * 2 * 128  # wk_weights_proj and k_norm, bf16
    whole = sum(g.whole_bytes for g in dense) + loose
    assert 1.7 * 2**30 < whole < 2.1 * 2**30
    mem = {}
    for tp in (1, 8):
        terms = {t.name: t.ps for t in roofline_time_model(v32, h200, tensor_parallel_size=tp).terms}
        mem[tp] = terms["dense_mem"]
    per_byte = mem[1] / (sum(g.bytes for g in dense) + loose)
    assert mem[8] == pytest.approx(mem[1] / 8 + 7 / 8 * whole * per_byte, rel=1e-6)


def test_minimax_m3_block_sparse_attention_is_refused_by_name_on_other_model_types():
    """MiniMax-M3's sparse layers keep an index key cache beside their KV (vLLM 0.33.0's
    `MiniMaxM3IndexerCache`): read for MiniMax-M3's model types (tests/test_minimax_m3.py); on another model
    type kvsim would size them as plain attention, silently: refused by name."""
    cfg = json.loads((HF / "mixtral-8x7b.json").read_text())
    sparse = {
        "use_sparse_attention": True,
        "sparse_attention_freq": [0] * 3 + [1] * 29,
        "sparse_index_dim": 128,
    }
    with pytest.raises(
        InvalidArgumentError, match=r"'sparse_attention_config'.*MiniMax-M3 only.*index key cache"
    ):
        hf_config._from_dict({**cfg, "sparse_attention_config": sparse}, "m3", "m3", "m3", None)
    off = {**sparse, "sparse_attention_freq": [0] * 32}  # no sparse layer: plain attention, as vLLM builds it
    hf_config._from_dict({**cfg, "sparse_attention_config": off}, "m3", "m3", "m3", None)


def test_hybrid_layer_pattern_is_refused_by_name_on_other_model_types():
    """MiMo-V2-Flash's `hybrid_layer_pattern` makes most layers sliding-window with their own heads (vLLM
    0.33.0's `mimo_v2.py`): read for `mimo_v2_flash` (tests/test_mimo_v2.py); on another model type kvsim
    would size every layer as full attention, silently: refused by name."""
    cfg = json.loads((HF / "mixtral-8x7b.json").read_text())
    with pytest.raises(InvalidArgumentError, match=r"'hybrid_layer_pattern'.*MiMo-V2-Flash only"):
        hf_config._from_dict({**cfg, "hybrid_layer_pattern": [0, 1] * 16}, "mimo", "mimo", "mimo", None)


# -- FlashMLA's fp8_ds_mla entries (9.x, 12.x, 10.x where FlashMLA serves the model) -----------------------------

DS_MLA = 512 + 4 * 4 + 64 * 2  # 512 fp8 NoPE values, an fp32 scale per 128 of them, 64 bf16 RoPE values


def test_an_fp8_cache_on_hopper_is_flashmlas_656_byte_entry():
    """vLLM 0.33.0 on an H200 serves an fp8 cache with FlashMLA's sparse backend (FlashAttention's takes
    bf16 only), whose cache dtype becomes fp8_ds_mla: 656 bytes a token a layer beside the indexer's 132,
    blocks of 64; the same KV memory holds 1,284 / 788 times the bf16 pool's tokens."""
    assert DS_MLA == 656
    # (0.33.0's profiled pool, whose bytes these counts are: `vllm-0.33`)
    base = dict(model="deepseek-v3.2", gpu="h200", tensor_parallel_size=8)
    fp8 = kvsim.SimConfig.preset("vllm-0.33", **base, kv_cache_dtype="fp8")
    bf16 = kvsim.SimConfig.preset("vllm-0.33", **base)
    assert fp8.kv_cache_dtype == "fp8_ds_mla"
    assert fp8.block_size == 64
    assert fp8.pool.layout.bytes_per_block == 64 * 61 * (DS_MLA + INDEX) == 3_076_352
    assert fp8.pool.kv_bytes_per_token == 61 * (DS_MLA + INDEX) == 48_068
    kv = fp8.pool.kv_cache_bytes
    assert kv == bf16.pool.kv_cache_bytes  # (the weights and activations do not change)
    assert fp8.num_blocks == kv // 3_076_352 == 14_306
    assert bf16.num_blocks == kv // (64 * 61 * (LATENT + INDEX)) == 8_779
    assert fp8.pool.figures.kv_cache_tokens == 14_306 * 64 == 915_584
    assert bf16.pool.figures.kv_cache_tokens == 561_856
    # kvsim.pool_blocks and a Model sized on its own take the same entry
    assert kvsim.pool_blocks("deepseek-v3.2", "h200", 64, kv_cache_bytes=kv, kv_dtype="fp8") == 14_306
    assert models.get("deepseek-v3.2").with_kv_dtype("fp8_ds_mla").kv_bytes_per_token == 48_068


def test_glm_5_per_40_gib():
    """GLM-5's 78 layers, each a 656-byte entry and a 132-byte indexer key: 40 GiB hold 10,918 blocks of 64
    (698,752 tokens) where its bf16 cache holds 6,700 (428,800)."""
    base = dict(
        model="glm-5", gpu="h200", tensor_parallel_size=8, quantization="fp8", kv_cache_bytes=40 * 2**30
    )
    fp8 = kvsim.SimConfig(**base, kv_cache_dtype="fp8")
    bf16 = kvsim.SimConfig(**base)
    assert fp8.pool.layout.bytes_per_block == 64 * 78 * (DS_MLA + INDEX) == 3_933_696
    assert fp8.num_blocks == 40 * 2**30 // 3_933_696 == 10_918
    assert fp8.pool.figures.kv_cache_tokens == 698_752
    assert bf16.num_blocks == 40 * 2**30 // (64 * 78 * (LATENT + INDEX)) == 6_700
    assert bf16.pool.figures.kv_cache_tokens == 428_800


@pytest.mark.parametrize(
    ("model", "arch", "kv", "stored"),
    [
        ("deepseek-v3.2", "sm_90", "fp8", "fp8_ds_mla"),
        ("deepseek-v3.2", "sm_90", "auto", "auto"),  # (FlashAttention's sparse backend: bf16)
        ("deepseek-v3.2", "sm_100", "fp8", "fp8"),  # (FlashInfer's: 576-byte fp8 entries)
        ("deepseek-v3.2", "sm_120", "auto", "fp8_ds_mla"),  # (FlashInfer's SM120 backend: auto is it too)
        ("deepseek-v3.2", "sm_120", "fp8_e4m3", "fp8_ds_mla"),
        ("deepseek-v3.2", "sm_120", "bf16", "fp8_ds_mla"),  # (its hook turns bfloat16 into auto)
        ("glm-5", "sm_120", "auto", "fp8_ds_mla"),
        ("glm-5", "sm_90", "fp8", "fp8_ds_mla"),
        ("glm-5", "sm_100", "auto", "fp8"),
    ],
)
def test_the_dtype_vllm_stores(model, arch, kv, stored):
    g = dataclasses.replace(gpus.get("b200"), arch=arch)
    cfg = kvsim.SimConfig(
        model=model, gpu=g, kv_cache_dtype=kv, tensor_parallel_size=8, max_model_len=8192, quantization="fp8"
    )
    assert cfg.kv_cache_dtype == stored
    per_layer = {"fp8_ds_mla": DS_MLA, "fp8": 576, "auto": LATENT}[stored] + INDEX
    layers = models.get(model).num_layers
    assert cfg.pool.layout.bytes_per_block == 64 * layers * per_layer
    assert cfg.block_size == 64


def test_flashmla_on_blackwell_where_flashinfer_does_not_take_the_model():
    """On 10.x FlashInfer's sparse backend, first for fp8, takes a qk_nope_head_dim of 128 or 192 only; for
    another, FlashMLA's takes fp8 as fp8_ds_mla (656 bytes)."""
    m = hf_config._from_dict({**_v32(), "qk_nope_head_dim": 64}, "t", "t", "t", None)
    cfg = kvsim.SimConfig(model=m, gpu="b200", kv_cache_dtype="fp8", tensor_parallel_size=8)
    assert cfg.kv_cache_dtype == "fp8_ds_mla"
    assert cfg.pool.layout.bytes_per_block == 64 * 61 * (DS_MLA + INDEX)


def test_the_sparse_decode_reads_656_bytes_a_top_k_entry():
    """The sparse decode reads its top-k entries as stored: 656 bytes each on an H200 with fp8 (1,152 with
    bf16, 576 with fp8 on a B200), the indexer's 132-byte keys as before; each layer's bytes over HBM."""
    h200, b200 = gpus.get("h200"), gpus.get("b200")
    v32 = models.get("deepseek-v3.2")

    def per_key(gpu, kv):
        rt = roofline_time_model(v32, gpu, tensor_parallel_size=8, kv_cache_dtype=kv)
        (topk,) = [a for a in rt.attention if a.window == 2048]
        (index,) = [a for a in rt.attention if a.window == 0]
        return topk.kv_ps, index.kv_ps, gpu.hbm_bandwidth

    fp8, idx8, hbm = per_key(h200, "fp8")
    bf16, idx16, _ = per_key(h200, None)
    assert fp8 == round(61 * 656 / hbm * 1e12) == 8_337
    assert bf16 == round(61 * 1152 / hbm * 1e12) == 14_640
    assert idx8 == idx16 == pytest.approx(61 * 132 / hbm * 1e12, abs=1)
    b_fp8, _, b_hbm = per_key(b200, "fp8")
    assert b_fp8 == round(61 * 576 / b_hbm * 1e12)
    # A decode past the top-k: 2,048 entries a layer, 1,343,488 bytes with fp8 against 2,359,296 with bf16.
    rt8 = roofline_time_model(v32, h200, tensor_parallel_size=8, kv_cache_dtype="fp8")
    rt16 = roofline_time_model(v32, h200, tensor_parallel_size=8)
    batch = [(100_000, 1)] * 64
    saved = rt16.step_ps(batch) - rt8.step_ps(batch)
    assert saved == pytest.approx(64 * 2048 * (14_640 - 8_337), rel=0.01)


def test_kvsim_run_with_an_fp8_cache_on_h200(capsys):
    from kvsim.cli import main

    argv = ["run", "--model", "deepseek-v3.2", "--gpu", "h200", "-tp", "8", "--kv-cache-dtype", "fp8"]
    argv += ["--preset", "vllm-0.33"]  # (the pool of test_an_fp8_cache_on_hopper_is_flashmlas_656_byte_entry)
    assert main([*argv, "--requests", "50"]) == 0
    out = capsys.readouterr().out
    assert "pool: 14,306 blocks × 64 tokens = 915,584 tokens = 41.0 GiB" in out
    assert "deepseek-v3.2 46.9 KiB per token, tp 8" in out  # (48,068 bytes)
    assert "vllm: GPU KV cache size: 915,584 tokens" in out
    assert "kv_cache_dtype=fp8_ds_mla (fp8 given)" in out


def test_fp8_ds_mla_is_sparse_mlas_only():
    with pytest.raises(InvalidArgumentError, match="not this model's cache layout"):
        models.get("deepseek-v3").with_kv_dtype("fp8_ds_mla")
    with pytest.raises(InvalidArgumentError, match="not a weight dtype"):
        models.get("deepseek-v3.2").with_weight_dtype("fp8_ds_mla")


def test_shardq_exchange_buffers_under_vllm_0_34():
    """vLLM 0.34.0's ShardQ buffers (`allocate_shardq_buffers`), worked by hand for DeepSeek-V3.2 (128 heads,
    a 512 + 64 latent) and GLM-5 (64 heads). On a B200 at tp 8 (16,384 tokens, 1,024 seqs; a bf16 cache on
    FlashAttention 4's sparse backend, 16 heads a GPU): q (2,048 + 2 x 1,024) x 128 x 576 x 2 B = 603,979,776,
    out 16,384 x 16 x 512 x 2 B = 268,435,456: 872,415,232 B (832 MiB). An fp8 cache there (FlashInfer's, an
    fp8 query): q 301,989,888, 570,425,344 B. An H200 (8,192 tokens): fp8 is FlashMLA's fp8_ds_mla (16 < 32
    heads, a bf16 query): q (1,024 + 2,048) x 128 x 576 x 2 = 452,984,832, out 8,192 x 16 x 512 x 2 =
    134,217,728: 587,202,560 B; its default bf16 cache runs on FlashAttention's sparse backend: none."""
    from kvsim.model.dsa import shardq_bytes

    m = models.get("deepseek-v3.2")
    assert shardq_bytes(m, "sm_100", None, 8, 16384, 1024) == 872_415_232
    assert shardq_bytes(m, "sm_100", "fp8", 8, 16384, 1024) == 570_425_344
    assert shardq_bytes(m, "sm_90", "fp8_ds_mla", 8, 8192, 1024) == 587_202_560
    assert shardq_bytes(m, "sm_90", None, 8, 8192, 1024) == 0
    # None at tp 1, on 12.x (FlashInfer's SM120 backend), on ROCm; at tp 4 a bf16 cache on 10.x goes to
    # FlashMLA's sparse backend (32 heads a GPU), which takes ShardQ only on fp8_ds_mla below 32 heads.
    assert shardq_bytes(m, "sm_100", None, 1, 16384, 1024) == 0
    assert shardq_bytes(m, "sm_120", "fp8_ds_mla", 8, 16384, 1024) == 0
    assert shardq_bytes(m, "gfx950", None, 8, 16384, 1024) == 0
    assert shardq_bytes(m, "sm_100", None, 4, 16384, 1024) == 0
    assert shardq_bytes(m, "sm_100", "fp8_ds_mla", 4, 16384, 1024) == 0
    # GLM-5 at tp 8 on a B200: fp8 on FlashInfer's (qk_nope_head_dim 192), an fp8 query: (2,048 + 2,048) x 64
    # x 576 x 1 = 150,994,944, out 16,384 x 8 x 512 x 2 = 134,217,728: 285,212,672 B.
    assert shardq_bytes(models.get("glm-5"), "sm_100", "fp8", 8, 16384, 1024) == 285_212_672
    # Not a ShardQ model: DeepSeek-V3 (MLA without an indexer).
    assert shardq_bytes(models.from_hf_config(HF / "deepseek-v3.json"), "sm_100", None, 8, 16384, 1024) == 0


def test_the_vllm_0_34_preset_loads_the_shardq_buffers():
    """`sparse_mla_shard_q`: on by default (vLLM 0.34.0, `vllm-latest` and `vllm-0.34`), off in `vllm-0.33`
    (0.33.0 has no ShardQ); DeepSeek-V3.2 at tp 8 on a B200 loads 832 MiB more a GPU with it and keeps fewer
    blocks."""
    assert kvsim.SimConfig(num_blocks=10).sparse_mla_shard_q
    assert not kvsim.SimConfig.preset("vllm-0.33", num_blocks=10).sparse_mla_shard_q
    on = kvsim.SimConfig.preset("vllm-0.34", model="deepseek-v3.2", gpu="b200", tensor_parallel_size=8)
    off = kvsim.SimConfig.preset(
        "vllm-0.34", model="deepseek-v3.2", gpu="b200", tensor_parallel_size=8, sparse_mla_shard_q=False
    )
    assert on.sparse_mla_shard_q
    assert on.pool.weight_bytes - off.pool.weight_bytes == 872_415_232
    assert on.pool.num_blocks < off.pool.num_blocks
    default = kvsim.SimConfig(model="deepseek-v3.2", gpu="b200", tensor_parallel_size=8)
    old = kvsim.SimConfig.preset("vllm-0.33", model="deepseek-v3.2", gpu="b200", tensor_parallel_size=8)
    assert default.pool.weight_bytes == on.pool.weight_bytes
    assert default.pool.weight_bytes - old.pool.weight_bytes == 872_415_232
