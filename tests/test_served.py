"""kvsim refuses a config.json whose architecture vLLM 0.34.0 does not serve (`kvsim.model.served`): not in its
model registry (as is, or with the suffix swapped: `_normalize_arch`), and no transformers class (with a
model_type AutoConfig reads) for its Transformers backend: "Model architectures [...] are not supported for now"
(`vllm/model_executor/models/registry.py`, `_raise_for_unsupported`). One its Transformers backend would serve
runs with a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import served
from kvsim.model.catalogue import ENTRIES, WRAPPERS
from kvsim.model.models import from_hf_config
from tests.cli_run_common import _error

HF = Path(__file__).parent / "data" / "hf"
MISTRAL = json.loads((HF / "mistral-7b.json").read_text())
RUN = ["--gpu", "a100-80gb", "--requests", "2"]


def _config(tmp_path: Path, **fields: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MISTRAL, **fields}))
    return str(path)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("frobnicator", "transformers 5.22.2 does not know its model_type 'frobnicator'"),
        ("mistral", "transformers 5.22.2 has no class FrobForCausalLM for vLLM's Transformers backend"),
    ],
)
def test_an_architecture_vllm_does_not_serve_is_refused_by_name(capsys, tmp_path, kind, said):
    path = _config(tmp_path, architectures=["FrobForCausalLM"], model_type=kind)
    err = _error(capsys, ["run", "--model", path, *RUN])
    assert err.startswith(
        f"kvsim run: error: argument --model: model {path!r}: architectures ['FrobForCausalLM']"
    )
    assert "vLLM 0.34.0 does not serve them: its model registry has none of them" in err
    assert said in err
    assert "Model architectures ['FrobForCausalLM'] are not supported for now" in err
    with pytest.raises(InvalidArgumentError, match="not supported for now"):
        from_hf_config(path)


def test_the_registry_takes_an_architecture_as_is_or_with_its_suffix_swapped(capsys, tmp_path):
    """`_normalize_arch`: MistralForRewardModeling is served as MistralForCausalLM; any one of several names
    served serves the config; an `auto_map` naming an AutoModel is the repository's code (kvsim cannot tell)."""
    registry = served.names("vllm_architectures.txt")
    assert "MistralForCausalLM" in registry
    assert "MistralForRewardModeling" not in registry
    assert served.in_registry("MistralForRewardModeling")
    assert not served.in_registry("FrobForRewardModeling")
    for fields in (
        {"architectures": ["MistralForRewardModeling"]},
        {"architectures": ["FrobForCausalLM", "MistralForCausalLM"], "model_type": "frobnicator"},
        {
            "architectures": ["FrobForCausalLM"],
            "model_type": "frobnicator",
            "auto_map": {"AutoModelForCausalLM": "m.F"},
        },
        {"architectures": None},
    ):
        assert served.unserved({**MISTRAL, **fields}) is None, fields
    assert served.unserved(
        {**MISTRAL, "architectures": ["FrobForCausalLM"], "auto_map": {"AutoConfig": "c.F"}}
    )


def test_the_transformers_backend_serves_a_class_transformers_has_with_a_note(capsys, tmp_path):
    """HeliumForCausalLM: in transformers 5.22.2 (model_type helium), not in vLLM 0.34.0's registry."""
    assert "HeliumForCausalLM" in served.names("transformers_model_classes.txt")
    assert "helium" in served.names("transformers_model_types.txt")
    assert not served.in_registry("HeliumForCausalLM")
    path = _config(tmp_path, architectures=["HeliumForCausalLM"], model_type="helium")
    from kvsim.cli import main

    assert main(["run", "--model", path, *RUN]) == 0
    out = capsys.readouterr().out
    assert f"note: model {path}: vLLM 0.34.0's registry has no HeliumForCausalLM" in out
    assert "vLLM serves it with its Transformers backend" in out
    assert main(["run", "--model", _config(tmp_path), *RUN]) == 0  # (MistralForCausalLM: no note)
    assert "Transformers backend" not in capsys.readouterr().out


def test_every_catalogue_model_and_test_config_is_served():
    """The catalogue's configs and every config.json kept under tests/data/hf pass but MiniMax-M3's text
    config (`test_minimax_m3s_text_config_is_refused_and_its_wrapper_served`)."""
    for name, (_, fields) in ENTRIES.items():
        cfg = {**WRAPPERS[name], "text_config": dict(fields)} if name in WRAPPERS else dict(fields)
        assert served.refusal(cfg) is None, name
    configs = [p for p in HF.rglob("*.json") if "architectures" in json.loads(p.read_text())]
    assert len(configs) >= 40
    for p in configs:
        if p.name != "minimax-m3.json":
            assert served.refusal(json.loads(p.read_text())) is None, p


def test_minimax_m3s_text_config_is_refused_and_its_wrapper_served(capsys, tmp_path):
    """MiniMaxAI's MiniMax-M3 config (`minimax_m3`, `MiniMaxM3ForCausalLM`): vLLM 0.34.0's registry lists
    `MiniMaxM3SparseForConditionalGeneration` and `MiniMaxM3SparseForCausalLM` only, and neither transformers
    5.22.2 nor vLLM reads model_type `minimax_m3`, so vllm serve stops on it: refused by name (kvsim read it
    as the wrapper's text config before), the message saying how vLLM serves the model; both of those load."""
    text = json.loads((HF / "minimax-m3.json").read_text())
    why = served.refusal(text)
    assert why is not None
    assert why.startswith("architectures ['MiniMaxM3ForCausalLM']: vLLM 0.34.0 does not serve them")
    assert "does not know its model_type 'minimax_m3'" in why
    assert served.MINIMAX_M3_SERVED in why
    path = tmp_path / "config.json"
    path.write_text(json.dumps(text))
    err = _error(capsys, ["run", "--model", str(path), *RUN])
    assert err.startswith(f"kvsim run: error: argument --model: model {str(path)!r}: architectures")
    assert "'minimax_m3_vl'" in err
    assert err.count("\n") <= 1
    with pytest.raises(InvalidArgumentError, match="MiniMaxM3SparseForConditionalGeneration"):
        from_hf_config(path)
    for spelling in ("minimax_m3_text", "MiniMax_M3"):
        assert served.MINIMAX_M3_SERVED in (served.refusal({**text, "model_type": spelling}) or "")
    # as vLLM serves it: the wrapper (NVIDIA's releases), or the text model under transformers' type
    wrapper = {"model_type": "minimax_m3_vl", "architectures": ["MiniMaxM3SparseForConditionalGeneration"]}
    assert served.refusal({**wrapper, "text_config": text}) is None
    sparse = {**text, "model_type": "minimax_m3_vl_text", "architectures": ["MiniMaxM3SparseForCausalLM"]}
    assert served.refusal(sparse) is None
    for cfg in ({**wrapper, "text_config": text}, sparse):
        path.write_text(json.dumps(cfg))
        assert from_hf_config(path).kv_bytes_per_token == 137_472
    # another architecture under a MiniMax-M3 type keeps the general hint
    other = served.refusal({**text, "model_type": "frob", "architectures": ["FrobForCausalLM"]})
    assert other is not None
    assert served.MINIMAX_M3_SERVED not in other


def test_the_name_lists_name_their_source():
    for file, source in (
        ("vllm_architectures.txt", "vLLM 0.34.0's model registry"),
        ("vllm_config_types.txt", "vLLM 0.34.0"),
        ("transformers_model_types.txt", "transformers 5.22.2"),
        ("transformers_model_classes.txt", "transformers 5.22.2"),
    ):
        lines = (served.NAMES / file).read_text().splitlines()
        assert source in lines[0]
        body = [x for x in lines if not x.startswith("#")]
        assert body == sorted(set(body)), file
        assert len(body) > 50, file


def test_minimax_m3_on_the_transformers_backend_is_refused_where_it_has_sparse_layers(capsys, tmp_path):
    """`MiniMaxM3VLForCausalLM` with model_type `minimax_m3_vl_text` passed as Transformers-served and was read as
    the sparse model (137,472 B a token, index keys in the KV): vLLM 0.34.0's registry has no such name, and its
    Transformers backend drops the indexer's block selection and keeps no index keys, so kvsim refuses it by
    name, naming vLLM's own architectures; without sparse layers it is full attention, read with the note."""
    from tests.test_minimax_m3 import _cfg, _transformers_5

    cfg = {**_transformers_5(_cfg()), "architectures": ["MiniMaxM3VLForCausalLM"]}
    assert served.transformers_backend(cfg) == "MiniMaxM3VLForCausalLM"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    err = _error(capsys, ["run", "--model", str(path), *RUN])
    assert err.startswith(
        f"kvsim run: error: argument --model: model {str(path)!r}: architectures ['MiniMaxM3VLForCausalLM'] "
        "with model_type 'minimax_m3_vl_text': vLLM 0.34.0's registry has no MiniMaxM3VLForCausalLM"
    ), err
    assert "its 57 sparse layers would attend to every token" in err
    assert "['MiniMaxM3SparseForCausalLM']" in err
    with pytest.raises(InvalidArgumentError, match="ignores the lightning indexer's block selection"):
        from_hf_config(path)
    # the same fields under vLLM's own architecture: the sparse model
    path.write_text(json.dumps({**cfg, "architectures": ["MiniMaxM3SparseForCausalLM"]}))
    assert from_hf_config(path).kv_bytes_per_token == 137_472
    # no sparse layer: full attention on every layer, as the Transformers backend serves it
    full = {**cfg, "layer_types": ["full_attention"] * 60}
    path.write_text(json.dumps(full))
    m = from_hf_config(path)
    assert not m.is_dsa
    assert m.kv_bytes_per_token == 60 * 2_048
