"""Whether vLLM 0.34.0 serves a config.json's architecture (DESIGN.md §Errors).

vLLM resolves `architectures` in `ModelRegistry.resolve_model_cls` (`vllm/model_executor/models/registry.py`):
an architecture in its registry (`_VLLM_MODELS`), or one whose suffix swapped for another of
`vllm/config/model.py`'s `_SUFFIX_TO_DEFAULTS` is (`_normalize_arch`: `FooModel` as `FooForCausalLM`), loads; else
with `model_impl` "auto" it falls back to its Transformers backend (`_try_resolve_transformers`), which takes
the first architecture where transformers has that class (`getattr(transformers, arch)`) or the config's
`auto_map` names an `AutoModel` (remote code); else `_raise_for_unsupported` raises "Model architectures [...]
are not supported for now". Before that, transformers' AutoConfig refuses a `model_type` it does not know
unless vLLM has a config class of its own for it (`_CONFIG_REGISTRY`, `vllm/transformers_utils/config.py`).

The names are data (`names/*.txt`, written by `scripts/served_names.py` from vLLM 0.34.0's and transformers
5.22.2's sources). Departures: a config without `architectures` (the catalogue's, whose names are their
checkpoints') is not checked; a Transformers-backend class is taken as compatible (vLLM also asks
`is_backend_compatible()`, which is code, not a name); transformers' classes are those its auto mappings name.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import MINIMAX_M3_TYPES

NAMES = Path(__file__).with_name("names")
# vLLM 0.34.0's `_SUFFIX_TO_DEFAULTS` (vllm/config/model.py), in its order: `_normalize_arch` swaps the first
# that ends the name for each of them in turn.
SUFFIXES = (
    "ForCausalLM",
    "ForConditionalGeneration",
    "ChatModel",
    "LMHeadModel",
    "ForTextEncoding",
    "EmbeddingModel",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForAudioClassification",
    "ForImageClassification",
    "ForVideoClassification",
    "ClassificationModel",
    "ForRewardModeling",
    "RewardModel",
    "Model",
)


# How vLLM 0.34.0 serves MiniMax-M3 (`MINIMAX_M3_TYPES`), said where a MiniMax-M3 config is refused: its
# registry has `MiniMaxM3SparseForConditionalGeneration` (the `minimax_m3_vl` wrapper, vLLM's config class
# `MiniMaxM3VLConfig`, the text model in `text_config`) and `MiniMaxM3SparseForCausalLM` (the text model under
# transformers' `minimax_m3_vl_text`); not the text config MiniMaxAI publishes (`minimax_m3`,
# `MiniMaxM3ForCausalLM`, tests/data/hf/minimax-m3.json), a model_type neither transformers 5.22.2 nor vLLM
# reads and an architecture its registry does not list.
MINIMAX_M3_SERVED = (
    "vLLM 0.34.0 serves MiniMax-M3 as model_type 'minimax_m3_vl' with architectures "
    "['MiniMaxM3SparseForConditionalGeneration'] and this config as its text_config (NVIDIA's MiniMax-M3 "
    "releases), or as model_type 'minimax_m3_vl_text' with ['MiniMaxM3SparseForCausalLM']"
)


@cache
def names(file: str) -> frozenset[str]:
    """The names of `names/<file>` (one a line; `#` lines are its source)."""
    lines = (NAMES / file).read_text().splitlines()
    return frozenset(x.strip() for x in lines if x.strip() and not x.startswith("#"))


def in_registry(arch: str) -> bool:
    """Whether vLLM 0.34.0's registry loads `arch`, as is or with its suffix swapped (`_normalize_arch`)."""
    registry = names("vllm_architectures.txt")
    if arch in registry:
        return True
    suffix = next((s for s in SUFFIXES if arch.endswith(s)), None)
    if suffix is None:
        return False
    stem = arch[: len(arch) - len(suffix)]
    return any(stem + other in registry for other in SUFFIXES)


def known_model_type(kind: str) -> bool:
    """Whether transformers 5.22.2's AutoConfig or vLLM 0.34.0's own config classes read `model_type` `kind`."""
    return kind in names("transformers_model_types.txt") or kind in names("vllm_config_types.txt")


def unserved(cfg: dict[str, Any]) -> str | None:
    """Why vLLM 0.34.0 does not load the config `cfg` (its top-level `architectures` and `model_type`, as vLLM
    reads them), or None where it does, or where kvsim cannot tell (no `architectures`; an `auto_map` naming an
    `AutoModel`: the repository's own code)."""
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return None
    if any(in_registry(a) for a in archs):
        return None
    auto_map = cfg.get("auto_map")
    if isinstance(auto_map, dict) and any(str(k).startswith("AutoModel") for k in auto_map):
        return None
    kind = cfg.get("model_type")
    kind_known = isinstance(kind, str) and known_model_type(kind)
    if kind_known and archs[0] in names("transformers_model_classes.txt"):
        return None  # (vLLM's Transformers backend: `transformers_backend_note` says so)
    said = f"architectures {archs}"
    if not kind_known:
        why = (
            f"and transformers 5.22.2 does not know its model_type {kind!r} (nor has vLLM a config class for it), "
            "so AutoConfig cannot read it"
            if isinstance(kind, str)
            else "and the config has no model_type for transformers' AutoConfig"
        )
    else:
        why = f"and transformers 5.22.2 has no class {archs[0]} for vLLM's Transformers backend"
    hint = (
        MINIMAX_M3_SERVED
        if isinstance(kind, str) and kind.lower() in MINIMAX_M3_TYPES
        else "use an architecture vLLM lists, e.g. LlamaForCausalLM with model_type 'llama' for a Llama-like model"
    )
    return (
        f"{said}: vLLM 0.34.0 does not serve them: its model registry has none of them "
        f'(vllm/model_executor/models/registry.py), {why}; vllm serve stops with "Model architectures '
        f'{archs} are not supported for now" (kvsim sizes models as vLLM serves them: {hint})'
    )


def transformers_backend(cfg: dict[str, Any]) -> str | None:
    """The architecture vLLM 0.34.0 would serve with its Transformers backend (no registry entry; a transformers
    class of that name and a model_type transformers knows), else None."""
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return None
    if any(in_registry(a) for a in archs) or unserved(cfg) is not None:
        return None
    return archs[0] if archs[0] in names("transformers_model_classes.txt") else None


# Architectures without attention layers, which kvsim refuses by name (their configs have no attention heads):
# RWKV, which vLLM 0.33.0 does not serve (`vllm/model_executor/models/registry.py` lists no RWKV architecture),
# and the pure state-space models it does serve (`MambaForCausalLM`, `Mamba2ForCausalLM`,
# `FalconMambaForCausalLM`), whose pool kvsim does not model: it models Mamba layers beside attention layers.
_RWKV_TYPES = ("rwkv",)
_PURE_SSM_TYPES = ("mamba", "mamba2", "falcon_mamba")
_PURE_SSM_ARCHS = ("MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM")


def _names(cfg: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """The `model_type`s of `cfg` (the config's and its `text_config`'s: field name and value, lower case)
    and its `architectures`, each field checked: a `model_type` must be a name, `architectures` a list of
    names (or null)."""
    kinds: list[tuple[str, str]] = []
    archs: list[str] = []
    for prefix, part in (("", cfg), ("text_config.", cfg.get("text_config"))):
        if not isinstance(part, dict):
            continue
        kind = part.get("model_type")
        if kind is not None and not isinstance(kind, str):
            raise InvalidArgumentError(f"field '{prefix}model_type' {kind!r} must be a name (a string)")
        if kind:
            kinds.append((f"{prefix}model_type", kind.lower()))
        given = part.get("architectures")
        if given is not None and (not isinstance(given, list) or not all(isinstance(a, str) for a in given)):
            raise InvalidArgumentError(f"field '{prefix}architectures' {given!r} must be a list of names")
        archs += given or []
    return kinds, archs


def _attention_free(cfg: dict[str, Any]) -> str | None:
    """Why kvsim refuses a config of an attention-free architecture (by a `model_type` or an `architectures`
    name, the config's own or its `text_config`'s), or None.

    Raises:
        InvalidArgumentError: a `model_type` that is no string, or `architectures` that is no list of them.
    """
    kinds, archs = _names(cfg)

    def said(kind_hit: Any, arch_hit: Any) -> str:
        field, kind = next((k for k in kinds if kind_hit(k[1])), kinds[0] if kinds else ("", ""))
        arch = next((a for a in archs if arch_hit(a)), archs[0] if archs else kind)
        return f"{arch} ({field} {kind!r})" if kind else arch

    rwkv = (lambda k: k.startswith(_RWKV_TYPES), lambda a: a.lower().startswith("rwkv"))
    if any(rwkv[0](k) for _, k in kinds) or any(rwkv[1](a) for a in archs):
        return (
            f"{said(*rwkv)} is an RWKV model, which vLLM 0.33.0 and 0.34.0 do not serve (their model registries has no RWKV "
            "architecture): kvsim sizes models as vLLM serves them"
        )
    ssm = (lambda k: k in _PURE_SSM_TYPES, lambda a: a in _PURE_SSM_ARCHS)
    if any(ssm[0](k) for _, k in kinds) or any(ssm[1](a) for a in archs):
        return (
            f"{said(*ssm)} is a state-space model without attention layers: kvsim models Mamba layers only "
            "beside attention layers (a hybrid model: Jamba, Nemotron-H, Granite 4.0-H)"
        )
    return None


def refusal(cfg: dict[str, Any]) -> str | None:
    """Why kvsim refuses config `cfg` by its names: an attention-free architecture (`_attention_free`), or one
    vLLM 0.34.0 does not serve (`unserved`); None otherwise.

    Raises:
        InvalidArgumentError: a `model_type` that is no string, or `architectures` that is no list of them.
    """
    return _attention_free(cfg) or unserved(cfg)


def transformers_sparse_refusal(wrapper: dict[str, Any], cfg: dict[str, Any]) -> str | None:
    """Why kvsim refuses a MiniMax-M3 config (`MINIMAX_M3_TYPES`) with sparse layers that vLLM 0.34.0 would serve
    with its Transformers backend (`transformers_backend`: `MiniMaxM3VLForCausalLM`, transformers' class for
    model_type `minimax_m3_vl_text`, which its registry does not list; it lists `MiniMaxM3SparseForCausalLM`),
    else None. `wrapper` is the config as given, `cfg` its language model read into the legacy fields
    (`dsa.minimax_m3_schema`). vLLM 0.34.0 then runs transformers' `MiniMaxM3VLAttention` through its own
    attention function (`vllm_attention_forward`, `model_executor/models/transformers/__init__.py`), which
    takes the indexer's `block_indices` among its ignored keyword arguments, and calls the model with
    `use_cache=False` (`transformers/base.py`), so no index key is kept: every layer attends to every token,
    and the sparse layers are not served as MiniMax-M3's sparse attention, which kvsim does not model."""
    arch = transformers_backend(wrapper)
    if arch is None or str(cfg.get("model_type", "")).lower() not in MINIMAX_M3_TYPES:
        return None
    freq = (cfg.get("sparse_attention_config") or {}).get("sparse_attention_freq") or []
    n_sparse = sum(1 for f in freq if f)
    if not n_sparse:  # (full attention on every layer: served so, and read so)
        return None
    return (
        f"architectures [{arch!r}] with model_type {wrapper.get('model_type')!r}: vLLM 0.34.0's registry has no "
        f"{arch} (vllm/model_executor/models/registry.py), so vLLM serves it with its Transformers backend "
        f"(transformers' {arch} class), whose attention (vllm_attention_forward) ignores the lightning "
        "indexer's block selection and keeps no index keys (it calls the model with use_cache=False): its "
        f"{n_sparse} sparse layers would attend to every token, not as MiniMax-M3's sparse attention, a model "
        "kvsim does not size; vLLM serves the sparse model as architectures ['MiniMaxM3SparseForCausalLM'] "
        "(model_type 'minimax_m3_vl_text') or ['MiniMaxM3SparseForConditionalGeneration'] (model_type "
        "'minimax_m3_vl')"
    )
