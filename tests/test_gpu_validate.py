"""GPU validation on CPU (DESIGN.md §GPU validation): numerics, bytes, the fit, the calibrated time model.

The torch tests skip only when torch (the `gpu` extra) is missing and `KVSIM_REQUIRE_TORCH` is unset;
`make gpu-test` installs the extra and sets it, so there they must run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.gpu.calibrate import fit_grid, fit_linear, grid
from kvsim.model import linear_time
from kvsim.workloads import synthetic

try:
    import torch
except ImportError:  # pragma: no cover - the gpu extra is absent
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None and os.environ.get("KVSIM_REQUIRE_TORCH") != "1",
    reason="torch (the gpu extra) is not installed; `make gpu-test` installs it and runs these",
)
MODEL = "llama-3-8b"


@pytest.fixture(autouse=True)
def _one_torch_thread() -> object:
    """Small tensors: torch's thread pool only contends on a shared machine (20x slower measured)."""
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_import_kvsim_does_not_import_torch() -> None:
    code = "import sys, kvsim, kvsim.cli, kvsim.gpu.validate; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the fit (numpy only) -------------------------------------------------------------------------------


def _synthetic_points(c0: float, c_tok: float, c_ctx: float, noise: float = 0.0) -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    points = []
    for b, c, p in grid(quick=False, cuda=True):
        tok, ctx = b + p, b * c
        t = (c0 + c_tok * tok + c_ctx * ctx) * (1 + noise * rng.standard_normal())
        points.append({"tokens": tok, "context_tokens": ctx, "seconds": t})
    return points


@pytest.mark.parametrize(
    "coef", [(7e-3, 2e-5, 1.5e-8), (2.5e-4, 3e-7, 0.0), (1e-2, 0.0, 4e-9)], ids=["all", "no-ctx", "no-tok"]
)
def test_fit_recovers_known_coefficients(coef: tuple[float, float, float]) -> None:
    fit = fit_grid(_synthetic_points(*coef))
    for got, want in zip((fit["c0_s"], fit["c_tok_s"], fit["c_ctx_s"]), coef, strict=True):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-15)
    assert fit["fit_rel_error_max"] < 1e-6
    assert fit["held_out_rel_error_max"] < 1e-6
    assert fit["held_out_points"] > 0
    assert fit["c0_ps"] == round(coef[0] * 1e12)


def test_fit_with_noise_reports_its_error() -> None:
    coef = (7e-3, 2e-5, 1.5e-8)
    fit = fit_grid(_synthetic_points(*coef, noise=0.02))
    assert fit["c0_s"] == pytest.approx(coef[0], rel=0.05)
    assert fit["c_ctx_s"] == pytest.approx(coef[2], rel=0.1)
    assert 0.001 < fit["fit_rel_error_median"] < 0.05
    assert fit["held_out_rel_error_max"] > 0


def test_fit_is_non_negative() -> None:
    # Times that fall with tokens would need a negative c_tok: it is clamped to 0 and the rest refitted.
    c0, c_tok, c_ctx = fit_linear([1, 10, 100], [0, 0, 0], [3.0, 2.0, 1.0])
    assert c_tok == 0.0
    assert c_ctx == 0.0
    assert c0 > 0


# -- the calibrated time model ---------------------------------------------------------------------------


def _calibration_file(tmp_path: Path, model: str = MODEL, **coef: int) -> Path:
    data = {
        "kvsim_calibration": 1,
        "name": f"test-{model}",
        "model": model,
        "device": "test",
        "device_kind": "cpu",
        "gpu_preset": None,
        "coefficients": {"c0_ps": 5_000_000_000, "c_tok_ps": 20_000_000, "c_ctx_ps": 10_000, **coef},
    }
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return path


def test_calibrated_time_model_loads_and_runs_on_both_backends(tmp_path: Path) -> None:
    path = _calibration_file(tmp_path)
    cfg = kvsim.SimConfig(num_blocks=200, time_model="calibrated", calibration=str(path))
    assert (cfg.c0_ps, cfg.c_tok_ps, cfg.c_ctx_ps) == (5_000_000_000, 20_000_000, 10_000)
    linear = kvsim.SimConfig(
        num_blocks=200, time_model="linear", c0_ps=5_000_000_000, c_tok_ps=20_000_000, c_ctx_ps=10_000
    )
    w = synthetic(
        60,
        arrival_rate=50,
        lengths="uniform",
        length_params={"prompt_len": (5, 50), "output_len": (1, 40)},
        seed=3,
    )
    rust = kvsim.simulate(w, cfg)
    ref = kvsim.simulate(w, cfg, backend="reference")
    assert rust.summary == ref.summary
    assert rust.summary == kvsim.simulate(w, linear).summary  # calibrated is the linear model, measured
    with_model = kvsim.SimConfig(model=MODEL, gpu="h200", time_model="calibrated", calibration=str(path))
    assert with_model.swap_ps_per_block > 0  # swap over PCIe from the roofline of model + gpu


def test_calibration_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="needs calibration"):
        kvsim.SimConfig(num_blocks=10, time_model="calibrated")
    with pytest.raises(InvalidArgumentError, match="neither a shipped name"):
        kvsim.SimConfig(num_blocks=10, time_model="calibrated", calibration="no-such-gpu")
    with pytest.raises(InvalidArgumentError, match=r"cannot read .*missing.json \(No such file"):
        kvsim.SimConfig(num_blocks=10, time_model="calibrated", calibration=str(tmp_path / "missing.json"))
    with pytest.raises(InvalidArgumentError, match="c_ctx_ps -1 must be a non-negative integer"):
        kvsim.SimConfig(
            num_blocks=10, time_model="calibrated", calibration=str(_calibration_file(tmp_path, c_ctx_ps=-1))
        )
    with pytest.raises(InvalidArgumentError, match="measured for model 'llama-3-8b', not 'opt-13b'"):
        kvsim.SimConfig(
            model="opt-13b",
            gpu="a100-40gb",
            time_model="calibrated",
            calibration=str(_calibration_file(tmp_path)),
        )
    # A linear calibration makes `auto` the calibrated linear model; ticks and the roofline refuse it.
    assert (
        kvsim.SimConfig(num_blocks=10, calibration=str(_calibration_file(tmp_path))).time_model
        == "calibrated"
    )
    with pytest.raises(InvalidArgumentError, match="needs time_model 'roofline', 'calibrated' or 'auto'"):
        kvsim.SimConfig(num_blocks=10, time_model="ticks", calibration=str(_calibration_file(tmp_path)))
    with pytest.raises(InvalidArgumentError, match="holds linear coefficients"):
        kvsim.SimConfig(
            model=MODEL, gpu="h200", time_model="roofline", calibration=str(_calibration_file(tmp_path))
        )


def test_calibrations_lists_and_loads_shipped_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _calibration_file(tmp_path, c0_ps=123)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "h200-llama-3-8b.json").write_text(src.read_text())
    monkeypatch.setattr(linear_time, "CALIBRATION_DIR", shipped)
    assert kvsim.sizing.calibrations() == ["h200-llama-3-8b"]
    cfg = kvsim.SimConfig(model=MODEL, gpu="h200", time_model="calibrated", calibration="h200-llama-3-8b")
    assert cfg.c0_ps == 123
    with pytest.raises(InvalidArgumentError, match=r"shipped name \(h200-llama-3-8b\)"):
        kvsim.sizing.load_calibration("h100-llama-3-8b")


def test_shipped_calibrations_load_by_name() -> None:
    names = kvsim.sizing.calibrations()
    assert names  # kvsim calibrate's, fitted to the profiled GPUs
    for name in names:
        cal = kvsim.sizing.load_calibration(name)
        assert name == cal.name
        if cal.kind == "linear":
            assert cal.device_kind == "cuda"  # CPU smoke runs are never shipped
        else:  # a roofline calibration: its GPU's preset, any model on it
            cfg = kvsim.SimConfig(model="qwen3-8b", gpu=cal.gpu, calibration=name, max_model_len=8192)
            assert cfg.time_model == "roofline"
            fixed = cal.efficiencies.step_overhead_ps + 36 * cal.efficiencies.layer_overhead_ps  # 36 layers
            assert cfg.roofline.fixed_ps == pytest.approx(fixed, abs=1)


# -- numerics --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run() -> object:
    from kvsim.gpu.numerics import sample_run

    return sample_run()


@needs_torch
def test_sample_run_exercises_sharing_cow_and_preemption(run: object) -> None:
    _, _, res = run  # type: ignore[misc]
    s = res.summary
    assert s["prefix_hit_tokens"] > 0
    assert s["cow_copies"] > 0
    assert s["preemptions"] > 0
    assert s["evictions"] > 0


@needs_torch
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_replay_passes_for_each_dtype(run: object, dtype: str) -> None:
    from kvsim.gpu.numerics import THRESHOLDS, replay

    r = replay(run, MODEL, dtype=dtype)
    assert r.passed(), r.as_dict()
    assert r.sequences_checked == 48  # every sequence (24 requests; 12 of them with 3 samples) finished
    assert r.kv_mismatches == 0
    assert r.max_abs_vs_contiguous == 0.0
    assert r.max_abs_vs_sdpa <= THRESHOLDS[dtype]["vs_sdpa"]
    assert r.prefix_hits > 0
    assert r.forks > 0
    assert r.cow_copies > 0
    assert r.cross_reads > 0


@needs_torch
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("num_blocks", [20, 48])
def test_replay_passes_on_other_runs(seed: int, num_blocks: int) -> None:
    from kvsim.gpu.numerics import replay, sample_run

    r = replay(sample_run(num_blocks=num_blocks, seed=seed), MODEL, num_layers=1)
    assert r.passed(), r.as_dict()


@needs_torch
@pytest.mark.parametrize(
    ("fault", "counter"),
    [
        ("gather-order", "kv_mismatches"),
        ("write-twice", "double_writes"),
        ("off-by-one", "kv_mismatches"),
        ("cow-alias", "cow_parent_changed"),
    ],
)
def test_each_fault_is_caught(run: object, fault: str, counter: str) -> None:
    from kvsim.gpu.numerics import replay

    r = replay(run, MODEL, num_layers=1, faults=[fault])
    assert not r.passed()
    assert getattr(r, counter) > 0, r.as_dict()


@needs_torch
@pytest.mark.parametrize("kind", ["prefix-hit", "cow-copy"])
def test_a_simulator_sharing_the_wrong_block_is_caught(run: object, kind: str) -> None:
    """Not a fault of the replay: an event log in which the engine took a wrong block (a prefix hit on a
    block of other content, a CoW copy into a block still in use) fails the checks."""
    import dataclasses

    import polars as pl

    from kvsim.gpu.numerics import replay

    w, cfg, res = run  # type: ignore[misc]
    ev = res.events
    kinds = ev["kind"].cast(str)
    row = int(np.flatnonzero((kinds == kind).to_numpy())[3])
    blocks = ev["block"].to_numpy().copy()
    used = set(blocks[:row][(kinds == "allocate").to_numpy()[:row]])
    blocks[row] = next(b for b in sorted(used) if b != blocks[row])
    broken = dataclasses.replace(res, events=ev.with_columns(block=pl.Series(blocks)))
    r = replay((w, cfg, broken), MODEL, num_layers=1)
    assert not r.passed(), r.as_dict()
    assert r.kv_mismatches > 0  # the bits a sequence reads are not its own


@needs_torch
def test_wrong_gather_order_fails_the_attention_threshold(run: object) -> None:
    from kvsim.gpu.numerics import THRESHOLDS, replay

    r = replay(run, MODEL, num_layers=1, dtype="fp16", faults=["gather-order"])
    assert r.max_abs_vs_sdpa > THRESHOLDS["fp16"]["vs_sdpa"]
    assert r.max_abs_vs_contiguous > 0


@needs_torch
def test_cow_copy_write_leaves_parent_intact(run: object) -> None:
    from kvsim.gpu.numerics import replay

    r = replay(run, MODEL, num_layers=1)
    assert r.cow_copies > 0
    assert r.cow_parent_changed == 0


@needs_torch
def test_replay_refuses_swapping() -> None:
    from kvsim.gpu.numerics import replay

    w = synthetic(
        30,
        arrival_rate=500,
        lengths="uniform",
        length_params={"prompt_len": (20, 40), "output_len": (20, 40)},
        num_samples=2,
        seed=0,
    )
    cfg = kvsim.SimConfig(num_blocks=20, sampling="fork-cow", preemption="swap", cpu_blocks=100)
    res = kvsim.simulate(w, cfg, record_events=True)
    assert res.summary["swapped_blocks"] > 0
    with pytest.raises(InvalidArgumentError, match="recompute preemption only"):
        replay((w, cfg, res), MODEL, num_layers=1)


@needs_torch
def test_bf16_skip_reason_on_sm75(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvsim.gpu import numerics

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert "sm_75" in (numerics.dtype_support("bf16", "cuda") or "")
    assert numerics.dtype_support("fp16", "cuda") is None


# -- bytes -----------------------------------------------------------------------------------------------


@needs_torch
def test_bytes_agree_exactly() -> None:
    from kvsim.gpu.bytes import run_bytes

    out = run_bytes(MODEL)
    assert out["passed"], out
    m = kvsim.models.get(MODEL)
    assert out["pool"]["measured"] == out["num_blocks"] * 16 * m.kv_bytes_per_token
    assert out["pool_blocks"] == out["num_blocks"]
    assert out["paged_peak"]["measured"] == out["paged_peak"]["summary_bytes"] > 0
    assert out["contiguous_peak"]["measured"] == out["contiguous_peak"]["summary_bytes"] > 0


@needs_torch
def test_peak_from_events_matches_the_engine() -> None:
    from kvsim.engine.engine_input import prepare
    from kvsim.gpu.bytes import peak_held_blocks, peak_regions
    from kvsim.gpu.numerics import sample_run

    for seed in (0, 3):
        w, cfg, res = sample_run(num_blocks=28, seed=seed)
        peak, held = peak_held_blocks(res, prepare(w, cfg))
        assert peak == len(held) == res.raw.counters["peak_allocated_tokens"] // cfg.block_size
        c = cfg.replace(policy="orca-max", sampling="independent")
        cres = kvsim.simulate(w, c, record_events=True)
        tokens, regions = peak_regions(cres, prepare(w, c), c)
        assert tokens == sum(regions) == cres.raw.counters["peak_allocated_tokens"]


# -- the command -----------------------------------------------------------------------------------------


@needs_torch
def test_validate_quick_on_cpu_writes_the_report(tmp_path: Path) -> None:
    from kvsim.gpu.validate import main

    assert main(["--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "gpu_validation.md").read_text()
    data = json.loads((tmp_path / "gpu_validation.json").read_text())
    assert md.startswith("# GPU validation (CPU)")
    assert "**Device: CPU.**" in md
    assert data["passed"]
    assert data["device_kind"] == "cpu"
    cal = json.loads((tmp_path / "calibration" / f"cpu-{MODEL}.json").read_text())
    assert cal["device_kind"] == "cpu"
    assert "not a calibration to ship" in cal["note"]
    assert set(cal["coefficients"]) == {"c0_ps", "c_tok_ps", "c_ctx_ps"}
    assert (
        kvsim.SimConfig(
            num_blocks=10,
            time_model="calibrated",
            calibration=str(tmp_path / "calibration" / f"cpu-{MODEL}.json"),
        ).c0_ps
        == cal["coefficients"]["c0_ps"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "tpu"], "device 'tpu' is not one of"),
        (["--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["--model", "deepseek-v3"], "MLA latent"),
        (["--layers", "0"], "layers 0 must lie in"),
    ],
)
def test_validate_gpu_bad_input_is_one_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvsim.cli import main

    assert main(["validate-gpu", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("kvsim validate-gpu: error:")
    assert message in err
    assert not list(tmp_path.iterdir())  # a rejected call writes nothing
