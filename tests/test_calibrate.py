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
from kvsim.model.linear_time import CALIBRATION_DIR, load_calibration

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "validation"
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason="../shared/validation (the real measurements) is not beside this clone"
)


def _synthetic_profile(truth: dict[str, float]) -> Profile:
    """Operator rows of Llama-3.1-8B on an RTX PRO 6000 timed exactly as `truth` predicts them."""
    m, g = kvsim.models.get("llama-3.1-8b"), kvsim.gpus.get("rtx-pro-6000")
    from kvsim.analysis.calibrate_profiles import _attention_family, _gemm_family

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
def test_the_readmes_calibrate_example_says_what_the_fit_gives():
    """README's `kvsim calibrate` example quotes the fit's held-out medians (projections, attention), as the
    command prints them: each as the fit gives it now."""
    import re

    readme = (ROOT / "README.md").read_text()
    m = re.search(
        r"kvsim calibrate (\S+)\n# \.\.\. per operator family: .*?\(projections ([\d.]+) %\n# held-out median; "
        r"attention ([\d.]+) %\)",
        readme,
    )
    assert m, "the README's calibrate example"
    assert m.group(1) == "../shared/validation/llmservingsim/profiles/RTXPRO6000/Llama-3.1-8B"
    (prof,) = read_profile(SHARED / "llmservingsim" / "profiles" / "RTXPRO6000" / "Llama-3.1-8B")
    fams = calibrate(prof).fit["families"]
    figures = (
        fams["projections"]["held_out_error"]["median"],
        fams["attention"]["held_out_error"]["median"],
    )
    assert tuple(f"{100 * f:.1f}" for f in figures) == m.groups()[1:]


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


@needs_shared
def test_the_table_marks_what_the_profile_did_not_fit():
    """rev48b #7: `kvsim calibrate` printed `link 1` and `collective_hop_ps 3,000,000 ps` among the fitted
    efficiencies, defaults that a one-GPU profile times nothing of; they say so, and the fitted do not (a
    profile without attention leaves the attention rates at the default too). Splitwise's TP 2-8 steps fit
    the collective hop."""
    said = "(not fitted: the default; nothing in the profile times it)"

    def marked(cal) -> set[str]:
        return {line.split()[0] for line in cal.table().splitlines() if line.endswith(said)}

    (prof,) = read_profile(SHARED / "llmservingsim" / "profiles" / "RTXPRO6000" / "Llama-3.1-8B")
    assert marked(calibrate(prof)) == {"link", "collective_hop_ps"}
    (vidur,) = read_profile(SHARED / "vidur" / "a100-meta-llama-3-8b-mlp.csv")
    assert {"link", "attention_memory", "attention_compute", "attention_mixed"} <= marked(calibrate(vidur))
    assert "gemm_memory" not in marked(calibrate(vidur))
    splitwise = read_profile(SHARED / "splitwise" / "perf_model.csv")[0]
    assert "collective_hop_ps" not in marked(calibrate(splitwise))


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


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_a_grid_too_small_to_fit_is_refused_and_json_has_no_nan(tmp_path, capsys, rows):
    """A kvsim.gpu.validate report of 0 or 1 grid rows was fitted (four parameters from one row, or
    nothing), printed a held-out error of nan% and wrote `"median": NaN`, which is not JSON."""
    grid = [
        {"batch": 8 * (i + 1), "context": 512, "prefill": 0, "seconds": 0.01 * (i + 1)} for i in range(rows)
    ]
    report = tmp_path / "gpu_validation.json"
    report.write_text(json.dumps({"device_kind": "cuda", "calibration": {"grid": grid}}))
    argv = ["calibrate", str(report), "--gpu", "h100-80gb", "--model", "llama-3-8b"]
    out = tmp_path / "cal.json"
    line = _error([*argv, "--output", str(out)], capsys)
    assert "fitting 4 parameters" in line
    assert "needs at least 4" in line
    assert not out.exists()


def test_a_fit_with_nothing_held_out_says_so_in_valid_json(tmp_path, capsys):
    grid = [
        {"batch": b, "context": c, "prefill": 0, "seconds": 0.004 + b * c * 1e-8}
        for b in (1, 8, 64)
        for c in (256, 4096)
    ]
    report = tmp_path / "gpu_validation.json"
    report.write_text(json.dumps({"device_kind": "cuda", "calibration": {"grid": grid}}))
    out = tmp_path / "cal.json"
    argv = [
        "calibrate",
        str(report),
        "--gpu",
        "h100-80gb",
        "--model",
        "llama-3-8b",
        "--holdout-every",
        "1000",
    ]
    assert main([*argv, "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    steps = json.loads(out.read_text())["fit"]["families"]["steps"]  # (json.loads takes NaN: check the text)
    assert "NaN" not in out.read_text()
    assert steps["held_out"] == 0
    assert steps["held_out_error"] == {"median": None, "p90": None}
    assert "nan%" not in printed


def _vidur(tmp_path: Path, rows: list[str] | None = None) -> Path:
    """A small Vidur profile of A100 Llama-3-8B rows (times in ms)."""
    from kvsim.analysis.calibrate_profiles import VIDUR_ELEMENTWISE, VIDUR_OPS

    ops = [*VIDUR_OPS, *VIDUR_ELEMENTWISE]
    head = "num_tokens,num_tensor_parallel_workers," + ",".join(f"time_stats.{op}.median" for op in ops)
    body = rows or [
        f"{t},1," + ",".join(f"{0.01 * t + 0.005:.4f}" for _ in ops) for t in (1, 8, 64, 512, 2048)
    ]
    p = tmp_path / "a100-meta-llama-3-8b-mlp.csv"
    p.write_text("\n".join([head, *body]) + "\n")
    return p


def test_a_profile_that_is_not_utf8_is_one_line_naming_the_file(tmp_path, capsys):
    junk = bytes(range(128, 256)) * 3
    binary = tmp_path / "bin.csv"
    binary.write_bytes(junk)
    for fmt in ("vidur", "splitwise"):
        err = _error(
            ["calibrate", str(binary), "--format", fmt, "--gpu", "a100-80gb", "--model", "llama-3-8b"], capsys
        )
        assert f"profile {binary}: not UTF-8 text" in err
    for name in ("meta.yaml", "tp1/dense.csv"):
        prof = tmp_path / name.replace("/", "_")
        (prof / "tp1").mkdir(parents=True)
        for f in ("dense.csv", "attention.csv", "per_sequence.csv"):
            (prof / "tp1" / f).write_text("layer,tokens,time_us\n")
        (prof / name).write_bytes(junk)
        err = _error(["calibrate", str(prof), "--gpu", "rtx-pro-6000", "--model", "llama-3.1-8b"], capsys)
        assert f"profile {prof / name}: not UTF-8 text" in err


@pytest.mark.parametrize(
    ("cell", "field", "why"),
    [
        ("0", "time_stats.attn_pre_proj.median", "must be a time above 0"),
        ("2.5", "num_tokens", "must be a whole number in [0, 1,099,511,627,776]"),
        ("1e23", "num_tokens", "must be a whole number in [0, 1,099,511,627,776]"),
        ("0", "num_tensor_parallel_workers", "must be a whole number in [1,"),
    ],
)
def test_zero_times_and_bad_counts_are_refused_by_file_line_and_field(tmp_path, capsys, cell, field, why):
    p = _vidur(tmp_path)
    lines = p.read_text().splitlines()
    col = lines[0].split(",").index(field)
    row = lines[3].split(",")
    row[col] = cell
    lines[3] = ",".join(row)
    p.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal.json"
    err = _error(["calibrate", str(p), "--output", str(out)], capsys)
    assert f"profile {p}, line 4: column {field!r} {cell!r} {why}" in err
    assert not out.exists()


def test_splitwise_zero_times_and_batch_size_0_are_refused(tmp_path, capsys):
    head = "model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,tensor_parallel"
    for row, field in (
        ("llama2-70b,a100-80gb,512,1,128,0,0,2", "prompt_time"),
        ("llama2-70b,a100-80gb,512,1,128,190.5,0,2", "token_time"),
        ("llama2-70b,a100-80gb,512,0,128,190.5,54.8,2", "batch_size"),
        ("llama2-70b,a100-80gb,512,2.5,128,190.5,54.8,2", "batch_size"),
    ):
        p = tmp_path / "perf_model.csv"
        p.write_text(f"{head}\n{row}\n")
        err = _error(["calibrate", str(p), "--output", str(tmp_path / "o.json")], capsys)
        assert f"profile {p}, line 2: column {field!r}" in err
    assert list(tmp_path.iterdir()) == [p]


def test_an_output_that_cannot_be_written_is_refused_before_the_fit(tmp_path, capsys, monkeypatch):
    import kvsim.analysis.calibrate as cal_module

    def no_fit(*a, **k):
        raise AssertionError("fitted before the output was checked")

    monkeypatch.setattr(cal_module, "calibrate", no_fit)
    p = _vidur(tmp_path)
    (tmp_path / "afile").write_text("")
    for output, why in (
        (tmp_path / "afile" / "x.json", "afile is a file, not a folder"),
        (Path("/proc/kvsim-no-such/x.json"), "cannot write in /proc"),
        (Path("/dev/full"), "/dev/full is not a regular file"),
        (tmp_path, "is a folder"),
    ):
        err = _error(["calibrate", str(p), "--output", str(output)], capsys)
        assert err.startswith("kvsim calibrate: error: argument --output:"), err
        assert why in err, err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a100-meta-llama-3-8b-mlp.csv", "afile"]


def test_a_failed_write_leaves_no_file(tmp_path):
    from kvsim.cli.calibrate import _write_all
    from kvsim.errors import InvalidArgumentError

    (tmp_path / "afile").write_text("")
    with pytest.raises(InvalidArgumentError, match=r"argument --output: cannot write .*nothing written"):
        _write_all([(tmp_path / "new" / "a.json", "{}\n"), (tmp_path / "afile" / "b.json", "{}\n")])
    assert [x.name for x in tmp_path.iterdir()] == ["afile"]


def test_ship_with_output_is_refused(tmp_path, capsys):
    p = _vidur(tmp_path)
    err = _error(["calibrate", str(p), "--ship", "--output", str(tmp_path / "x.json")], capsys)
    assert "argument --output: not allowed with --ship" in err
    assert not (tmp_path / "x.json").exists()


def test_an_efficiency_too_low_for_the_engines_range_is_refused_by_name(tmp_path, capsys):
    data = json.loads((CALIBRATION_DIR / "rtx-pro-6000-llama-3.1-8b.json").read_text())
    for field, value in (("gemm_memory", 1e-300), ("attention_mixed", 1e-300), ("gemm_memory", 5e-324)):
        bad = json.loads(json.dumps(data))
        bad["efficiencies"][field] = value
        path = tmp_path / f"{field}-{value}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(
            kvsim.InvalidArgumentError, match=f"calibration .*: efficiency {field} {value!r} is too low"
        ):
            kvsim.SimConfig(model="llama-3-8b", gpu="rtx-pro-6000", calibration=str(path))
        err = _error(
            [
                "run",
                "--model",
                "llama-3-8b",
                "--gpu",
                "rtx-pro-6000",
                "--requests",
                "20",
                "--calibration",
                str(path),
            ],
            capsys,
        )
        assert f"efficiency {field} {value!r} is too low" in err
        assert "2^40" in err
    # The least value the message states is the bound: just above it runs, just below it is refused.
    with pytest.raises(kvsim.InvalidArgumentError, match="at least") as exc:
        kvsim.SimConfig(
            model="llama-3-8b", gpu="rtx-pro-6000", calibration=str(tmp_path / "gemm_memory-1e-300.json")
        )
    least = float(str(exc.value).split("at least ")[1].split()[0])
    for factor, ok in ((1.01, True), (0.99, False)):
        bad = json.loads(json.dumps(data))
        bad["efficiencies"]["gemm_memory"] = least * factor
        path = tmp_path / "edge.json"
        path.write_text(json.dumps(bad))
        if ok:
            kvsim.SimConfig(model="llama-3-8b", gpu="rtx-pro-6000", calibration=str(path))
        else:
            with pytest.raises(kvsim.InvalidArgumentError):
                kvsim.SimConfig(model="llama-3-8b", gpu="rtx-pro-6000", calibration=str(path))


@needs_shared
def test_gpu_other_than_the_profiles_own_is_refused(tmp_path, capsys):
    """A newcomer review: `kvsim calibrate .../RTXPRO6000/Llama-3.1-8B --gpu h100-80gb` wrote
    "calibration h100-80gb-llama-3.1-8b" of RTX PRO 6000 timings fitted to the H100's datasheet. Where the
    profile names a GPU kvsim knows, --gpu must be it; it names the GPU of a profile whose own is unknown."""
    pro = SHARED / "llmservingsim" / "profiles" / "RTXPRO6000" / "Llama-3.1-8B"
    out = tmp_path / "cal.json"
    err = _error(["calibrate", str(pro), "--gpu", "h100-80gb", "--output", str(out)], capsys)
    assert err.startswith(
        f"kvsim calibrate: error: profile {pro}: measured on 'RTXPRO6000' (kvsim's rtx-pro-6000), not h100-80gb"
    ), err
    assert "drop --gpu h100-80gb" in err
    assert not out.exists()
    assert main(["calibrate", str(pro), "--gpu", "rtx-pro-6000", "--output", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["gpu"] == "rtx-pro-6000"  # its own GPU, named again
    vidur = SHARED / "vidur" / "a100-meta-llama-3-8b-mlp.csv"
    err = _error(["calibrate", str(vidur), "--gpu", "a100-40gb", "--output", str(out)], capsys)
    assert "measured on 'a100' (kvsim's a100-80gb), not a100-40gb" in err
    splitwise = SHARED / "splitwise" / "perf_model.csv"
    err = _error(["calibrate", str(splitwise), "--gpu", "rtx-4090", "--output", str(out)], capsys)
    assert "measured on a100-80gb, h100-80gb, h100-80gb-pcap, none of them kvsim's rtx-4090 (--gpu)" in err
    (h100,) = read_profile(splitwise, gpu="h100-80gb")  # --gpu picks Splitwise's rows of that GPU
    assert (h100.gpu.name, "on h100-80gb;" in h100.source) == ("h100-80gb", True)


def test_a_report_of_a_gpu_kvsim_knows_keeps_it_and_of_one_it_does_not_takes_gpu(tmp_path, capsys):
    grid = [
        {"batch": b, "context": c, "prefill": 0, "seconds": 0.004 + b * c * 1e-8}
        for b in (1, 8, 64)
        for c in (256, 4096)
    ]
    report = tmp_path / "gpu_validation.json"
    base = {"device_kind": "cuda", "calibration": {"grid": grid}, "model": "llama-3-8b"}
    report.write_text(json.dumps({**base, "gpu_preset": "rtx-4090"}))
    argv = ["calibrate", str(report), "--output", str(tmp_path / "cal.json")]
    assert "measured on 'rtx-4090' (kvsim's rtx-4090), not h100-80gb" in _error(
        [*argv, "--gpu", "h100-80gb"], capsys
    )
    report.write_text(json.dumps({**base, "device": "Some Future GPU 96GB"}))
    assert "GPU 'Some Future GPU 96GB' is not a kvsim preset; give --gpu NAME" in _error(argv, capsys)
    assert main([*argv, "--gpu", "h100-80gb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["gpu"] == "h100-80gb"


def test_a_calibration_names_the_model_and_gpu_it_was_fitted_on(capsys):
    """A newcomer review: `kvsim run --model qwen3-30b-a3b --gpu rtx-pro-6000 --calibration <llama-3.1-8b
    fit>` named only the file. The time line and --json name the fitted model and GPU, and a run of another
    model says in a note that the efficiencies were fitted on that one."""
    run = ["run", "--gpu", "rtx-pro-6000", "--calibration", "rtx-pro-6000-llama-3.1-8b", "--requests", "5"]
    other = json.loads(_run_json(capsys, [*run, "--model", "qwen3-30b-a3b"]))
    fitted = "calibration rtx-pro-6000-llama-3.1-8b (fitted on llama-3.1-8b on rtx-pro-6000)"
    assert other["time"].startswith(f"time: roofline of qwen3-30b-a3b on rtx-pro-6000, {fitted}"), other[
        "time"
    ]
    record = other["calibration"]
    assert (record["name"], record["kind"], record["model"], record["gpu"]) == (
        "rtx-pro-6000-llama-3.1-8b",
        "roofline",
        "llama-3.1-8b",
        "rtx-pro-6000",
    )
    assert record["source"].startswith("LLMServingSim profile RTXPRO6000/Llama-3.1-8B")
    said = [n for n in other["notes"] if n.startswith("calibration rtx-pro-6000-llama-3.1-8b was fitted on")]
    assert len(said) == 1, other["notes"]
    assert "its efficiencies and per-layer overheads are measured on that model's shapes" in said[0]
    assert "qwen3-30b-a3b's are priced with them unmeasured" in said[0]
    same = json.loads(_run_json(capsys, [*run, "--model", "llama-3.1-8b"]))
    assert fitted in same["time"]
    assert not any("was fitted on" in n for n in same["notes"])
    plain = json.loads(
        _run_json(capsys, ["run", "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000", "--requests", "5"])
    )
    assert plain["calibration"] is None


def _run_json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return capsys.readouterr().out
