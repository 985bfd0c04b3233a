"""MiniMax-M3's block-sparse attention (DESIGN.md §Defaults and sizing, "MiniMax-M3"; vLLM 0.33.0's
`vllm/models/minimax_m3/`): the index key cache beside the K and V of its sparse layers, one KV-cache group,
blocks of 128 tokens, the index projections' weights, the config fields vLLM refuses or builds otherwise
refused by name, and the roofline's top-k block reads.

The fixture `tests/data/hf/minimax-m3.json` (tests/data/hf/README.md): 60 layers, 64 heads and 4 KV heads of
128, hidden 6144; `sparse_attention_config`: layers 3-59 sparse (`sparse_attention_freq` 0, 0, 0, then 1),
`sparse_num_index_heads` 4, `sparse_index_dim` 128, `sparse_topk_blocks` 16, `sparse_block_size` 128."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, hf_config
from kvsim.model.layers import kv_layout
from kvsim.model.timing import roofline_time_model

HF = Path(__file__).parent / "data" / "hf"
KV = 2 * 128 * 2  # one KV head's K and V of 128, bf16: 512 bytes a token
INDEX = 128 * 2  # one index key of 128 bf16 values a token (MiniMaxM3IndexerCache), whatever the KV dtype


def _cfg() -> dict:
    return json.loads((HF / "minimax-m3.json").read_text())


# NVIDIA's MiniMax-M3 releases' wrapper, as vLLM 0.34.0 serves the model (`served.MINIMAX_M3_SERVED`): the
# fixture (the text config MiniMaxAI publishes, which vLLM does not serve as is: tests/test_served.py) is its
# `text_config`.
WRAPPER = {"model_type": "minimax_m3_vl", "architectures": ["MiniMaxM3SparseForConditionalGeneration"]}


def wrapped(cfg: dict) -> dict:
    """`cfg` (a MiniMax-M3 text config) as the `text_config` of the wrapper vLLM serves; a config with its
    own `text_config`, or without `architectures`, as it is."""
    return cfg if "text_config" in cfg or "architectures" not in cfg else {**WRAPPER, "text_config": cfg}


def wrapped_path(tmp_path: Path) -> Path:
    """The fixture wrapped (`wrapped`), written to a config.json under `tmp_path`."""
    path = tmp_path / "minimax-m3-vl" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(wrapped(_cfg())))
    return path


def _model(cfg: dict | None = None, release: str = "0.34.0"):
    return hf_config._from_dict(wrapped(cfg or _cfg()), "m3", "m3", "m3", None, release)


def _with_sparse(**fields) -> dict:
    cfg = copy.deepcopy(_cfg())
    cfg["sparse_attention_config"].update(fields)
    return cfg


def test_57_sparse_layers_keep_an_index_key_beside_k_and_v():
    """60 layers: layers 0-2 dense (4 KV heads x (K 128 + V 128), bf16: 2,048 B a token), layers 3-59 sparse
    with the same K and V and a 128-value bf16 index key (256 B): 60 x 2,048 + 57 x 256 = 137,472 B a token
    on one GPU; at tp 8 a GPU keeps one KV head (4 heads replicated over 8) and the whole index key:
    60 x 512 + 57 x 256 = 45,312 B, in one group of 128-token blocks of 128 x 45,312 = 5,799,936 B."""
    m = _model()
    assert m.is_dsa
    assert not m.is_hybrid
    assert [bool(lay.index_head_dim) for lay in m.layers] == [False] * 3 + [True] * 57
    assert {(lay.index_head_dim, lay.index_heads) for lay in m.layers[3:]} == {(128, 4)}
    assert m.kv_bytes_per_token == 60 * 4 * KV + 57 * INDEX == 137_472
    layout = kv_layout(m, 128, tensor_parallel_size=8)
    assert len(layout.groups) == 1
    assert layout.groups[0].kind == "full"
    assert layout.bytes_per_block == 128 * (60 * KV + 57 * INDEX) == 5_799_936
    # fp8 K and V (1 byte a value); the index key stays bf16: 128 x (60 x 256 + 57 x 256)
    assert kv_layout(m, 128, tensor_parallel_size=8, kv_bits=8).bytes_per_block == 128 * 117 * 256


def test_b200_tp8_takes_128_token_blocks_and_the_index_in_every_block(tmp_path):
    """vLLM 0.33.0 picks 128-token blocks for it (its sparse attention and indexer backends' only kernel
    block) and keeps the KV dtype auto (bf16); the pool's blocks are its bytes over 5,799,936."""
    path = wrapped_path(tmp_path)
    cfg = kvsim.SimConfig(model=str(path), gpu="b200", tensor_parallel_size=8, max_model_len=32768)
    assert cfg.block_size == 128
    assert cfg.kv_cache_dtype == "auto"
    assert cfg.pool.layout.bytes_per_block == 5_799_936
    assert cfg.pool.pool_bytes == cfg.num_blocks * 5_799_936
    fp8 = cfg.replace(kv_cache_dtype="fp8")
    assert fp8.pool.layout.bytes_per_block == 128 * 117 * 256
    assert kvsim.SimConfig(model=str(path), num_blocks=1000, tensor_parallel_size=8).block_size == 128
    assert cfg.replace(block_size=256).pool.layout.bytes_per_block == 2 * 5_799_936
    with pytest.raises(InvalidArgumentError, match="not a multiple of 128"):
        cfg.replace(block_size=64)
    with pytest.raises(InvalidArgumentError, match="supported_kv_cache_dtypes"):
        cfg.replace(kv_cache_dtype="fp16")
    with pytest.raises(InvalidArgumentError, match="not a multiple of 128"):
        kvsim.pool_blocks(_model(), None, 16, kv_cache_bytes=10**11)
    blocks = kvsim.pool_blocks(_model(), None, 128, kv_cache_bytes=10**11)
    assert blocks == 10**11 // (128 * 137_472)


def test_v0_rules_refused_as_for_every_sparse_model():
    with pytest.raises(InvalidArgumentError, match=r"only vLLM v1 serves, so preemption 'auto'"):
        kvsim.SimConfig.preset("vllm-v0", model=_model(), gpu="b200", tensor_parallel_size=8)


def test_the_multimodal_wrapper_reads_the_same_layers():
    """NVIDIA's MiniMax-M3-NVFP4 names the model `minimax_m3_vl` (vLLM's MiniMaxM3Config, the language
    model in `text_config`): the same layers and bytes."""
    text = {k: v for k, v in _cfg().items() if k not in ("model_type", "architectures")}
    wrapper = {"model_type": "minimax_m3_vl", "text_config": text}
    m = _model(wrapper)
    assert m.layers == _model().layers
    assert m.kv_bytes_per_token == 137_472


def test_the_index_projections_weights():
    """Each sparse layer's qkv_proj also projects index_q (4 heads x 128 rows over 6144) and index_k (one
    head of 128 rows, whole on every rank), and two norms of 128 (whole): 57 x (512 + 128) x 6144 +
    57 x 2 x 128 = 224,147,712 parameters more than the same model without sparse layers, bf16; at tp 8 every
    GPU holds index_k and the norms whole: 57 x 128 x 6144 x 2 + 57 x 256 x 2 = 89,682,432 bytes."""
    from kvsim.model.shard import replicated

    m = _model()
    dense = _model(_with_sparse(sparse_attention_freq=[0] * 60))
    assert dense.layers == ()
    assert not dense.is_dsa
    assert m.num_params - dense.num_params == 57 * 640 * 6144 + 57 * 256 == 224_147_712
    assert m.param_bytes - dense.param_bytes == 2 * 224_147_712
    assert replicated(m)[0] - replicated(dense)[0] == 57 * 128 * 6144 * 2 + 57 * 256 * 2 == 89_682_432


def test_sparse_layers_read_their_top_k_blocks_and_every_index_key():
    """A query of a sparse layer attends 16 blocks of 128 tokens (2,048 keys: a window, as DeepSeek-V3.2's
    top-k); its indexer reads every key's 256-byte index key. Past 2,048 tokens a longer context costs the
    3 dense layers' K and V and 57 index keys a token: (3 x 512 + 57 x 256) / (60 x 512) of the dense
    model's growth."""
    b200 = gpus.get("b200")
    m = _model()
    dense = dataclasses.replace(m, layers=())
    sparse = roofline_time_model(m, b200, tensor_parallel_size=8)
    plain = roofline_time_model(dense, b200, tensor_parallel_size=8)
    assert {(a.kind, a.window, a.layers) for a in sparse.attention} == {(0, 0, 3 + 57), (1, 2048, 57)}
    long_ctx = [(100_000, 1)] * 64
    grow = sparse.step_ps([(200_000, 1)] * 64) - sparse.step_ps(long_ctx)
    grow_plain = plain.step_ps([(200_000, 1)] * 64) - plain.step_ps(long_ctx)
    assert grow == pytest.approx(grow_plain * (3 * 512 + 57 * 256) / (60 * 512), rel=0.01)
    short = [(1024, 1)] * 64
    assert sparse.step_ps(short) > plain.step_ps(short)  # (the index keys on top of the same K and V)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sparse_num_index_heads": 8}, r"total_num_index_heads == total_num_kv_heads"),
        ({"sparse_index_dim": 64}, r"heads of 128 only"),
        ({"sparse_block_size": 64}, r"SPARSE_BLOCK_SIZE"),
        ({"sparse_attention_freq": [0] * 3 + [1] * 56}, r"must list the 60 layers"),
        ({"sparse_topk_blocks": 0}, r"sparse_topk_blocks' 0 must be a whole number of at least 1"),
        ({"sparse_local_block": -1}, r"sparse_local_block' -1 must be a whole number"),
    ],
)
def test_what_vllm_refuses_or_builds_otherwise_is_refused_by_name(fields, message):
    for release in ("0.34.0", "0.33.0"):
        with pytest.raises(InvalidArgumentError, match=message):
            _model(_with_sparse(**fields), release)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sparse_score_type": "mean"}, r"sparse_score_type' 'mean'.*\"max\" only"),
        ({"sparse_disable_index_value": [0] * 60}, r"index value"),
        ({"sparse_disable_index_value": "all"}, r"sparse_disable_index_value' must list the 60 layers"),
        (
            {"sparse_init_block": -1},
            r"sparse_init_block' -1 must be a whole number.*0\.34\.0's reads no such",
        ),
    ],
)
def test_the_legacy_fields_0_34_0_drops_are_refused_under_0_33_0_only(fields, message):
    """vLLM 0.33.0's MiniMax-M3 reads `sparse_score_type`, `sparse_init_block` and
    `sparse_disable_index_value` from `sparse_attention_config` (`nvidia/model.py`; its indexer kernels
    implement "max" only and it builds no index value on any sparse layer: refused as built otherwise than
    the config says). vLLM 0.34.0 reads the config through transformers' `MiniMaxM3VLTextConfig`, whose
    `__post_init__` drops them (`dsa.MINIMAX_M3_UNREAD`): the same model whatever they say, so under
    release 0.34.0 (the default) they are not refused."""
    with pytest.raises(InvalidArgumentError, match=message):
        _model(_with_sparse(**fields), "0.33.0")
    m = _model()
    for release in ("0.34.0", "0.34", "0.35.1"):
        same = _model(_with_sparse(**fields), release)
        assert same.layers == m.layers
        assert same.num_params == m.num_params
        assert same.kv_bytes_per_token == m.kv_bytes_per_token == 137_472
    default = hf_config._from_dict(wrapped(_with_sparse(**fields)), "m3", "m3", "m3", None)
    assert default.kv_bytes_per_token == 137_472
    with pytest.raises(InvalidArgumentError, match=r"release 'vllm-0.34' is not a vLLM release number"):
        _model(_with_sparse(**fields), "vllm-0.34")


def test_no_sparse_config_is_refused_and_other_fields_still_are():
    """vLLM's MiniMaxM3TextConfig would put the preview checkpoint's sparse layers in place of a missing
    `sparse_attention_config`: refused, not guessed. `index_topk` (DeepSeek's) is refused here as on any
    model type but DeepSeek-V3.2's and GLM-5's."""
    cfg = _cfg()
    del cfg["sparse_attention_config"]
    with pytest.raises(InvalidArgumentError, match=r"without a 'sparse_attention_config'"):
        _model(cfg, "0.33.0")
    with pytest.raises(InvalidArgumentError, match=r"'index_topk'"):
        _model({**_cfg(), "index_topk": 2048})
    # (a 'layer_types' is transformers 5's schema, read as vLLM 0.34.0 reads it: test_transformers_5_schema)
    with pytest.raises(InvalidArgumentError, match=r"'layer_types' must list the 60 layers"):
        _model({**_cfg(), "layer_types": ["sliding_attention"] * 60})
    with pytest.raises(InvalidArgumentError, match=r"'sliding_window'"):
        _model({**_cfg(), "sliding_window": 4096})
    # No KV heads: MiniMaxM3TextConfig's default (4) is not guessed (the message named "the None KV heads")
    no_kv = {k: v for k, v in _cfg().items() if k != "num_key_value_heads"}
    with pytest.raises(InvalidArgumentError, match=r"without 'num_key_value_heads'.*give the field"):
        _model(no_kv)


def test_the_dense_layers_mlp_is_dense_intermediate_size_wide():
    """vLLM 0.33.0 builds the 3 dense layers' MLP `dense_intermediate_size` (12,288) wide, not the experts'
    `intermediate_size` (3,072) kvsim counted: 3 x 3 x 6,144 x (12,288 - 3,072) = 509,607,936 parameters;
    the router's score-correction bias under `use_routing_bias` (128 a MoE layer, 57 layers) and the
    per-head q / k norms (2 x 128 a layer, 60 layers) are counted too."""
    m = _model()
    narrow = _model({**_cfg(), "dense_intermediate_size": 3072})
    assert m.num_params - narrow.num_params == 3 * 3 * 6144 * (12288 - 3072) == 509_607_936
    unbiased = _model({**_cfg(), "use_routing_bias": False})
    assert m.num_params - unbiased.num_params == 57 * 128
    # 60 layers: embeddings and lm_head (2 x 200,064 x 6,144); attention q, k, v, o (64 x 128 and 2 x 4 x 128
    # rows over 6,144, o 6,144 x 8,192) and q / k norms; the 57 sparse layers' index projections and norms;
    # 3 dense MLPs (3 x 6,144 x 12,288); 57 MoE layers of 128 experts and a shared one of 3 x 6,144 x 3,072,
    # a router (128 x 6,144) and its bias; two norms a layer and the final one.
    attention = 60 * ((64 * 128 + 2 * 4 * 128) * 6144 + 6144 * 64 * 128 + 2 * 128)
    index = 57 * ((4 * 128 + 128) * 6144 + 2 * 128)
    moe = 57 * ((128 + 1) * 3 * 6144 * 3072 + 128 * 6144 + 128)
    total = 2 * 200064 * 6144 + attention + index + 3 * 3 * 6144 * 12288 + moe + 2 * 6144 * 60 + 6144
    assert m.num_params == total == 426_174_572_928


def test_the_moe_fields_read_as_vllm_reads_them():
    """vLLM 0.33.0's MiniMaxM3MoE builds its experts and shared expert `intermediate_size` wide (no
    `moe_intermediate_size`), `n_shared_experts` (1), `num_local_experts` (128), `num_experts_per_tok` (4)
    and `use_routing_bias` (true) taking MiniMaxM3TextConfig's defaults when absent; `_is_moe_layer` reads
    `moe_layer_freq` by layer and no `first_k_dense_replace`. kvsim read `moe_intermediate_size`, took no
    shared expert, no experts, one expert a token and no router bias when those were absent, and a
    `use_routing_bias` of 1 or "false" as no bias, silently."""
    m = _model()
    # the experts' width is intermediate_size's: a moe_intermediate_size vLLM does not read changes nothing
    assert _model({**_cfg(), "moe_intermediate_size": 1536}).num_params == m.num_params
    narrow = _model({**_cfg(), "intermediate_size": 1536})
    assert m.num_params - narrow.num_params == 57 * (128 + 1) * 3 * 6144 * (3072 - 1536)
    for key in ("n_shared_experts", "num_local_experts", "num_experts_per_tok", "use_routing_bias"):
        absent = _model({k: v for k, v in _cfg().items() if k != key})
        assert absent.num_params == m.num_params, key
        assert absent.num_active_params == m.num_active_params, key
    for bad in (1, 0, "false", None):
        with pytest.raises(InvalidArgumentError, match="'use_routing_bias'"):
            _model({**_cfg(), "use_routing_bias": bad})
    no_freq = {k: v for k, v in _cfg().items() if k != "moe_layer_freq"}
    with pytest.raises(InvalidArgumentError, match="without 'moe_layer_freq'"):
        _model(no_freq, "0.33.0")
    for bad in (1, [1] * 59, "1"):
        with pytest.raises(InvalidArgumentError, match="'moe_layer_freq'"):
            _model({**_cfg(), "moe_layer_freq": bad})
    # first_k_dense_replace is not read: the list says which layers are dense
    assert _model({**_cfg(), "first_k_dense_replace": 5}).num_params == m.num_params


@pytest.mark.parametrize("freq", [5, 1.5, True])
def test_a_malformed_sparse_config_on_another_model_type_is_refused_by_name(freq):
    """`sparse_attention_config` on a model type other than MiniMax-M3's: a `sparse_attention_freq` that is not
    a list (a number) raised a bare TypeError."""
    cfg = json.loads((HF / "minimax-m2.json").read_text())
    cfg["sparse_attention_config"] = {"sparse_attention_freq": freq}  # (MiniMax-M2: served as it is)
    with pytest.raises(InvalidArgumentError, match="'sparse_attention_config'"):
        hf_config._from_dict(cfg, "m2", "m2", "m2", None)


def _transformers_5(cfg: dict) -> dict:
    """`cfg` as transformers 5's `MiniMaxM3VLTextConfig` saves it: `layer_types`, `mlp_layer_types` and the
    flat `index_*` fields in place of `sparse_attention_config` and `moe_layer_freq`."""
    out = {k: v for k, v in cfg.items() if k not in ("sparse_attention_config", "moe_layer_freq")}
    sparse = cfg["sparse_attention_config"]
    out["model_type"] = "minimax_m3_vl_text"
    out["layer_types"] = [
        "minimax_m3_sparse" if f else "full_attention" for f in sparse["sparse_attention_freq"]
    ]
    out["mlp_layer_types"] = ["sparse" if f else "dense" for f in cfg["moe_layer_freq"]]
    out["index_n_heads"] = sparse["sparse_num_index_heads"]
    out["index_head_dim"] = sparse["sparse_index_dim"]
    out["index_block_size"] = sparse["sparse_block_size"]
    out["index_topk_blocks"] = sparse["sparse_topk_blocks"]
    out["index_local_blocks"] = sparse.get("sparse_local_block", 1)
    return out


def test_transformers_5_schema_reads_as_the_legacy_one():
    """vLLM 0.34.0 reads MiniMax-M3 through transformers' `MiniMaxM3VLTextConfig` (model_type
    `minimax_m3_vl_text`): the same checkpoint in its schema is the same model, 137,472 B a token (60 x 2,048
    + 57 x 256) and 426,174,572,928 parameters, where kvsim refused 'layer_types' by name. The wrapper's text
    config of that type is read too."""
    legacy = _model()
    new = _model(_transformers_5(_cfg()))
    assert new.kv_bytes_per_token == legacy.kv_bytes_per_token == 137_472
    assert new.num_params == legacy.num_params == 426_174_572_928
    assert new.layers == legacy.layers
    wrapped = _model({"model_type": "minimax_m3_vl", "text_config": _transformers_5(_cfg())})
    assert wrapped.kv_bytes_per_token == 137_472
    # transformers' class defaults where a field is absent: the index fields (4 heads, 128 wide, 16 top-k
    # blocks) as the fixture's; no layer kinds at all: every layer full attention (60 x 2,048 = 122,880 B a
    # token) and every MLP a MoE block (the 3 dense MLPs, 3 x 3 x 6,144 x 12,288, become MoE blocks of 128
    # experts and a shared one, 129 x 3 x 6,144 x 3,072, with a router of 128 x 6,144 and its 128 biases).
    bare = {k: v for k, v in _transformers_5(_cfg()).items() if not k.startswith(("index_", "layer_types"))}
    bare = {k: v for k, v in bare.items() if k != "mlp_layer_types"}
    m = _model(bare)
    assert m.kv_bytes_per_token == 60 * 4 * KV == 122_880
    assert not m.is_dsa
    dense, moe = 3 * 6144 * 12288, 129 * 3 * 6144 * 3072 + 128 * 6144 + 128
    index = 57 * ((4 * 128 + 128) * 6144 + 2 * 128)
    assert m.num_params == legacy.num_params - index + 3 * (moe - dense)
    defaults = {k: v for k, v in _transformers_5(_cfg()).items() if not k.startswith("index_")}
    assert _model(defaults).kv_bytes_per_token == 137_472


def test_transformers_5_schema_against_the_legacy_fields_as_transformers_resolves_them():
    """`MiniMaxM3VLTextConfig.__post_init__`: `mlp_layer_types` and `layer_types` win over `moe_layer_freq`
    and `sparse_attention_freq` (kvsim read `moe_layer_freq`, silently); a legacy `sparse_attention_config`
    index key wins over its flat field. Lengths are checked against `num_hidden_layers`."""
    legacy = _model()
    # Layers 0-2 MoE by mlp_layer_types, dense by moe_layer_freq: 3 MoE blocks in place of 3 dense MLPs.
    mixed = {**_cfg(), "mlp_layer_types": ["sparse"] * 60}
    dense, moe = 3 * 6144 * 12288, 129 * 3 * 6144 * 3072 + 128 * 6144 + 128
    assert _model(mixed).num_params == legacy.num_params + 3 * (moe - dense)
    # layer_types with 10 sparse layers against sparse_attention_freq's 57: 10 index keys (60 x 2,048 + 10 x 256).
    ten = {**_cfg(), "layer_types": ["full_attention"] * 50 + ["minimax_m3_sparse"] * 10}
    assert _model(ten).kv_bytes_per_token == 60 * 2048 + 10 * 256
    # sparse_attention_config's 16 top-k blocks win over a flat 32: the top-k buffer is 16 blocks' (8,192
    # tokens x 4 heads x 16 x 4 B at tp 1).
    from kvsim.model.dsa import topk_indices_bytes

    flat = _model({**_cfg(), "index_topk_blocks": 32})
    assert topk_indices_bytes(flat, 8192, 1) == topk_indices_bytes(legacy, 8192, 1) == 8192 * 4 * 16 * 4
    only_flat = _transformers_5(_cfg()) | {"index_topk_blocks": 32}
    assert topk_indices_bytes(_model(only_flat), 8192, 1) == 8192 * 4 * 32 * 4
    for key, bad in (
        ("layer_types", ["full_attention"] * 59),
        ("mlp_layer_types", ["sparse"] * 61),
        ("mlp_layer_types", ["moe"] * 60),
        ("layer_types", "full_attention"),
    ):
        with pytest.raises(InvalidArgumentError, match=rf"field '{key}' must list the 60 layers"):
            _model({**_transformers_5(_cfg()), key: bad})


def test_the_legacy_schemas_missing_fields_are_read_under_0_34_0_and_refused_under_0_33_0():
    """Without `sparse_attention_config` or `moe_layer_freq` (and no transformers 5 field) vLLM 0.33.0 and
    0.34.0 build different models. 0.33.0's MiniMaxM3TextConfig puts the preview checkpoint's in place of
    the missing field (not guessed: refused, the message naming both releases' defaults); 0.34.0 reads the
    config through transformers' MiniMaxM3VLTextConfig, whose defaults make every layer full attention
    (`layer_types`) and every MLP a MoE block (`mlp_layer_types`): the model transformers 5's schema with
    those lists gives."""
    no_sparse = {k: v for k, v in _cfg().items() if k != "sparse_attention_config"}
    no_moe = {k: v for k, v in _cfg().items() if k != "moe_layer_freq"}
    for older in ("0.33.0", "0.22.1"):
        with pytest.raises(
            InvalidArgumentError, match=r"0\.33\.0's MiniMaxM3TextConfig .* 0\.34\.0's.* full attention"
        ):
            _model(no_sparse, older)
        with pytest.raises(InvalidArgumentError, match=r"0\.34\.0's.* every layer MoE"):
            _model(no_moe, older)
    full, dense_free = _model(no_sparse), _model(no_moe)
    # every layer full attention: 60 layers of K and V, no index key (4 KV heads x 256 x bf16 = 2,048 B)
    assert not full.is_dsa
    assert full.kv_bytes_per_token == 60 * 2_048
    # as the new schema says it in so many words (the sparse layers' index keys kept in `no_moe`)
    assert (
        full.kv_bytes_per_token
        == _model({**no_sparse, "layer_types": ["full_attention"] * 60}).kv_bytes_per_token
    )
    assert full.num_params == _model({**no_sparse, "layer_types": ["full_attention"] * 60}).num_params
    assert dense_free.num_params == _model({**no_moe, "mlp_layer_types": ["sparse"] * 60}).num_params
    assert dense_free.num_params > _model().num_params  # (3 dense layers became MoE)
    assert dense_free.kv_bytes_per_token == _model().kv_bytes_per_token == 137_472
