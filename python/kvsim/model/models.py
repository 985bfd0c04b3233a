"""Model presets: the architecture numbers that decide KV bytes per token and weight bytes (SPEC §2).

KV bytes per token = `coef · num_layers · kv_width · dtype_bytes`, where `coef = 2` (a K and a V vector)
and `kv_width = num_kv_heads · head_dim` for multi-head, grouped-query and multi-query attention (the
KV heads, not the attention heads), and `coef = 1`, `kv_width = kv_lora_rank + qk_rope_head_dim` for
multi-head latent attention (DeepSeek-V2/V3 cache one compressed latent plus the decoupled RoPE key per
layer). The KV dtype may differ from the weights' (fp8 KV cache): `with_kv_dtype("fp8")`.

Parameter counts are the published totals (Hugging Face safetensors metadata) for Llama, Mistral and
Qwen, which the test-suite re-derives from the architecture fields below; OPT's are derived from its
config the same way (learned positions, biases, tied embeddings); DeepSeek-V3's is its README's 671B
main-model total, of which 37B are active per token (`num_active_params`, used for FLOPs).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.encoders import Tower
from kvsim.model.hf_layers import layers_from_hf_config
from kvsim.model.layers import FULL, Layer

# Bits per element, so sub-byte formats (int4 weights) stay exact in integer arithmetic.
DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "fp16": 16,
    "bf16": 16,
    "fp8": 8,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "int8": 8,
    "int4": 4,
    "fp4": 4,
}


def dtype_bits(dtype: str) -> int:
    """Bits per element of `dtype` (a key of `DTYPE_BITS`).

    Raises:
        InvalidArgumentError: an unknown dtype, naming the known ones.
    """
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise InvalidArgumentError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BITS)}") from None


@dataclass(frozen=True)
class Model:
    """One transformer's memory-relevant architecture.

    Attributes:
        name: preset name (lower case, dashed).
        num_layers: decoder layers.
        hidden_size: model width.
        num_attention_heads: query heads.
        num_kv_heads: key/value heads (fewer than query heads under GQA/MQA).
        head_dim: width of one head.
        intermediate_size: MLP width (dense layers).
        vocab_size: embedding rows.
        num_params: total parameters (what the weights occupy).
        num_active_params: parameters touched per token (differs from `num_params` for MoE).
        max_model_len: default context length of the published config.
        weight_dtype: dtype of the weights as served.
        kv_dtype: dtype of the KV cache.
        kv_lora_rank: MLA latent width (0 for non-MLA models).
        qk_rope_head_dim: MLA decoupled RoPE key width (0 for non-MLA models).
        source: where the numbers come from.
        layers: each decoder layer's cache (`kvsim.model.layers.Layer`: full attention, sliding window,
            chunked local, Mamba state, shared); empty: `num_layers` full-attention layers.
        weight_bytes: bytes the weights take as vLLM loads them, scales and zero points included
            (`kvsim.model.quant`); 0: `num_params` x `weight_dtype`.
        quantization: vLLM's quantization method of the weights (`""`: none), with what it quantizes.
        num_experts, experts_per_token, expert_ffn: the routed experts (0 for a dense model).
        config_json: the Hugging Face config fields the model was built from (JSON), so that
            `with_quantization` can price them again; empty for the 2024 presets.
        encoders: the checkpoint's other towers vLLM loads and profiles beside the language model
            (`vision`, `audio`: its config's `vision_config` / `audio_config`).
        towers: those of them kvsim counts (`kvsim.model.encoders.Tower`, in bytes: the parameters
            tensor parallelism splits and those every GPU holds whole, in the checkpoint's dtype).
        uncounted: why each of the others is not counted (`vision: kvsim does not count ...`).
        rope_cache_bytes: the rotary embeddings' cos/sin caches vLLM builds at load (every GPU holds
            them whole; `kvsim.model.rope`).
        row_inputs: each module group's row-parallel input widths, with the group size of the
            quantization whose kernels need whole groups on every rank (AWQ, compressed-tensors' int
            groups; 0 for none): what tensor parallelism must divide (`kvsim.model.sizing`); empty for the
            2024 presets.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_params: int
    num_active_params: int
    max_model_len: int
    weight_dtype: str = "fp16"
    kv_dtype: str = "fp16"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    source: str = ""
    layers: tuple[Layer, ...] = ()
    weight_bytes: int = 0
    quantization: str = ""
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    config_json: str = dataclasses.field(default="", compare=False, repr=False)
    row_inputs: tuple[tuple[str, int, int], ...] = dataclasses.field(default=(), compare=False, repr=False)
    encoders: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    towers: tuple[Tower, ...] = dataclasses.field(default=(), compare=False, repr=False)
    uncounted: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    rope_cache_bytes: int = dataclasses.field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        dtype_bits(self.weight_dtype)
        dtype_bits(self.kv_dtype)
        if self.layers and len(self.layers) != self.num_layers:
            raise InvalidArgumentError(
                f"model {self.name}: {len(self.layers)} layer specs for {self.num_layers} layers"
            )
        for field in ("num_layers", "num_kv_heads", "head_dim", "num_params", "num_active_params"):
            if getattr(self, field) < 1:
                raise InvalidArgumentError(f"{field} {getattr(self, field)} must be at least 1")

    @property
    def is_mla(self) -> bool:
        """Whether the model caches an MLA latent instead of per-head K and V."""
        return self.kv_lora_rank > 0

    def layer_list(self) -> tuple[Layer, ...]:
        """Every decoder layer's cache (`num_layers` full-attention layers when `layers` is empty)."""
        return self.layers or (FULL,) * self.num_layers

    @property
    def is_hybrid(self) -> bool:
        """Whether some layer keeps other than full attention (sliding window, chunked, state, shared)."""
        return any(layer.kind != "full" for layer in self.layers)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token occupies across all layers if every attention layer kept it (the
        full-attention count; a hybrid model's pool is sized by `kvsim.model.layers.kv_layout`)."""
        if self.is_mla:
            # One latent per token in each attention layer (Kimi-Linear's KDA layers keep a state instead).
            attention = sum(lay.kind != "mamba" and lay.kind != "shared" for lay in self.layer_list())
            bits = attention * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bits(self.kv_dtype)
            return -(-bits // 8)
        bits = 0
        dsv4 = Fraction(0)
        for layer in self.layer_list():
            if layer.kind == "deepseek_v4":
                # Every cache keeping every token (fp8_ds_mla; DESIGN.md §Hybrid attention): the latent
                # entry, the compressed one per `ratio` tokens, the indexer's key per 4 tokens (ratio 4).
                # Counted in bits per `ratio` tokens, exactly; rounded up once at the end.
                r, idx = max(1, layer.compress_ratio), layer.index_head_dim
                dsv4 += Fraction(584 * 8 * (r + 1), r) if r > 1 else 584 * 8
                dsv4 += Fraction((idx + idx // 128 * 4) * 8, 4) if r == 4 else 0
            if layer.kind in ("full", "sliding_window", "chunked_local"):
                heads = layer.num_kv_heads or self.num_kv_heads
                bits += 2 * heads * (layer.head_dim or self.head_dim) * dtype_bits(self.kv_dtype)
        return -(-(bits + math.ceil(dsv4)) // 8)

    @property
    def quant_method(self) -> str:
        """vLLM's quantization method of the weights (`quantization`'s name before its colon; `""`: none)."""
        return self.quantization.split(":")[0]

    @property
    def model_type(self) -> str:
        """The config's `model_type` (`""` for the 2024 presets, which keep no config fields)."""
        try:
            kept = json.loads(self.config_json) if self.config_json else {}
        except ValueError:
            return ""
        return str(kept.get("model_type", ""))

    @property
    def param_bytes(self) -> int:
        """Bytes the weights occupy as vLLM loads them: `weight_bytes` when known (quantized checkpoints,
        scales included), else parameter count x weight dtype size."""
        if self.weight_bytes:
            return self.weight_bytes
        return -(-self.num_params * dtype_bits(self.weight_dtype) // 8)

    @property
    def loaded_bytes(self) -> int:
        """Bytes vLLM's "Model loading took X GiB" counts (the weights memory it keeps out of the KV
        cache): the language model's weights (`param_bytes`), the towers it counts (`towers`) and the
        rotary caches (`rope_cache_bytes`). Of a model `kvsim.model.shard.shard` split, one GPU's."""
        return self.param_bytes + sum(t.total for t in self.towers) + self.rope_cache_bytes

    def with_kv_dtype(self, kv_dtype: str) -> Model:
        """The same model with its KV cache stored as `kv_dtype` (e.g. `"fp8"`; vLLM's and Hugging Face's
        spellings such as `"bfloat16"` are taken too)."""
        kv_dtype = _HF_DTYPES.get(kv_dtype, kv_dtype)
        dtype_bits(kv_dtype)
        return dataclasses.replace(self, kv_dtype=kv_dtype)

    def with_weight_dtype(self, weight_dtype: str) -> Model:
        """The same model with its weights stored as `weight_dtype` (e.g. `"int4"`)."""
        dtype_bits(weight_dtype)
        return dataclasses.replace(self, weight_dtype=weight_dtype, weight_bytes=0, quantization="")

    def with_quantization(self, quantization: str | None) -> Model:
        """The same model loaded with vLLM's `--quantization` (`fp8` quantizes an unquantized model's linear
        layers at load time; another value must name the checkpoint's own method). None: unchanged.

        Raises:
            InvalidArgumentError: a value vLLM would refuse for this checkpoint, or a model without its
                config fields (the 2024 presets: give their config.json).
        """
        if quantization is None:
            return self
        if not self.config_json:
            raise InvalidArgumentError(
                f"quantization {quantization!r}: model {self.name} keeps no config.json fields to quantize; give "
                "its config.json (or a catalogue preset)"
            )
        import json

        rebuilt = _from_dict(json.loads(self.config_json), self.name, self.source, self.source, quantization)
        return dataclasses.replace(
            rebuilt,
            layers=self.layers,
            encoders=self.encoders,
            towers=self.towers,
            uncounted=self.uncounted,
            rope_cache_bytes=self.rope_cache_bytes,
        )


def _dense(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    params: int,
    max_len: int,
    source: str,
    dtype: str = "fp16",
) -> Model:
    from kvsim.model import rope

    # (OPT's positions are learned weights; the others rotate their whole heads, `default` RoPE)
    rope_bytes = (
        0 if name.startswith("opt") else rope.default_bytes(max_len, hidden // heads, dtype_bits(dtype))
    )
    return Model(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate_size=ffn,
        vocab_size=vocab,
        num_params=params,
        num_active_params=params,
        max_model_len=max_len,
        weight_dtype=dtype,
        kv_dtype=dtype,
        source=source,
        rope_cache_bytes=rope_bytes,
    )


_HF = "https://huggingface.co/{}/blob/main/config.json"

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        # facebook/opt-13b config.json: 40 layers, d 5120, 40 heads, ffn 20480, vocab 50272, 2048 positions.
        _dense(
            "opt-13b", 40, 5120, 40, 40, 20480, 50272, 12_853_473_280, 2048, _HF.format("facebook/opt-13b")
        ),
        # facebook/opt-66b config.json: 64 layers, d 9216, 72 heads, ffn 36864.
        _dense(
            "opt-66b", 64, 9216, 72, 72, 36864, 50272, 65_719_701_504, 2048, _HF.format("facebook/opt-66b")
        ),
        # OPT paper (Zhang et al. 2022, arXiv 2205.01068) Table 1: 96 layers, 96 heads, d 12288.
        _dense(
            "opt-175b", 96, 12288, 96, 96, 49152, 50272, 174_604_468_224, 2048, "arXiv:2205.01068 Table 1"
        ),
        # meta-llama/Llama-2-7b-hf config.json: 32 layers, d 4096, 32 heads (no GQA), ffn 11008.
        _dense(
            "llama-2-7b",
            32,
            4096,
            32,
            32,
            11008,
            32000,
            6_738_415_616,
            4096,
            _HF.format("meta-llama/Llama-2-7b-hf"),
        ),
        # meta-llama/Llama-2-13b-hf config.json: 40 layers, d 5120, 40 heads, ffn 13824.
        _dense(
            "llama-2-13b",
            40,
            5120,
            40,
            40,
            13824,
            32000,
            13_015_864_320,
            4096,
            _HF.format("meta-llama/Llama-2-13b-hf"),
        ),
        # meta-llama/Llama-2-70b-hf config.json: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 28672.
        _dense(
            "llama-2-70b",
            80,
            8192,
            64,
            8,
            28672,
            32000,
            68_976_648_192,
            4096,
            _HF.format("meta-llama/Llama-2-70b-hf"),
        ),
        # meta-llama/Meta-Llama-3-8B config.json: 32 layers, d 4096, 32 heads, 8 KV heads, vocab 128256.
        _dense(
            "llama-3-8b",
            32,
            4096,
            32,
            8,
            14336,
            128256,
            8_030_261_248,
            8192,
            _HF.format("meta-llama/Meta-Llama-3-8B"),
            "bf16",
        ),
        # meta-llama/Meta-Llama-3-70B config.json: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 28672.
        _dense(
            "llama-3-70b",
            80,
            8192,
            64,
            8,
            28672,
            128256,
            70_553_706_496,
            8192,
            _HF.format("meta-llama/Meta-Llama-3-70B"),
            "bf16",
        ),
        # mistralai/Mistral-7B-v0.1 config.json: 32 layers, d 4096, 32 heads, 8 KV heads, ffn 14336, and
        # "sliding_window": 4096 with no layer_types: vLLM gives every layer that window (its
        # CacheConfig.sliding_window, vllm/engine/arg_utils.py), one sliding-window group.
        dataclasses.replace(
            _dense(
                "mistral-7b",
                32,
                4096,
                32,
                8,
                14336,
                32000,
                7_241_732_096,
                32768,
                _HF.format("mistralai/Mistral-7B-v0.1"),
                "bf16",
            ),
            layers=(Layer("sliding_window", 4096),) * 32,
        ),
        # Qwen/Qwen2.5-7B-Instruct config.json: 28 layers, d 3584, 28 heads, 4 KV heads, ffn 18944, vocab
        # 152064, 32,768 positions (the base Qwen/Qwen2.5-7B's says 131,072; this preset holds the Instruct's).
        _dense(
            "qwen2.5-7b",
            28,
            3584,
            28,
            4,
            18944,
            152064,
            7_615_616_512,
            32768,
            _HF.format("Qwen/Qwen2.5-7B-Instruct"),
            "bf16",
        ),
        # Qwen/Qwen2.5-72B-Instruct config.json: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 29568, 32,768
        # positions (the base model's: 131,072).
        _dense(
            "qwen2.5-72b",
            80,
            8192,
            64,
            8,
            29568,
            152064,
            72_706_203_648,
            32768,
            _HF.format("Qwen/Qwen2.5-72B-Instruct"),
            "bf16",
        ),
        # deepseek-ai/DeepSeek-V3 config.json: 61 layers, d 7168, 128 heads, MLA kv_lora_rank 512 +
        # qk_rope_head_dim 64; README: 671B total / 37B active (MTP module excluded), fp8 weights, bf16 KV.
        Model(
            name="deepseek-v3",
            num_layers=61,
            hidden_size=7168,
            num_attention_heads=128,
            num_kv_heads=128,
            head_dim=128,
            intermediate_size=18432,
            vocab_size=129280,
            num_params=671_000_000_000,
            num_active_params=37_000_000_000,
            max_model_len=163840,
            weight_dtype="fp8",
            kv_dtype="bf16",
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            source=_HF.format("deepseek-ai/DeepSeek-V3"),
            # (YaRN, 4,096 original positions × 40, of the 64 rotated features, in bf16: kvsim.model.rope)
            rope_cache_bytes=4096 * 40 * 64 * 2,
        ),
    )
}


def names() -> list[str]:
    """The preset names, sorted."""
    return sorted(MODELS)


def get(name: str) -> Model:
    """The preset called `name` (lower case, dashed: `opt-13b`, `llama-3.1-8b`, `gpt-oss-120b`, ...; any
    case, and `-instruct` names of the catalogue's models, resolve too).

    Raises:
        InvalidArgumentError: an unknown name; the message lists the known ones.
    """
    found = MODELS.get(name) or _preset(name)
    if found is None:
        raise InvalidArgumentError(f"unknown model {name!r}; known: {', '.join(names())}")
    return found


_HF_DTYPES = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}
_HF_CACHE: dict[tuple[str, float, str | None, str | None], Model] = {}


def hf_cache_dir() -> Path:
    """Where the Hugging Face hub keeps downloaded repositories: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub` (huggingface_hub's own order)."""
    import os

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _is_hub_id(text: str) -> bool:
    """`org/name` as the Hugging Face hub spells a repository (one slash, no path-like parts)."""
    import re

    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) is not None and ".." not in text


def cached_config(repo_id: str) -> Path | None:
    """The `config.json` of hub repository `repo_id` in the local Hugging Face cache, or None: the snapshot
    `refs/main` names, else the most recent snapshot holding one. Nothing is downloaded."""
    repo = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text().strip()
    except OSError:
        ref = ""
    if ref and (snapshots / ref / "config.json").is_file():
        return snapshots / ref / "config.json"
    try:
        found = [d / "config.json" for d in snapshots.iterdir() if (d / "config.json").is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _preset(name: str) -> Model | None:
    """The preset called `name`, case-insensitively, or through an alias (`llama-3.1-8b-instruct`)."""
    from kvsim.model.catalogue import ALIASES

    low = name.lower()
    low = ALIASES.get(low, low)
    return MODELS.get(low)


def resolve(model: Model | str) -> Model:
    """A `Model` from a `Model`, a preset name (any case; `-instruct` names resolve to their preset), a path
    to a Hugging Face `config.json` (or its folder), or a Hugging Face id (`org/name`) read from the local
    Hugging Face cache (`hf_cache_dir`; nothing is downloaded; when it is not there, the preset its last
    part names, lower-cased).

    Raises:
        InvalidArgumentError: an unknown name (the known ones and where the cache was looked for), or a
            config file that cannot be read or lacks a field.
    """
    if isinstance(model, Model):
        return model
    if not isinstance(model, str):
        raise InvalidArgumentError(f"model {model!r} must be a preset name, a config.json path or a Model")
    if model in MODELS:
        return MODELS[model]
    if not model.strip():
        raise InvalidArgumentError(f"model {model!r} is empty; known: {', '.join(names())}")
    preset = _preset(model)
    if preset is not None:
        return preset
    path = Path(model)
    if model.endswith(".json") or path.exists():
        return from_hf_config(path)
    if _is_hub_id(model):
        cached = cached_config(model)
        if cached is not None:
            return from_hf_config(cached, name=model)
        preset = _preset(model.rsplit("/", 1)[1])
        if preset is not None:
            return preset
    import difflib

    from kvsim.model.catalogue import ALIASES

    spellings = {**{n: n for n in names()}, **ALIASES}
    close = difflib.get_close_matches(model.lower().rsplit("/", 1)[-1], list(spellings), n=3, cutoff=0.75)
    close = list(dict.fromkeys(spellings[c] for c in close))
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    where = ""
    if _is_hub_id(model):
        repo = hf_cache_dir() / ("models--" + model.replace("/", "--"))
        where = (
            f": not in the Hugging Face cache (looked for {repo}/snapshots/*/config.json; set HF_HOME or "
            "HF_HUB_CACHE, or download it with huggingface-cli); kvsim downloads nothing"
        )
    raise InvalidArgumentError(
        f"unknown model {model!r}{hint}{where}; known: {', '.join(names())}; or the path of a Hugging Face "
        "config.json (or its folder)"
    )


def from_hf_config(path: str | Path, name: str | None = None, quantization: str | None = None) -> Model:
    """A `Model` from a Hugging Face `config.json` (a file, or a folder holding one).

    Read: `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads` (default: the
    attention heads; `multi_query` gives 1), `head_dim` (default hidden / heads), `intermediate_size`
    (`ffn_dim` for OPT), `vocab_size`, `max_position_embeddings`, `torch_dtype` (or `dtype`), MLA's
    `kv_lora_rank` + `qk_rope_head_dim` (DeepSeek-V2/V3), and `quantization_config` (`kvsim.model.quant`:
    fp8, MXFP4, NVFP4, AWQ, GPTQ, compressed-tensors). The parameter count is not in a config: it is
    derived from these fields (`kvsim.model.params`: embeddings, tied or not; attention projections, MLA's
    low-rank ones included; a gated MLP for Llama-like models, two matrices for OPT/GPT; mixture-of-experts
    layers from `n_routed_experts` / `num_local_experts` / `num_experts`, `moe_intermediate_size`, shared
    experts, `first_k_dense_replace`, `decoder_sparse_step`, `moe_layers`; active parameters from
    `num_experts_per_tok`). A multimodal config's `text_config` is read (the vision tower is not counted).
    The model's name is `name`, else the path. `quantization` is vLLM's `--quantization`.

    Raises:
        InvalidArgumentError: naming the file and the missing, invalid or unmodelled field.
    """
    import json

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        stamp = p.stat().st_mtime
    except OSError as exc:
        raise InvalidArgumentError(f"model {str(path)!r}: cannot read {p}: {exc.strerror}") from None
    key = (str(p), stamp, name, quantization)
    if key in _HF_CACHE:
        return _HF_CACHE[key]
    try:
        cfg = json.loads(p.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgumentError(f"model {str(path)!r}: {p} is not a JSON config: {exc}") from None
    if not isinstance(cfg, dict):
        raise InvalidArgumentError(f"model {str(path)!r}: {p} does not hold a JSON object")
    model = _from_dict(cfg, name or str(path), str(path), str(p), quantization)
    _HF_CACHE[key] = model
    return model


# The config.json fields a Model is built from (kept in `Model.config_json` so it can be priced again).
_KEPT_FIELDS = (
    "model_type",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "hidden_size",
    "n_embd",
    "d_model",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "n_head_kv",
    "multi_query",
    "head_dim",
    "intermediate_size",
    "ffn_dim",
    "n_inner",
    "intermediate_size_mlp",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "seq_length",
    "torch_dtype",
    "dtype",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "q_lora_rank",
    "qk_nope_head_dim",
    "v_head_dim",
    "tie_word_embeddings",
    "attention_bias",
    "n_routed_experts",
    "num_local_experts",
    "num_experts",
    "moe_intermediate_size",
    "n_shared_experts",
    "num_shared_experts",
    "shared_expert_intermediate_size",
    "num_experts_per_tok",
    "experts_per_token",
    "num_experts_per_token",
    "model_max_length",
    "linear_attn_config",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "interleave_moe_layer_step",
    "moe_layers",
    "moe_layer_freq",
    "mlp_only_layers",
    "topk_method",
    "quantization_config",
    # The layers' kinds and state shapes (`layers_from_hf_config`, `params._gated_delta_net`).
    "layer_types",
    "sliding_window",
    "sliding_window_pattern",
    "attention_chunk_size",
    "no_rope_layers",
    "use_sliding_window",
    "max_window_layers",
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "attn_output_gate",
    "mamba_ssm_dtype",
    "attn_type_list",
    "compress_ratios",
    # Gemma 4 (`hf_layers._gemma4_layers`, `params._gemma4`).
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_k_eq_v",
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",
    "vocab_size_per_layer_input",
    "use_double_wide_mlp",
    "expert_intermediate_size",
    "top_k_experts",
    # DeepSeek-V4 (`hf_layers._deepseek_v4_layers`, `params._deepseek_v4`, `quant.deepseek_v4`).
    "o_groups",
    "o_lora_rank",
    "index_n_heads",
    "index_head_dim",
    "hc_mult",
    "num_hash_layers",
    "expert_dtype",
)


# RoPE types whose `factor` vLLM does not apply to the derived context (YaRN variants and Llama 3's leave
# `max_position_embeddings` already scaled; `vllm/config/model.py` `_get_and_verify_max_len`, 0.33.0).
_ROPE_UNSCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def _rope_scaled(cfg: dict[str, Any], max_len: int, where: str) -> int:
    """The context vLLM 0.33.0 derives from `max_len` and the config's RoPE scaling (`rope_scaling`, or
    transformers 5's `rope_parameters`, a dict or one per layer type): times the scaling factor of a type
    other than `_ROPE_UNSCALED` (`linear`, `dynamic`; not for Gemma 3, whose context is already scaled); a
    LongRoPE model's default context is its `original_max_position_embeddings`."""
    rope = cfg.get("rope_parameters", cfg.get("rope_scaling"))
    if rope is None:
        return max_len
    if not isinstance(rope, dict):
        raise InvalidArgumentError(f"model {where!r}: field 'rope_scaling' {rope!r} must be an object")
    nested = rope and all(isinstance(v, dict) for v in rope.values())
    params = [p for p in rope.values() if p] if nested else ([rope] if rope else [])
    factor: Any = 1.0
    for p in params:
        kind = p.get("rope_type", p.get("type", "default"))
        if not isinstance(kind, str):
            raise InvalidArgumentError(
                f"model {where!r}: field 'rope_scaling.rope_type' {kind!r} must be a name"
            )
        if kind == "longrope":
            original = cfg.get("original_max_position_embeddings", max_len)
            if isinstance(original, bool) or not isinstance(original, int) or original < 1:
                raise InvalidArgumentError(
                    f"model {where!r}: field 'original_max_position_embeddings' {original!r} must be a whole "
                    "number of at least 1"
                )
            return original
        if kind not in _ROPE_UNSCALED:
            factor = p.get("factor", factor)
    if factor is None:
        factor = 1.0  # (vLLM falls back to 1 for a null factor)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 0 or factor > 2**20:
        raise InvalidArgumentError(
            f"model {where!r}: field 'rope_scaling.factor' {factor!r} must be a positive number"
        )
    if "gemma3" in str(cfg.get("model_type", "")):
        return max_len
    return max(1, int(max_len * factor))


def _from_dict(cfg: dict[str, Any], name: str, where: str, source: str, quantization: str | None) -> Model:
    """The `Model` of config fields `cfg` (see `from_hf_config`); `where` names it in errors."""
    import json

    from kvsim.model import quant
    from kvsim.model.params import param_breakdown
    from kvsim.model.rope import cache_bytes as rope_cache_bytes

    path = where
    p = source
    encoders = tuple(e for e in ("vision", "audio") if isinstance(cfg.get(f"{e}_config"), dict))
    wrapper = cfg
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the language model inside
        cfg = {**cfg, **cfg["text_config"]}

    def pick(*keys: str, default: Any = None, required: bool = True, least: int = 0) -> Any:
        for k in keys:
            if cfg.get(k) is not None:
                v = cfg[k]
                if isinstance(v, bool) or not isinstance(v, int) or v < least:
                    at_least = f" of at least {least}" if least else ""
                    raise InvalidArgumentError(
                        f"model {str(path)!r}: field {k!r} {v!r} must be a whole number{at_least}"
                    )
                return v
        if required and default is None:
            raise InvalidArgumentError(f"model {str(path)!r}: {p} has no {' / '.join(map(repr, keys))}")
        return default

    layers = pick("num_hidden_layers", "n_layer", "num_layers")
    hidden = pick("hidden_size", "n_embd", "d_model")
    heads = pick("num_attention_heads", "n_head")
    if heads < 1 or layers < 1 or hidden < 1:
        raise InvalidArgumentError(f"model {str(path)!r}: layers, hidden size and heads must be at least 1")
    kv_heads = pick("num_key_value_heads", "n_head_kv", default=1 if cfg.get("multi_query") else heads)
    head_dim = pick("head_dim", default=hidden // heads)
    # (a context, a vocabulary or an MLP of 0 is no model: its context divided the concurrency figure)
    ffn = pick("intermediate_size", "ffn_dim", "n_inner", default=4 * hidden, least=1)
    vocab = pick("vocab_size", least=1)
    # vLLM derives the context from these keys (the smallest of those present, `model_max_length` among
    # them); kvsim takes the first present. Kimi-Linear's config states only `model_max_length`.
    max_len = pick(
        "max_position_embeddings", "n_positions", "seq_length", "model_max_length", default=2048, least=1
    )
    max_len = _rope_scaled(cfg, max_len, str(path))
    # (a latent of 0 is no MLA: it ran as ordinary attention; a null one is no MLA, as vLLM reads it)
    kv_lora = pick("kv_lora_rank", default=0, required=False, least=1)
    rope = pick("qk_rope_head_dim", default=0, required=False)
    if not kv_lora and (kv_heads < 1 or heads % kv_heads):
        # Grouped-query attention shares each KV head among heads / kv_heads query heads (transformers
        # and vLLM refuse any other ratio).
        raise InvalidArgumentError(
            f"model {str(path)!r}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}"
        )
    # Without a dtype vLLM reads the weights' (safetensors metadata), else takes float32, which it serves
    # in bfloat16 (`get_torch_dtype`, `_resolve_auto_dtype`); kvsim reads no weights: bfloat16, two bytes as
    # any 16-bit checkpoint's (gpt-oss's config names none).
    raw_dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if raw_dtype not in _HF_DTYPES:
        raise InvalidArgumentError(
            f"model {str(path)!r}: torch_dtype {raw_dtype!r} is not one of {sorted(_HF_DTYPES)}"
        )
    dtype = _HF_DTYPES[raw_dtype]
    if dtype == "fp32":
        # vLLM 0.33.0 serves a float32 checkpoint in the platform's first supported dtype with `--dtype
        # auto` (`vllm/config/model.py` `_resolve_auto_dtype`, "Downcast for float32 models"): bfloat16 on
        # CUDA GPUs of compute capability 8.0 and up and on ROCm, float16 before (the same two bytes).
        dtype = "bf16"
    towers, uncounted = _towers(wrapper, encoders, hidden, dtype_bits(dtype))
    rope_bytes = rope_cache_bytes(cfg, head_dim, dtype_bits(dtype), str(path))
    checkpoint = quant.from_config(cfg.get("quantization_config"), f"model {str(path)!r}")
    if cfg.get("model_type") == "deepseek_v4" and checkpoint.method == "fp8":
        checkpoint = quant.deepseek_v4(checkpoint, cfg, f"model {str(path)!r}")
    q = quant.with_flag(checkpoint, quantization, f"model {str(path)!r}")
    # The layers first: their reader checks the fields the weights' reader counts too.
    model_layers = layers_from_hf_config(cfg, layers, str(path))
    b = param_breakdown(
        cfg, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, kv_lora, rope, pick, str(path)
    )
    quant.check_groups(q, b, cfg.get("quantization_config"), f"model {str(path)!r}")
    weight_dtype = dtype
    if q.method:
        # The dtype of the quantized layers; the rest stay in torch_dtype (weight_bytes has the exact sum).
        first = next(iter(q.formats.values()), None)
        kind = first.kind if first else ""
        weight_dtype = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4"}.get(kind, "int4")
        if kind == "int" and first is not None and first.bits == 8:
            weight_dtype = "int8"
    model = Model(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=ffn,
        vocab_size=vocab,
        num_params=b.total,
        num_active_params=b.active,
        max_model_len=max_len,
        weight_dtype=weight_dtype,
        # The KV cache stays in torch_dtype whatever the weights' quantization, unless the checkpoint
        # quantizes it too (vLLM's --kv-cache-dtype auto then resolves to fp8).
        kv_dtype="fp8" if q.kv_fp8 else dtype,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        source=str(p),
        layers=model_layers,
        weight_bytes=q.weight_bytes(b, dtype_bits(dtype)),
        quantization=q.describe() if q.method else "",
        num_experts=b.num_experts,
        experts_per_token=b.experts_per_token,
        expert_ffn=b.expert_ffn,
        config_json=json.dumps({k: cfg[k] for k in _KEPT_FIELDS if k in cfg}, sort_keys=True),
        row_inputs=tuple((g, cols, quant.shard_group(q, g)) for g, cols in b.row_inputs()),
        encoders=encoders,
        towers=towers,
        uncounted=uncounted,
        rope_cache_bytes=rope_bytes,
    )
    return model


def _towers(
    wrapper: dict[str, Any], encoders: tuple[str, ...], text_hidden: int, bits: int
) -> tuple[tuple[Tower, ...], tuple[str, ...]]:
    """The towers of `wrapper`'s `encoders` kvsim counts, priced at `bits` a parameter (the checkpoint's
    dtype, in which vLLM loads them), and why each of the others is not counted."""
    import dataclasses as dc

    from kvsim.model.encoders import Uncounted, tower

    counted, why = [], []
    for name in encoders:
        try:
            t = tower(wrapper, name, text_hidden)
        except Uncounted as exc:
            why.append(f"{name}: {exc}")
            continue
        counted.append(dc.replace(t, split=t.split * bits // 8, whole=t.whole * bits // 8))
    return tuple(counted), tuple(why)


def _add_catalogue() -> None:
    """The 2025-2026 presets (`kvsim.model.catalogue`), built from their config fields."""
    from kvsim.model.catalogue import presets

    MODELS.update(presets())


_add_catalogue()

__all__ = [
    "DTYPE_BITS",
    "MODELS",
    "Model",
    "cached_config",
    "dtype_bits",
    "from_hf_config",
    "get",
    "hf_cache_dir",
    "names",
    "resolve",
]
