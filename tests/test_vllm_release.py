"""The release a configuration records (`vllm_release`, `kvsim.model.releases`; DESIGN.md §Presets, "The
release"): one a configuration, set by its preset, 0.34.0 without one, carried by `replace`, the dictionaries,
run files, sweep grids, plan's --compare and the prefill replicas' config, refused by name when unknown; and
the rules that differ by release (max_model_len auto, an NVFP4 KV cache, the command line's KV dtype list and
backends' block sizes) key on it, where they keyed on `free_order` classic or the preset's name before."""

from __future__ import annotations

import pytest

from kvsim.analysis.sweep import Point, SweepSpec, parse_grid_args, run_sweep
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import KNOBS, SimConfig
from kvsim.model.presets import PRESETS
from kvsim.model.releases import LATEST, RELEASES, is_read, release_at_least
from tests.cli_run_common import PLAN, _error, _json

LLAMA_70B_TP2 = {"model": "llama-3.1-70b", "gpu": "h100-80gb", "tensor_parallel_size": 2}
RUN_70B = ["run", "--model", "llama-3.1-70b", "--gpu", "h100-80gb", "-tp", "2", "--requests", "3"]
# Each preset's release (DESIGN.md §Presets' table): the newest of its range, v0 the v0 engine.
RELEASE_OF = {
    "vllm-latest": "0.34.0",
    "vllm-0.34": "0.34.0",
    "vllm-0.33": "0.33.0",
    "vllm-0.20": "0.22.1",
    "vllm-0.19": "0.19.1",
    "vllm-v1": "0.18.1",
    "vllm-0.11": "0.11.2",
    "vllm-v0": "v0",
}
OLDER = [name for name, release in RELEASE_OF.items() if release not in ("0.34.0", "0.33.0")]


def test_every_preset_records_its_release_and_the_defaults_the_latest():
    assert LATEST == KNOBS["vllm_release"].default == SimConfig(num_blocks=64).vllm_release == "0.34.0"
    assert set(RELEASE_OF) == set(PRESETS)
    for name, release in RELEASE_OF.items():
        assert SimConfig.preset(name, num_blocks=64).vllm_release == release, name
    # every release is some preset's, and the knob takes those alone
    assert set(RELEASE_OF.values()) == set(RELEASES) == set(KNOBS["vllm_release"].choices)


def test_releases_are_ordered_newest_first_and_v0_is_the_oldest():
    assert release_at_least("0.34.0", "0.33.0")
    assert release_at_least("0.33.0", "0.33.0")
    assert not release_at_least("0.22.1", "0.33.0")
    assert release_at_least("0.11.2", "v0")
    assert not release_at_least("v0", "0.11.2")
    assert release_at_least(SimConfig.preset("vllm-0.19", num_blocks=64), "0.18.1")
    assert [r for r in RELEASES if is_read(r)] == ["0.34.0", "0.33.0"]
    with pytest.raises(InvalidArgumentError, match=r"vllm_release '0\.34' is not one of the releases"):
        release_at_least("0.34", "0.33.0")


@pytest.mark.parametrize("bad", ["0.25.0", "0.34", "latest", "vllm-0.33", "", 34])
def test_an_unknown_release_is_refused_by_name(bad):
    with pytest.raises(InvalidArgumentError, match=r"^vllm_release .* is not one of '0\.34\.0', '0\.33\.0'"):
        SimConfig(num_blocks=64, vllm_release=bad)
    with pytest.raises(InvalidArgumentError, match="vllm_release"):
        SimConfig.preset("vllm-v1", num_blocks=64, vllm_release=bad)


def test_the_free_order_alone_no_longer_refuses_auto_nor_nvfp4():
    """The departure removed: `free_order` classic stood for the older releases, so `--free-order classic` with
    the latest defaults refused auto and NVFP4. Now the release decides: under 0.34.0 both are taken."""
    classic = SimConfig(max_model_len="auto", free_order="classic", **LLAMA_70B_TP2)
    assert classic.max_model_len == SimConfig(max_model_len="auto", **LLAMA_70B_TP2).max_model_len == 40_576
    on_b200 = {"model": "llama-3.1-8b", "gpu": "b200"}
    assert (
        SimConfig(free_order="classic", kv_cache_dtype="nvfp4", **on_b200).pool.kv_bytes_per_token == 36_864
    )


@pytest.mark.parametrize("name", OLDER)
def test_an_older_presets_auto_and_nvfp4_are_refused_by_its_release(name):
    release = RELEASE_OF[name]
    said = "vLLM's v0 engine" if release == "v0" else f"vLLM {release}"
    named = f"{said} (vllm_release '{release}': preset {name}"
    with pytest.raises(InvalidArgumentError, match=f"preset {name} is an older vLLM than 0.33.0") as info:
        SimConfig.preset(name, max_model_len="auto", **LLAMA_70B_TP2)
    assert named in str(info.value)
    older = SimConfig.preset(name, model="llama-3.1-8b", gpu="h100-80gb")
    with pytest.raises(InvalidArgumentError) as info:
        older.replace(max_model_len=-1)
    assert str(info.value).startswith(f"max_model_len auto (-1) under {named}")
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig.preset(name, model="llama-3.1-8b", gpu="b200", kv_cache_dtype="nvfp4")
    assert str(info.value).startswith(f"kv_cache_dtype 'nvfp4' under {named}")
    # A release given over a preset is the one named, not the preset (which is not older).
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig.preset("vllm-latest", vllm_release=release, max_model_len=-1)
    assert str(info.value).startswith(
        f"max_model_len auto (-1): vllm_release '{release}' is an older vLLM than 0.33.0"
    )
    assert "preset 'vllm-latest'" not in str(info.value)
    # (and the same preset with the free order 0.23.0 gave, which refused nothing before, refuses them alike)
    with pytest.raises(InvalidArgumentError, match="kvsim has not read that release's"):
        SimConfig.preset(name, max_model_len="auto", free_order="lifo_unhashed", **LLAMA_70B_TP2)


@pytest.mark.parametrize("name", ["vllm-latest", "vllm-0.34", "vllm-0.33"])
def test_the_read_releases_presets_take_auto_as_before(name):
    c = SimConfig.preset(name, max_model_len="auto", **LLAMA_70B_TP2)
    assert c.pool.auto_fit is not None
    assert c.max_model_len == c.pool.auto_fit.fitted


def test_a_release_given_over_a_preset_or_without_one_is_the_configurations():
    """`vllm_release` is a knob: it sets no other one, and a release given is the one its rules read."""
    # given without a preset: 0.22.1's refusals with the latest defaults' knobs otherwise
    with pytest.raises(InvalidArgumentError, match=r"max_model_len auto \(-1\) under vLLM 0\.22\.1 "):
        SimConfig(max_model_len="auto", vllm_release="0.22.1", **LLAMA_70B_TP2)
    c = SimConfig(vllm_release="0.22.1", model="llama-3.1-8b", gpu="h100-80gb")
    assert (c.free_order, c.default_block_size) == ("lifo_unhashed", 64)
    # over a preset: vllm-v1's knobs, 0.34.0's auto-fit
    v1 = SimConfig.preset("vllm-v1", vllm_release="0.34.0", max_model_len="auto", **LLAMA_70B_TP2)
    assert (v1.free_order, v1.vllm_release, v1.max_model_len) == (
        "classic",
        "0.34.0",
        v1.pool.auto_fit.fitted,
    )
    with pytest.raises(InvalidArgumentError, match=r"kv_cache_dtype 'nvfp4' under vLLM 0\.19\.1 "):
        SimConfig(vllm_release="0.19.1", model="llama-3.1-8b", gpu="b200", kv_cache_dtype="nvfp4")


def test_replace_and_the_dictionaries_carry_it():
    old = SimConfig.preset("vllm-v1", model="llama-3.1-8b", gpu="h100-80gb")
    assert old.replace(max_num_seqs=8).vllm_release == "0.18.1"
    assert old.to_dict()["vllm_release"] == old.describe()["vllm_release"] == "0.18.1"
    assert SimConfig.from_dict(old.to_dict()) == old
    assert SimConfig.from_dict(old.describe()).vllm_release == "0.18.1"
    assert old.resolved()["vllm_release"] == "0.18.1"
    newer = old.replace(vllm_release="0.33.0")
    assert newer != old
    assert newer.replace(max_model_len="auto").pool.auto_fit is not None
    with pytest.raises(InvalidArgumentError, match=r"^vllm_release '0\.20' is not one of"):
        old.replace(vllm_release="0.20")


def test_kvsim_run_takes_it_from_the_flag_and_the_run_file_and_shows_it(capsys, tmp_path):
    out = _json(
        capsys, ["run", "--num-gpu-blocks-override", "64", "--requests", "3", "--vllm-release", "0.19.1"]
    )
    assert out["config"]["vllm_release"] == "0.19.1"
    assert (
        _json(capsys, ["run", "--num-gpu-blocks-override", "64", "--requests", "3"])["config"]["vllm_release"]
        == "0.34.0"
    )
    # the config line shows it where it is not the defaults'
    assert main(["run", "--num-gpu-blocks-override", "64", "--requests", "3", "--preset", "vllm-0.11"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("config: ")]
    assert "vllm_release=0.11.2" in line.split(", ")
    assert main(["run", "--num-gpu-blocks-override", "64", "--requests", "3"]) == 0
    assert "vllm_release" not in capsys.readouterr().out
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nnum_blocks = 64\nvllm_release = "0.22.1"\n')
    assert (
        _json(capsys, ["run", "--toml", str(run_file), "--requests", "3"])["config"]["vllm_release"]
        == "0.22.1"
    )
    # the flag over the run file
    out = _json(capsys, ["run", "--toml", str(run_file), "--requests", "3", "--vllm-release", "v0"])
    assert out["config"]["vllm_release"] == "v0"


def test_kvsim_run_takes_auto_with_the_classic_free_order_and_refuses_it_by_the_release(capsys, tmp_path):
    out = _json(capsys, [*RUN_70B, "--free-order", "classic", "--max-model-len", "auto"])
    assert out["config"]["max_model_len"] == 40_576
    err = _error(capsys, [*RUN_70B, "--preset", "vllm-0.20", "--max-model-len", "auto"])
    assert err.startswith(
        "kvsim run: error: argument --max-model-len: max_model_len auto (-1): preset vllm-0.20 is an older vLLM"
    )
    assert "vLLM 0.22.1 (vllm_release '0.22.1': preset vllm-0.20, vLLM 0.20.0 to 0.22.1)" in err
    err = _error(
        capsys, [*RUN_70B, "--preset", "vllm-latest", "--vllm-release", "0.22.1", "--max-model-len", "auto"]
    )
    assert err.startswith(
        "kvsim run: error: argument --max-model-len: max_model_len auto (-1): vllm_release '0.22.1' is an older vLLM"
    )
    err = _error(capsys, [*RUN_70B, "--vllm-release", "0.18.1", "--max-model-len", "auto"])
    assert err.startswith(
        "kvsim run: error: argument --max-model-len: max_model_len auto (-1) under vLLM 0.18.1 "
    )
    out = _json(
        capsys, [*RUN_70B, "--preset", "vllm-v1", "--vllm-release", "0.33.0", "--max-model-len", "auto"]
    )
    assert (out["config"]["vllm_release"], out["config"]["free_order"]) == ("0.33.0", "classic")
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nvllm_release = "0.11.2"\nmax_model_len = "auto"\n')
    err = _error(capsys, [*RUN_70B, "--toml", str(run_file)])
    assert "max_model_len auto (-1) under vLLM 0.11.2 (vllm_release '0.11.2': preset vllm-0.11" in err


def test_bad_releases_are_one_line_errors(capsys, tmp_path):
    small = ["run", "--num-gpu-blocks-override", "64", "--requests", "3"]
    err = _error(capsys, [*small, "--vllm-release", "0.33"])
    assert err.startswith(
        "kvsim run: error: argument --vllm-release: vllm_release '0.33' is not one of '0.34.0'"
    )
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nnum_blocks = 64\nvllm_release = "0.23.0"\n')
    err = _error(capsys, ["run", "--toml", str(run_file), "--requests", "3"])
    assert err.startswith(
        f"kvsim run: error: run file {run_file}: [config] vllm_release '0.23.0' is not one of"
    )
    err = _error(capsys, ["sweep", "--requests", "5", "--no-progress", "--base", "num_blocks=64",
                          "--grid", "vllm_release=0.34.0,0.35.0"])  # fmt: skip
    assert err.startswith("kvsim sweep: error: --grid vllm_release: vllm_release '0.35.0' is not one of"), err
    err = _error(capsys, [*PLAN, "--num-gpu-blocks-override", "64", "--compare", "vllm_release=0.34.0,1"])
    assert err.startswith("kvsim plan: error: argument --compare: vllm_release '1' is not one of"), err


def test_the_command_lines_dtype_list_and_block_note_follow_the_release(capsys):
    """`--kv-cache-dtype fp16` is refused by 0.33.0's and 0.34.0's list (kvsim's own name) and kept under an
    older release, however the release was set; a block no backend takes is refused under a read release and
    noted under an older one."""
    llama = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "2"]
    assert "vLLM's name for it is float16" in _error(capsys, [*llama, "--kv-cache-dtype", "fp16"])
    assert (
        _json(capsys, [*llama, "--vllm-release", "0.19.1", "--kv-cache-dtype", "fp16"])["config"][
            "kv_cache_dtype"
        ]
        == "fp16"
    )
    err = _error(
        capsys, [*llama, "--preset", "vllm-0.19", "--vllm-release", "0.33.0", "--kv-cache-dtype", "fp16"]
    )
    assert "vLLM's name for it is float16" in err
    err = _error(capsys, [*llama, "--vllm-release", "0.19.1", "--kv-cache-dtype", "nvfp4"])
    assert err.startswith(
        "kvsim run: error: argument --kv-cache-dtype: kv_cache_dtype 'nvfp4' under vllm_release '0.19.1'"
    )
    err = _error(capsys, [*llama, "--preset", "vllm-v1", "--vllm-release", "0.33.0", "--block-size", "8"])
    assert "block size 8: vLLM 0.33.0 and 0.34.0 start no attention backend" in err
    assert main([*llama, "--vllm-release", "0.18.1", "--block-size", "8"]) == 0
    assert (
        "kvsim has not read the backends' sizes of vllm_release '0.18.1' and runs it as asked"
        in capsys.readouterr().out
    )


def test_the_prefill_replicas_take_the_runs_release_or_their_own(capsys):
    fleet = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--replicas", "1", "--prefill-replicas", "1",
             "--requests", "2"]  # fmt: skip
    err = _error(capsys, [*fleet, "--prefill-config", "max_model_len=auto,vllm_release=0.18.1"])
    assert err.startswith(
        "kvsim run: error: argument --prefill-config: max_model_len auto (-1) under vLLM 0.18.1 "
    )
    # (the run's older release reaches the prefill replicas' dtype list: fp16 passes it, and then the layouts
    # differ, the fleet's own refusal)
    err = _error(capsys, [*fleet, "--vllm-release", "0.18.1", "--prefill-config", "kv_cache_dtype=fp16"])
    assert "KV cache dtype fp16 differs from the decode replicas'" in err, err
    err = _error(capsys, [*fleet, "--prefill-config", "kv_cache_dtype=fp16"])
    assert "vLLM's name for it is float16" in err, err


def test_a_sweep_grid_runs_each_release_and_ids_keep_the_defaults(tmp_path):
    spec = SweepSpec(
        name="releases",
        grid=parse_grid_args(["vllm_release=0.34.0,0.33.0,v0"]),
        base={"num_blocks": 64, "time_model": "ticks"},
        workloads=["sharegpt"],
        seeds=1,
        requests=5,
    )
    points = list(spec.points())
    assert [p.sim_config().vllm_release for p in points] == ["0.34.0", "0.33.0", "v0"]
    ids = [p.point_id() for p in points]
    assert len(set(ids)) == 3
    # the defaults' release is left out of the id: a point keeps the id it had before configurations had one
    bare = Point(config={"num_blocks": 64, "time_model": "ticks"}, workload="sharegpt", workload_params={}, seed=0,
                 requests=5)  # fmt: skip
    assert bare.point_id() == points[0].point_id()
    frame = run_sweep(
        spec, executor="threads", workers=1, progress=False, output=tmp_path / "r.parquet"
    ).frame
    assert sorted(frame["vllm_release"].to_list()) == ["0.33.0", "0.34.0", "v0"]


def test_plan_compares_releases_and_refuses_an_older_ones_auto(capsys):
    llama = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    assert main([*PLAN, *llama, "--compare", "vllm_release=0.33.0,0.34.0"]) == 0
    out = capsys.readouterr().out
    assert "vllm_release=0.33.0 " in out
    assert "vllm_release=0.34.0 " in out
    err = _error(capsys, [*PLAN, *llama, "--max-model-len", "auto", "--compare", "vllm_release=0.34.0,v0"])
    assert err.startswith(
        "kvsim plan: error: argument --compare: candidate vllm_release=v0: max_model_len auto (-1) under vLLM's v0 "
        "engine (vllm_release 'v0': preset vllm-v0)"
    ), err
