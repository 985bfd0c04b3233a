"""`kvsim calibrate` (DESIGN.md §Time model, "Calibration"): the fit recovers known efficiencies, the shipped
calibrations are what their recorded commands write from the real profiles in ../shared/validation, their
held-out errors are reported, and bad input is one line, exit 2."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

import kvsim
from kvsim.analysis.calibrate import (
    START,
    Family,
    Profile,
    calibrate,
    predict,
    read_profile,
)
from kvsim.cli import main
from kvsim.model.sizing import CALIBRATION_DIR, load_calibration

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "validation"
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason="../shared/validation (the real measurements) is not beside this clone"
)


def _synthetic_profile(truth: dict[str, float]) -> Profile:
    """Operator rows of Llama-3.1-8B on an RTX PRO 6000 timed exactly as `truth` predicts them."""
    m, g = kvsim.models.get("llama-3.1-8b"), kvsim.gpus.get("rtx-pro-6000")
    from kvsim.analysis.calibrate import _attention_family, _gemm_family

    gemm = [
        (op, t, 1, 1.0)
        for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
        for t in (1, 16, 64, 256, 1024, 2048, 4096)
    ]
    att = [
        (pc, kp, nd, kd, 1, 1.0)
        for pc in (0, 256, 2048)
        for kp in (0, 4096)
        for nd in (0, 16, 128)
        for kd in (256, 4096)
        if pc or nd
    ]
    fams = [_gemm_family(m, g, gemm), _attention_family(m, att)]
    seqs = np.array([1.0, 8, 32, 128, 256] * 2)
    fams.append(Family("sampler", np.ones(len(seqs)), {"seqs": seqs}, np.array(["sampler"] * len(seqs))))
    p = {**START, **truth}
    for f in fams:
        f.seconds = predict(f, p, g, m)
    return Profile(g, m, "synthetic", fams, "llmservingsim")


def test_the_fit_recovers_the_efficiencies_that_made_the_times():
    truth = {
        "gemm_memory": 0.83,
        "gemm_compute": 0.62,
        "gemm_floor": 4e-6,
        "attention_memory": 0.77,
        "attention_compute": 0.41,
        "attention_mixed": 0.35,
        "attention_floor": 9e-6,
        "seq_overhead": 2e-7,
        "sampler_fixed": 3e-5,
    }
    cal = calibrate(_synthetic_profile(truth), holdout_every=4)
    for k, v in truth.items():
        assert cal.params[k] == pytest.approx(v, rel=0.01), k
    for fam in cal.fit["families"].values():
        assert fam["held_out_error"]["median"] < 0.005
    e = cal.efficiencies
    # Per layer: four projections' floors and attention's (no elementwise rows: none of theirs).
    assert e.layer_overhead_ps == pytest.approx((4 * 4e-6 + 9e-6) * 1e12, rel=0.02)
    assert e.seq_overhead_ps == pytest.approx(2e-7 * 1e12, rel=0.02)


SHIPPED = sorted(CALIBRATION_DIR.glob("*.json"))


@needs_shared
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_each_shipped_calibration_is_what_its_command_writes(path, tmp_path, capsys):
    data = json.loads(path.read_text())
    argv = shlex.split(data["command"])
    assert argv[:2] == ["kvsim", "calibrate"]
    assert "--ship" in argv
    args = [a for a in argv[2:] if a != "--ship"]
    out = tmp_path / "again.json"
    assert main(["calibrate", *args, "--output", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["efficiencies"] == data["efficiencies"]
    assert again["fit"] == data["fit"]
    assert "held out" in capsys.readouterr().out
    cal = load_calibration(path.stem)
    assert cal.kind == "roofline"
    assert cal.gpu in kvsim.gpus.names()


@needs_shared
def test_the_rtx_pro_6000_profile_is_fitted_within_its_held_out_rows():
    (prof,) = read_profile(SHARED / "llmservingsim" / "profiles" / "RTXPRO6000" / "Llama-3.1-8B")
    cal = calibrate(prof)
    fams = cal.fit["families"]
    # The projections and the decode-only attention, what a serving run's steps are mostly made of.
    assert fams["projections"]["held_out_error"]["median"] < 0.10
    assert fams["attention"]["operators"]["decode only"]["median"] < 0.10
    assert fams["sampler"]["held_out_error"]["median"] < 0.15
    e = cal.efficiencies
    assert 0.85 < e.gemm_memory <= 1
    assert 0.5 < e.gemm_compute < 0.9
    # Decodes beside a prefill chunk run slower than alone (vLLM 0.19's one attention kernel a step).
    assert e.attention_mixed < 0.6 * e.attention_memory


@needs_shared
def test_splitwise_and_vidur_read_and_fit():
    profiles = read_profile(SHARED / "splitwise" / "perf_model.csv")
    assert {(p.model.name, p.gpu.name) for p in profiles} == {
        ("llama-2-70b", "a100-80gb"),
        ("llama-2-70b", "h100-80gb"),
    }
    (vidur,) = read_profile(SHARED / "vidur" / "a100-meta-llama-3-8b-mlp.csv")
    cal = calibrate(vidur)
    assert cal.gpu == "a100-80gb"
    assert cal.fit["families"]["projections"]["held_out_error"]["median"] < 0.10
    assert cal.efficiencies.attention_memory == 1.0  # Vidur's file holds no attention: the datasheet's rate


def _error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_bad_input_is_one_line(tmp_path, capsys):
    assert "profile /no/such: no such file or folder" in _error(["calibrate", "/no/such"], capsys)
    bad = tmp_path / "prof.csv"
    bad.write_text("num_tokens,num_tensor_parallel_workers\nx,1\n")
    assert "column 'num_tokens'" in _error(
        ["calibrate", str(bad), "--gpu", "a100-80gb", "--model", "llama-3-8b"], capsys
    )
    assert "--holdout-every" in _error(["calibrate", str(bad), "--holdout-every", "1"], capsys)
    (tmp_path / "empty").mkdir()
    assert "no tp<N>/ folder" in _error(
        ["calibrate", str(tmp_path / "empty"), "--gpu", "rtx-4090", "--model", "llama-3-8b"], capsys
    )
    cpu = tmp_path / "gpu_validation.json"
    cpu.write_text(json.dumps({"device_kind": "cpu", "calibration": {"grid": []}}))
    assert "not a GPU: its timings calibrate nothing" in _error(["calibrate", str(cpu)], capsys)
