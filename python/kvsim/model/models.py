"""Model presets: the architecture numbers that decide KV bytes per token and weight bytes (SPEC §2).

Parameter counts are the published totals (Hugging Face safetensors metadata) for Llama, Mistral and
Qwen, which the test-suite re-derives from the architecture fields below; OPT's are derived from its
config the same way (learned positions, biases, tied embeddings). DeepSeek-V3 (and R1) is the catalogue's
(`kvsim.model.catalogue`), built from its config.json fields like the other mixture-of-experts presets. The `Model`
type is `kvsim.model.architecture`'s, reading a `config.json` `kvsim.model.hf_config`'s; both are
re-exported here, their documented path.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kvsim.errors import InvalidArgumentError
from kvsim.model.architecture import DTYPE_BITS, Model, dtype_bits
from kvsim.model.hf_config import (
    _from_dict,
    _is_hub_id,
    cached_config,
    from_hf_config,
    hf_cache_dir,
)
from kvsim.model.layers import Layer
from kvsim.model.releases import LATEST


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


def _preset(name: str) -> Model | None:
    """The preset called `name`, case-insensitively, or through an alias (`llama-3.1-8b-instruct`)."""
    from kvsim.model.catalogue import ALIASES

    low = name.lower()
    low = ALIASES.get(low, low)
    return MODELS.get(low)


def model_label(given: Model | str | None, name: str) -> str:
    """The model as the pool and time lines name it: the preset's own name `name`, or where `given` is
    an alias of it the alias, with the architecture it shares ("deepseek-r1 (deepseek-v3 architecture)":
    `config:` said model=deepseek-r1 while those lines said deepseek-v3, newcomer46)."""
    from kvsim.model.catalogue import ALIASES

    if isinstance(given, str) and ALIASES.get(given.lower()) == name:
        return f"{given.lower()} ({name} architecture)"
    return name


def resolve(model: Model | str, release: str = LATEST) -> Model:
    """A `Model` from a `Model`, a preset name (any case; `-instruct` names resolve to their preset), a path
    to a Hugging Face `config.json` (or its folder), or a Hugging Face id (`org/name`) read from the local
    Hugging Face cache (`hf_cache_dir`; nothing is downloaded; when it is not there, the preset its last
    part names, lower-cased). A config is read as vLLM `release` reads it (`from_hf_config`; the presets'
    configs hold no field the releases read differently).

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
        return from_hf_config(path, release=release)
    if _is_hub_id(model):
        cached = cached_config(model)
        if cached is not None:
            return from_hf_config(cached, name=model, release=release)
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


def under_release(model: Model | str, release: str) -> Model | str:
    """`model` with vLLM `release`'s reading of it settled, for `resolve` and every function that takes a
    model: a `Model`, or a name of a preset (or of its alias), as given (no preset's config holds a field the
    releases read differently, and an alias keeps its label: `model_label`); a config path or a Hugging Face
    id read as `release` reads it (`resolve`, whose cache of read configs keys on the release). The one way
    a `SimConfig` reads its model (`SimConfig.release_model`).

    Raises:
        InvalidArgumentError: as `resolve`; a config field that `release` refuses (ModelOpt's
            `weight_scale_encoding` before 0.34.0, MiniMax-M3's legacy sparse fields before 0.34.0), by name.
    """
    if isinstance(model, Model) or (
        isinstance(model, str) and (model in MODELS or _preset(model) is not None)
    ):
        return model
    return resolve(model, release=release)


def with_quantization(model: Model, quantization: str | None) -> Model:
    """`model` loaded with vLLM's `--quantization` (`fp8` quantizes an unquantized model's linear layers
    at load time; another value must name the checkpoint's own method), rebuilt from its config fields
    by the reader (`kvsim.model.hf_config`). None: unchanged.

    Raises:
        InvalidArgumentError: a value vLLM would refuse for this checkpoint, or a model without its
            config fields (the 2024 presets: give their config.json; the presets made from one named).
    """
    if quantization is None:
        return model
    if not model.config_json:
        family = model.name.split("-")[0]
        built = [n for n in names() if n.startswith(family) and get(n).config_json]
        raise InvalidArgumentError(
            f"quantization {quantization!r}: model {model.name} is one of the 2024 presets made from parameter "
            "counts, without the config.json fields vLLM's quantization reads; give its config.json"
            + (f", or a preset made from one ({', '.join(built)})" if built else "")
        )
    # (errors name the model as given, a preset's name rather than its config's address)
    rebuilt = _from_dict(
        json.loads(model.config_json), model.name, model.name, model.source, quantization, model.release
    )
    return dataclasses.replace(
        rebuilt,
        layers=model.layers,
        encoders=model.encoders,
        towers=model.towers,
        uncounted=model.uncounted,
        rope_cache_bytes=model.rope_cache_bytes,
    )


def _add_catalogue() -> None:
    """The 2025-2026 presets (`kvsim.model.catalogue`), built from their config fields."""
    from kvsim.model.catalogue import presets

    MODELS.update(presets())


_add_catalogue()


def transformers_backend_note(model: object) -> str | None:
    """`kvsim run`'s note for a config.json (a path, or a Hugging Face id in the local cache) whose architecture
    vLLM 0.34.0 would serve with its Transformers backend (`served.transformers_backend`), else None."""
    import json

    from kvsim.model import served

    if not isinstance(model, str):
        return None
    path: Path | None = Path(model)
    assert path is not None
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        path = cached_config(model) if _is_hub_id(model) else None
    if path is None or not path.is_file():
        return None
    try:
        cfg = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None  # (the model was read: `from_hf_config` refused what it could not)
    arch = served.transformers_backend(cfg) if isinstance(cfg, dict) else None
    if arch is None:
        return None
    return (
        f"model {model}: vLLM 0.34.0's registry has no {arch} (vllm/model_executor/models/registry.py), so "
        f"vLLM serves it with its Transformers backend (transformers' {arch} class, `_try_resolve_transformers`; "
        "it refuses a class that is not backend-compatible, which kvsim cannot tell from the config): kvsim "
        "sizes it from the config's fields as a decoder of vLLM's own, not the Transformers backend's memory "
        "or speed"
    )


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
    "transformers_backend_note",
    "under_release",
    "with_quantization",
]
