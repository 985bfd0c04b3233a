"""Writes the name lists of `kvsim.model.served` (python/kvsim/model/names/), read from the sources of vLLM 0.34.0
and transformers 5.22.2 (the release vLLM 0.34.0's venv holds: vLLM requires transformers >=5.16.1,<5.23.0).

Run it with the Python of a venv that holds both (its transformers is imported for its auto mappings; vLLM's files
are parsed, not imported):

    /tmp/venv-vllm034/bin/python scripts/served_names.py

Each file starts with `#` lines naming its source; then one name a line, sorted.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "python" / "kvsim" / "model" / "names"
# vLLM's registry: `_VLLM_MODELS` is these dicts merged (vllm/model_executor/models/registry.py).
REGISTRY_DICTS = (
    "_TEXT_GENERATION_MODELS",
    "_EMBEDDING_MODELS",
    "_LATE_INTERACTION_MODELS",
    "_REWARD_MODELS",
    "_TOKEN_CLASSIFICATION_MODELS",
    "_SEQUENCE_CLASSIFICATION_MODELS",
    "_MULTIMODAL_MODELS",
    "_SPECULATIVE_DECODING_MODELS",
    "_TRANSFORMERS_SUPPORTED_MODELS",
    "_TRANSFORMERS_BACKEND_MODELS",
)


def _dict_keys(node: ast.Dict, name: str) -> list[str]:
    keys: list[str] = []
    for k, v in zip(node.keys, node.values, strict=True):
        if isinstance(k, ast.Constant):
            keys.append(k.value)
        elif k is None and isinstance(v, ast.Dict):
            keys += _dict_keys(v, name)
        elif k is None and isinstance(v, ast.DictComp) and name == "_EMBEDDING_MODELS":
            pass  # (a subset of _TEXT_GENERATION_MODELS: its entries whose class is LlamaForCausalLM)
        else:
            raise SystemExit(f"{name}: an entry this script does not read: {ast.dump(v)[:80]}")
    return keys


def _write(name: str, header: str, names: set[str]) -> None:
    lines = [f"# {line}" for line in header.splitlines()] + sorted(names)
    (OUT / name).write_text("\n".join(lines) + "\n")
    print(f"{name}: {len(names)}", file=sys.stderr)


def main() -> None:
    import transformers
    import transformers.models.auto.modeling_auto as modeling_auto
    import vllm
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    vdir = Path(vllm.__file__).parent
    tree = ast.parse((vdir / "model_executor/models/registry.py").read_text())
    archs: set[str] = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in REGISTRY_DICTS:
            assert isinstance(node.value, ast.Dict)
            archs.update(_dict_keys(node.value, target.id))
    _write(
        "vllm_architectures.txt",
        f"vLLM {vllm.__version__}'s model registry: the keys of `_VLLM_MODELS`\n"
        "(vllm/model_executor/models/registry.py: " + ", ".join(REGISTRY_DICTS) + ").\n"
        "Written by scripts/served_names.py.",
        archs,
    )
    tree = ast.parse((vdir / "transformers_utils/config.py").read_text())
    types: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_CONFIG_REGISTRY":
            assert isinstance(node.value, ast.Call)
            for kw in node.value.keywords:
                if kw.arg is not None:
                    types.add(kw.arg)
                else:
                    assert isinstance(kw.value, ast.Dict)
                    types.update(_dict_keys(kw.value, "_CONFIG_REGISTRY"))
    _write(
        "vllm_config_types.txt",
        f"The model_types vLLM {vllm.__version__} reads with configs of its own: the keys of `_CONFIG_REGISTRY`\n"
        "(vllm/transformers_utils/config.py).\nWritten by scripts/served_names.py.",
        types,
    )
    _write(
        "transformers_model_types.txt",
        f"The model_types transformers {transformers.__version__}'s AutoConfig knows: the keys of\n"
        "`CONFIG_MAPPING_NAMES` (transformers/models/auto/configuration_auto.py).\n"
        "Written by scripts/served_names.py.",
        set(CONFIG_MAPPING_NAMES),
    )
    classes: set[str] = set()
    for key, value in vars(modeling_auto).items():
        if key.startswith("MODEL_") and key.endswith("_MAPPING_NAMES") and isinstance(value, dict):
            for v in value.values():
                classes.update([v] if isinstance(v, str) else v)
    _write(
        "transformers_model_classes.txt",
        f"The model classes transformers {transformers.__version__}'s auto classes name: the values of every\n"
        "`MODEL_*_MAPPING_NAMES` (transformers/models/auto/modeling_auto.py).\n"
        "Written by scripts/served_names.py.",
        classes,
    )


if __name__ == "__main__":
    main()
