"""The release a configuration records reaches the config readers (DESIGN.md §Presets, "The release"): a
`SimConfig` reads a config.json model as its `vllm_release` reads it (`SimConfig.release_model`), so under
`--preset vllm-0.33` or `--vllm-release 0.33.0` ModelOpt's CSF block scales are refused by name, a
compressed-tensors W4A8 int checkpoint holds its packed bytes and MiniMax-M3's legacy sparse fields are read
and refused, while under 0.34.0 each is read as 0.34.0 reads it; a preset's name is unchanged."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from kvsim.analysis.sweep import SweepSpec, parse_grid_args
from kvsim.errors import InvalidArgumentError
from kvsim.model import models
from kvsim.model.config import SimConfig
from kvsim.model.weights import weight_groups
from tests.cli_run_common import PLAN, _error, _json
from tests.test_minimax_m3 import _cfg as minimax_m3_cfg
from tests.test_minimax_m3 import wrapped

HF = Path(__file__).parent / "data" / "hf"
SRC = Path(__file__).parents[1] / "python" / "kvsim"
CSF = (
    r"modelopt weight_scale_encoding 'csf' \(CSF-compressed NVFP4 block scales\): vLLM 0\.33\.0 reads no such"
)
# Llama-3.1-8B's linear layers a layer: qkv_proj (32 + 8 + 8) x 128 = 6,144 rows and o_proj 4,096 rows over
# 4,096 inputs; gate, up (14,336 rows each, 4,096 inputs) and down (4,096 rows, 14,336 inputs); 32 layers.
LLAMA_8B_LINEAR_VALUES = (10_240 * 4_096 + 3 * 14_336 * 4_096) * 32


def _write(tmp_path: Path, name: str, cfg: dict) -> str:
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cfg))
    return str(path)


def _llama_8b(tmp_path: Path, name: str, quantization_config: dict) -> str:
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    cfg["quantization_config"] = quantization_config
    return _write(tmp_path, name, cfg)


def _csf(tmp_path: Path, encoding: bool = True) -> str:
    """Llama-3.1-8B in ModelOpt NVFP4 (lm_head excluded), with CSF-compressed block scales or without."""
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    return _llama_8b(
        tmp_path, "csf" if encoding else "plain", {**qc, "weight_scale_encoding": "csf"} if encoding else qc
    )


def _w4a8_int(tmp_path: Path) -> str:
    """Llama-3.1-8B in compressed-tensors W4A8Int, int-quantized (int4 weights in groups of 128, dynamic int8
    inputs per token), lm_head left out."""
    w = {
        "num_bits": 4,
        "type": "int",
        "symmetric": True,
        "strategy": "group",
        "group_size": 128,
        "dynamic": False,
    }
    act = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}
    group = {"targets": ["Linear"], "weights": w, "input_activations": act}
    qc = {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "config_groups": {"group_0": group},
    }
    return _llama_8b(tmp_path, "w4a8", {**qc, "ignore": ["lm_head"]})


def test_a_csf_checkpoint_is_refused_under_0_33_0_and_sized_under_0_34_0(tmp_path):
    csf, plain = _csf(tmp_path), _csf(tmp_path, encoding=False)
    for older in ({"vllm_release": "0.33.0"}, {"vllm_release": "0.22.1"}):
        with pytest.raises(
            InvalidArgumentError, match=CSF.replace("0\\.33\\.0", re.escape(older["vllm_release"]))
        ):
            SimConfig(model=csf, gpu="b200", **older)
    with pytest.raises(InvalidArgumentError, match=CSF):
        SimConfig.preset("vllm-0.33", model=csf, gpu="b200")
    with pytest.raises(InvalidArgumentError, match=r"vLLM's v0 engine reads no such field"):
        SimConfig(model=csf, gpu="b200", vllm_release="v0")
    # under 0.34.0 (the default, or the preset) it holds what its uncompressed twin holds
    new = SimConfig(model=csf, gpu="b200")
    assert new.vllm_release == "0.34.0"
    twin = SimConfig(model=plain, gpu="b200")
    assert new.pool.weight_bytes == twin.pool.weight_bytes
    assert new.num_blocks == twin.num_blocks
    assert SimConfig.preset("vllm-0.34", model=csf, gpu="b200").num_blocks == new.num_blocks
    # the twin is read alike under either release, and `replace` reads the model again under the new one
    assert twin.replace(vllm_release="0.33.0").pool.weight_bytes == twin.pool.weight_bytes
    with pytest.raises(InvalidArgumentError, match=CSF):
        new.replace(vllm_release="0.33.0")
    # (the readers' cache keys on the release: read under 0.34.0 again after the refusal, the same model)
    assert SimConfig(model=csf, gpu="b200").pool.weight_bytes == new.pool.weight_bytes


def test_kvsim_run_refuses_a_csf_checkpoint_under_0_33_0_in_one_line(capsys, tmp_path):
    csf = _csf(tmp_path)
    run = ["run", "--model", csf, "--gpu", "b200", "--requests", "2", "--num-gpu-blocks-override", "64"]
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nvllm_release = "0.33.0"\n')
    # the line names what set the release, which refused the model (0.34.0 reads it), beside the model's flag
    setters = {
        "--preset vllm-0.33": ["--preset", "vllm-0.33"],
        "--vllm-release 0.33.0": ["--vllm-release", "0.33.0"],
        f"run file {run_file}: [config] vllm_release '0.33.0'": ["--toml", str(run_file)],
    }
    for setter, flags in setters.items():
        err = _error(capsys, [*run, *flags])
        assert err.startswith(f"kvsim run: error: argument --model (read under {setter}): model {csf!r}: "), (
            err
        )
        assert re.search(CSF, err), err
    # (the model given as MODEL, or by a run file, is named so too)
    err = _error(capsys, [*run[:1], csf, *run[3:], "--vllm-release", "0.33.0"])
    assert err.startswith("kvsim run: error: argument MODEL (read under --vllm-release 0.33.0): model "), err
    model_file = tmp_path / "model.toml"
    model_file.write_text(f"[config]\nmodel = {json.dumps(csf)}\n")
    err = _error(capsys, [*run[:1], *run[3:], "--toml", str(model_file), "--preset", "vllm-0.33"])
    assert err.startswith(
        f"kvsim run: error: run file {model_file}: [config] model (read under --preset vllm-0.33): "
    )
    # a refusal of the latest release too is the model's alone, named as before
    missing = str(tmp_path / "none" / "config.json")
    err = _error(capsys, ["run", "--model", missing, *run[3:], "--preset", "vllm-0.33"])
    assert err.startswith(f"kvsim run: error: argument --model: model {missing!r}: "), err
    out = _json(capsys, [*run, "--preset", "vllm-0.34"])
    assert out["config"]["vllm_release"] == "0.34.0"


def test_w4a8_int_weights_and_pool_follow_the_release(capsys, tmp_path):
    """W4A8Int loads each int4 value into an int8: 0.34.0 keeps that storage (a byte a value), 0.33.0 freed
    it for Humming's packed tensor (half a byte): the linear layers' values, 10,240 x 4,096 + 3 x 14,336 x
    4,096 a layer over 32 layers, hold half their count in bytes more under 0.34.0, which the KV cache loses."""
    path = _w4a8_int(tmp_path)
    new = SimConfig(model=path, gpu="h100-80gb")
    old = SimConfig(model=path, gpu="h100-80gb", vllm_release="0.33.0")
    more = LLAMA_8B_LINEAR_VALUES // 2
    assert more == 3_489_660_928
    assert new.pool.weight_bytes - old.pool.weight_bytes == more
    assert old.pool.kv_cache_bytes - new.pool.kv_cache_bytes == more
    for c in (new, old):
        assert c.num_blocks == c.pool.kv_cache_bytes // c.pool.layout.bytes_per_block
    assert old.num_blocks > new.num_blocks
    # the models the readers give under each release, which the pools took
    for c, release in ((new, "0.34.0"), (old, "0.33.0")):
        m = models.resolve(path, release=release)
        assert c.release_model == m
        assert weight_groups(c.release_model)["attn"].bytes == weight_groups(m)["attn"].bytes
    assert weight_groups(new.release_model)["attn"].bytes == 1_363_148_800
    assert weight_groups(old.release_model)["attn"].bytes == 692_060_160
    # the older preset reads it as 0.33.0 does
    assert (
        SimConfig.preset("vllm-0.33", model=path, gpu="h100-80gb").pool.weight_bytes == old.pool.weight_bytes
    )
    # the command line: the pool the flag's release sizes
    run = ["run", "--model", path, "--gpu", "h100-80gb", "--requests", "2"]
    assert _json(capsys, [*run, "--vllm-release", "0.33.0"])["config"]["num_blocks"] == old.num_blocks
    assert _json(capsys, run)["config"]["num_blocks"] == new.num_blocks


@pytest.mark.parametrize("fields", [{"sparse_score_type": "mean"}, {"sparse_init_block": -1}])
def test_minimax_m3s_legacy_fields_are_refused_under_0_33_0_only(tmp_path, fields):
    cfg = copy.deepcopy(minimax_m3_cfg())
    cfg["sparse_attention_config"].update(fields)
    path = _write(tmp_path, "legacy", wrapped(cfg))
    plain = _write(tmp_path, "plain", wrapped(minimax_m3_cfg()))
    knobs = {"gpu": "b200", "tensor_parallel_size": 8, "max_model_len": 32768}
    for release in ("0.33.0", "0.22.1"):
        with pytest.raises(InvalidArgumentError, match=r"sparse_(score_type|init_block)' "):
            SimConfig(model=path, vllm_release=release, **knobs)
    with pytest.raises(InvalidArgumentError, match=r"sparse_(score_type|init_block)' "):
        SimConfig.preset("vllm-0.33", model=path, **knobs)
    new = SimConfig(model=path, **knobs)
    assert new.num_blocks == SimConfig(model=plain, **knobs).num_blocks
    assert new.pool.layout.bytes_per_block == 5_799_936
    # the fixture itself (no legacy field off 0.33.0's reading) is taken under 0.33.0
    assert SimConfig(model=plain, vllm_release="0.33.0", **knobs).pool.layout.bytes_per_block == 5_799_936


def test_a_presets_name_is_read_alike_under_every_release():
    """The presets' configs hold no field the releases read differently: a name (an alias too, which keeps
    its label) is passed on as given, and each release's pool of it is the latest's."""
    assert models.under_release("deepseek-r1", "0.33.0") == "deepseek-r1"
    assert models.under_release("llama-3.1-8b", "v0") == "llama-3.1-8b"
    m = models.get("llama-3.1-8b")
    assert models.under_release(m, "0.33.0") is m
    knobs = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "kv_cache_sizing": "profiled", "block_size": 16}
    base = SimConfig(**knobs).num_blocks
    for release in ("0.33.0", "0.22.1", "v0"):
        assert SimConfig(vllm_release=release, **knobs).num_blocks == base, release


# A configuration's model read without its release: `resolve(config.model)` and the like.
UNRELEASED = re.compile(r"\b(resolve|resolve_model|lab_model|resolve_model_len|size_pool|kv_bytes_per_token)"
                        r"\(\s*(self|config|cfg|c|pc|first|base)\.model\b")  # fmt: skip


def test_no_reader_of_a_configurations_model_skips_its_release():
    """Every place that reads a `SimConfig`'s model takes `release_model` (or passes `model` only to name it)."""
    found = [
        f"{p.relative_to(SRC)}: {hit.group(0)!r}"
        for p in sorted(SRC.rglob("*.py"))
        for hit in UNRELEASED.finditer(p.read_text())
    ]
    assert found == []
    # and the check sees what it looks for
    assert UNRELEASED.search("    m = resolve(config.model)")
    assert UNRELEASED.search("pool = size_pool(\n            self.model,")


def test_sweep_points_and_plans_candidates_read_the_model_under_their_release(capsys, tmp_path):
    """A sweep grid and plan's --compare over `vllm_release` build one configuration each, which reads the
    config.json under its own release: W4A8Int's pools differ, a CSF checkpoint's 0.33.0 candidate is refused."""
    path = _w4a8_int(tmp_path)
    spec = SweepSpec(
        name="readers",
        grid=parse_grid_args(["vllm_release=0.34.0,0.33.0"]),
        base={"model": path, "gpu": "h100-80gb"},
        workloads=["sharegpt"],
        seeds=1,
        requests=5,
    )
    blocks = [p.sim_config().num_blocks for p in spec.points()]
    assert blocks == [
        SimConfig(model=path, gpu="h100-80gb", vllm_release=r).num_blocks for r in ("0.34.0", "0.33.0")
    ]
    assert blocks[1] > blocks[0]
    csf = _csf(tmp_path)
    err = _error(capsys, [*PLAN, "--model", csf, "--gpu", "b200", "--compare", "vllm_release=0.34.0,0.33.0"])
    assert err.startswith("kvsim plan: error: argument --compare: candidate vllm_release=0.33.0: "), err
    assert re.search(CSF, err), err


def test_a_model_keeps_the_release_it_was_read_by_as_given_and_messages_name_it_one_way():
    """A model read under `v0` records `v0` (not a number no release has), and a number as given; a release is
    named by `releases.said` alone, which `presets.release_words` builds on."""
    from kvsim.model.hf_config import from_hf_config
    from kvsim.model.presets import release_words
    from kvsim.model.releases import RELEASES, said

    path = HF / "llama-3.1-8b.json"
    for release in ("v0", "0.33", "0.34.0"):
        model = from_hf_config(path, release=release)
        assert model.release == release
        assert from_hf_config(path, release=model.release) == model  # read again by what it records
    assert said("v0") == "vLLM's v0 engine"
    assert said("0.33") == "vLLM 0.33.0"
    for release in RELEASES:
        assert release_words(release).startswith(f"{said(release)} (vllm_release {release!r}: preset")
    with pytest.raises(InvalidArgumentError, match="is not a vLLM release number"):
        from_hf_config(path, release="0.x")


def test_a_model_is_first_checked_under_the_release_the_configuration_records(capsys, tmp_path):
    """A config refused under either release, for a different field under each: the refusal is the
    configuration's release's own (its first), never the latest's, in SimConfig and on the command line
    (the release given by flag, run file or preset)."""
    cfg = copy.deepcopy(minimax_m3_cfg())
    cfg["sparse_attention_config"].update(sparse_init_block=-1, sparse_num_index_heads=8)
    path = _write(tmp_path, "both", wrapped(cfg))
    knobs = {"gpu": "b200", "tensor_parallel_size": 8, "max_model_len": 32768}
    older, latest = r"sparse_init_block' -1 ", r"sparse_num_index_heads' 8 is not the 4 KV heads"
    with pytest.raises(InvalidArgumentError, match=latest):
        SimConfig(model=path, **knobs)
    with pytest.raises(InvalidArgumentError, match=older):
        SimConfig(model=path, vllm_release="0.33.0", **knobs)
    with pytest.raises(InvalidArgumentError, match=older):
        SimConfig.preset("vllm-0.33", model=path, **knobs)
    run = ["run", "--model", path, "--gpu", "b200", "-tp", "8", "--max-model-len", "32768", "--requests", "2"]
    assert re.search(latest, _error(capsys, run))
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nvllm_release = "0.33.0"\n')
    for flags in (["--vllm-release", "0.33.0"], ["--preset", "vllm-0.33"], ["--toml", str(run_file)]):
        err = _error(capsys, [*run, *flags])
        assert re.search(older, err), (flags, err)


def test_a_prefill_config_and_a_sweeps_model_are_read_under_their_release(capsys, tmp_path):
    """`--prefill-config model=`, `kvsim sweep --base model=` and `--grid model=` are read under the release
    their configuration will have, not the latest: a refusal names what set it, as `--model`'s does."""
    csf = _csf(tmp_path)
    pd = ["run", "meta-llama/Llama-3.1-8B", "--gpu", "b200", "--requests", "2"]
    pd += ["--replicas", "2", "--prefill-replicas", "1", "--prefill-config"]
    setters = {
        "--vllm-release 0.33.0": [f"model={csf}", "--vllm-release", "0.33.0"],
        "--preset vllm-0.33": [f"model={csf}", "--preset", "vllm-0.33"],
        "--prefill-config vllm_release=0.33.0": [f"model={csf},vllm_release=0.33.0"],
    }
    for setter, flags in setters.items():
        err = _error(capsys, [*pd, *flags])
        start = f"kvsim run: error: argument --prefill-config: model (read under {setter}): model {csf!r}: "
        assert err.startswith(start), err
        assert re.search(CSF, err), err
    sweep = ["sweep", "--base", "gpu=b200", "--requests", "2", "--base", "vllm_release=0.33.0"]
    err = _error(capsys, [*sweep, "--base", f"model={csf}"])
    assert err.startswith(
        "kvsim sweep: error: argument --base model (read under --base vllm_release=0.33.0): "
    ), err
    err = _error(capsys, [*sweep, "--grid", f"model=opt-13b,{csf}"])
    assert err.startswith("kvsim sweep: error: --grid model (read under --base vllm_release=0.33.0): "), err
    assert re.search(CSF, err), err
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(f'[base]\nmodel = {json.dumps(csf)}\ngpu = "b200"\n')
    err = _error(capsys, ["sweep", "--file", str(sweep_file), "--base", "vllm_release=0.33.0"])
    assert err.startswith(
        f"kvsim sweep: error: sweep file {sweep_file}: [base] model (read under --base vllm_release=0.33.0): "
    ), err
    # a sweep file's own release names itself
    sweep_file.write_text(f'[base]\nmodel = {json.dumps(csf)}\ngpu = "b200"\nvllm_release = "0.33.0"\n')
    err = _error(capsys, ["sweep", "--file", str(sweep_file)])
    assert err.startswith(
        f"kvsim sweep: error: sweep file {sweep_file}: [base] model (read under [base] vllm_release '0.33.0'): "
    ), err
    # under the latest (the default, or a grid of releases: each point its own) the entry reads it
    SweepSpec(base={"gpu": "b200", "vllm_release": "0.34.0"}, grid=parse_grid_args([f"model={csf}"])).points()
    with pytest.raises(
        InvalidArgumentError, match=r"1 invalid grid combination .*'vllm_release': '0\.33\.0'"
    ):
        SweepSpec(base={"gpu": "b200"}, grid={"model": [csf], "vllm_release": ["0.33.0", "0.34.0"]}).points()


def test_the_release_is_refused_before_the_model_it_reads(capsys, tmp_path):
    """A release that is none beside a model that fails: the release is refused (it decides how the model
    is read), wherever each is given."""
    missing = str(tmp_path / "none" / "config.json")
    bad = "vllm_release '0.99' is not one of '0.34.0'"
    run = ["run", "--gpu", "b200", "--requests", "2"]
    err = _error(capsys, [*run, "--model", missing, "--vllm-release", "0.99"])
    assert err.startswith(f"kvsim run: error: argument --vllm-release: {bad}"), err
    run_file = tmp_path / "run.toml"
    run_file.write_text(f'[config]\nmodel = {json.dumps(missing)}\nvllm_release = "0.99"\n')
    err = _error(capsys, [*run, "--toml", str(run_file)])
    assert err.startswith(f"kvsim run: error: run file {run_file}: [config] {bad}"), err
    pd = [*run, "--model", "meta-llama/Llama-3.1-8B", "--replicas", "2", "--prefill-replicas", "1"]
    err = _error(capsys, [*pd, "--prefill-config", f"model={missing},vllm_release=0.99"])
    assert err.startswith(f"kvsim run: error: argument --prefill-config: {bad}"), err
    err = _error(capsys, ["sweep", "--base", f"model={missing}", "--base", "vllm_release=0.99"])
    assert err.startswith(f"kvsim sweep: error: argument --base: {bad}"), err
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(f'[base]\nmodel = {json.dumps(missing)}\nvllm_release = "0.99"\n')
    err = _error(capsys, ["sweep", "--file", str(sweep_file)])
    assert err.startswith(f"kvsim sweep: error: sweep file {sweep_file}: [base] {bad}"), err
