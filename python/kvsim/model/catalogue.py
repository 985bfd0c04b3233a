"""The 2025-2026 model catalogue: presets built from their published `config.json` fields.

Each entry holds the fields of the model's Hugging Face `config.json` that kvsim reads (copied from the
file at the URL in its comment; `tests/data/hf/<name>.json` keeps the published files and
`tests/test_catalogue.py` checks every entry against them field by field), and is turned into a
`kvsim.model.models.Model` by the same code as `--model config.json` (`hf_config._from_dict`), so a preset
and its checkpoint's config give the same answers. Names are the Hugging Face id's last part, lower-cased;
`ALIASES` maps the instruct / chat ids onto the same architecture. Models whose layers are not all full
attention carry `layers=` (`kvsim.model.layers.Layer`), built here from the same config fields
(`layer_types`, `sliding_window` with `sliding_window_pattern`, `attention_chunk_size` with
`no_rope_layers`, Qwen3-Next's `full_attention_interval` with its gated delta net's `linear_*` state
fields), as vLLM 0.33.0 builds each layer's KV-cache spec.

The entries live by family (`catalogue_dense`, `catalogue_moe`, `catalogue_multimodal`, `catalogue_state`);
`ENTRIES` merges them here in the catalogue's one order, the order the presets came in (`kvsim.models.MODELS`
iterates in it).
"""

from __future__ import annotations

from typing import Any

from kvsim.model.catalogue_aliases import ALIASES
from kvsim.model.catalogue_dense import DENSE
from kvsim.model.catalogue_moe import MOE
from kvsim.model.catalogue_multimodal import MULTIMODAL
from kvsim.model.catalogue_state import STATE
from kvsim.model.catalogue_towers import WRAPPERS

_HF = "https://huggingface.co/{}/blob/main/config.json"

# The catalogue's order: the order the presets came in, whatever their family (a new preset goes in its
# family's module and at the end here; tests/test_catalogue.py checks that the two agree).
ORDER: tuple[str, ...] = (
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-32b-awq",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "mistral-small-24b",
    "mistral-small-3.1-24b",
    "phi-4",
    "gemma-3-27b",
    "gemma-4-31b",
    "gemma-4-e4b",
    "gemma-4-26b-a4b",
    "gemma-3-12b",
    "llama-4-scout",
    "qwen3-next-80b-a3b",
    "qwen3.6-35b-a3b",
    "deepseek-v4-flash",
    "minimax-m2",
    "llama-4-maverick",
    "kimi-linear-48b-a3b",
    "kimi-k3",
    "deepseek-v3.2",
    "glm-5",
    "nemotron-3-nano-30b-a3b",
    "llama-3.3-nemotron-super-49b-v1",
    "granite-4.0-h-tiny",
    "deepseek-v3",
)

FAMILIES: tuple[dict[str, tuple[str, dict[str, Any]]], ...] = (DENSE, MOE, MULTIMODAL, STATE)

_BY_NAME = {name: entry for family in FAMILIES for name, entry in family.items()}

# name -> (Hugging Face id, config.json fields kvsim reads)
ENTRIES: dict[str, tuple[str, dict[str, Any]]] = {name: _BY_NAME[name] for name in ORDER}


def presets() -> dict[str, Any]:
    """The catalogue's `Model`s by name."""
    from kvsim.model.hf_config import _from_dict

    out = {}
    for name, (hf_id, fields) in ENTRIES.items():
        url = _HF.format(hf_id)
        # Layer kinds (sliding windows, local chunks) come from the same fields, as from a config.json
        # (`kvsim.model.hf_layers.layers_from_hf_config`); a multimodal checkpoint's as its wrapper holds them.
        cfg = dict(fields)
        if name in WRAPPERS:
            cfg = {**WRAPPERS[name], "text_config": cfg}
        out[name] = _from_dict(cfg, name, url, url, None)
    return out


__all__ = ["ALIASES", "ENTRIES", "WRAPPERS", "presets"]
