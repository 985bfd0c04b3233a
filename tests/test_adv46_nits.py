"""adv46's nits: a mean's interval under 30 values says so, a 1-request run and sweep point get the
not-a-steady-state note, pcie_p2p's refusals list every accepted value, machine-readable outputs carry the
resolved collective transport, a GPU file sets pcie_p2p."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kvsim.analysis.plan_sampling import fmt_interval
from kvsim.analysis.plan_search import SLO
from kvsim.cli import main
from tests.p2p_common import GEFORCE_TP2_SWEEP


def test_an_interval_with_neither_end_says_too_few():
    assert fmt_interval((None, None), SLO("tpot_mean", 0.007)) == "too few (n<30)"
    assert fmt_interval((None, None), SLO("ttft_p99", 1.0)) == "too few"
    assert fmt_interval((None, 2.0), SLO("ttft_p99", 1.0)).startswith("(-∞,")
    assert fmt_interval(None, SLO("ttft_p99", 1.0)) == "-"


def test_a_plan_on_2_requests_prints_too_few_not_minus_infinity(capsys):
    argv = ["plan", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workers", "1", "--requests", "2"]
    assert main([*argv, "--slo", "tpot_mean:7ms", "--max-probes", "2"]) == 0
    out = capsys.readouterr().out
    assert "too few (n<30)" in out
    assert "(-∞,∞)" not in out


def test_a_1_request_run_and_sweep_point_are_not_a_steady_state(capsys, tmp_path: Path):
    assert main(["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "1"]) == 0
    assert "not a steady state: a single request finished" in capsys.readouterr().out
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--base", "model=llama-3-8b", "--base", "gpu=h100-80gb", "--grid", "max_num_seqs=8,16"]
    assert main([*argv, "--requests", "1", "--output", str(out)]) == 0
    assert "(one request finished: no rate)" in capsys.readouterr().out
    assert pl.read_parquet(out)["arrival_span_s"].to_list() == [0.0, 0.0]


def test_pcie_p2ps_refusal_lists_every_accepted_value(capsys):
    import pytest

    import kvsim

    argv = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "2", "--pcie-p2p", "yes"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "must be True, False or None" in err[0]
    assert 'true, false (unquoted) or "none"' in err[0]
    with pytest.raises(kvsim.InvalidArgumentError, match="in a TOML file true or false, unquoted"):
        kvsim.SimConfig(enable_prefix_caching="false")


def test_json_and_sweep_rows_carry_the_resolved_transport(capsys, tmp_path: Path):
    import json

    base = ["run", "--model", "llama-3-8b", "--requests", "3", "--json"]
    for extra, want in (
        (["--gpu", "rtx-4090", "-tp", "2"], "host-staged"),
        (["--gpu", "rtx-4090", "-tp", "2", "--pcie-p2p"], "pcie-p2p"),
        (["--gpu", "h100-80gb", "-tp", "2"], "peer-link"),
        (["--gpu", "h100-80gb"], "none"),
        (["--gpu", "rtx-4090", "-tp", "2", "--time-model", "linear"], "none"),
    ):
        assert main([*base, *extra]) == 0
        assert json.loads(capsys.readouterr().out)["collective_transport"] == want, extra
    out = tmp_path / "s.parquet"
    argv = [*GEFORCE_TP2_SWEEP, "--grid", "pcie_p2p=true,false,none", "--requests", "3", "--output", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    frame = pl.read_parquet(out).sort("collective_transport")
    got = dict(zip(frame["pcie_p2p"].to_list(), frame["collective_transport"].to_list(), strict=True))
    assert got == {True: "pcie-p2p", False: "host-staged", None: "host-staged"}


def test_a_gpu_file_sets_pcie_p2p_and_refuses_a_non_bool(capsys, tmp_path: Path):
    import pytest

    from kvsim.errors import InvalidArgumentError
    from kvsim.model.gpus import from_file, from_spec

    spec = {"memory": "24GiB", "bandwidth": "1008GB/s", "tflops": 165}
    assert from_spec(spec).pcie_p2p is None  # (a described GPU's default: not known, taken as P2P)
    assert from_spec({**spec, "pcie_p2p": False}).pcie_p2p is False
    for bad in ("false", 0, 1.0):
        with pytest.raises(InvalidArgumentError, match=r"pcie_p2p .* must be true or false"):
            from_spec({**spec, "pcie_p2p": bad})
    path = tmp_path / "g.toml"
    path.write_text('memory = "24GiB"\nbandwidth = "1008GB/s"\ntflops = 165\npcie_p2p = false\n')
    assert from_file(path).pcie_p2p is False
    argv = ["run", "--model", "llama-3-8b", "--gpu", str(path), "-tp", "2", "--requests", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "staged through host memory" in out
    assert "off in g's figures, pcie_p2p false" in out  # (not said to be a GeForce card)
    argv = ["run", "--model", "llama-3-8b", "--gpu-memory", "24GiB", "--gpu-bandwidth", "1008GB/s"]
    argv += ["--gpu-tflops", "165", "-tp", "2", "--requests", "3"]
    assert main(argv) == 0
    assert "peer-to-peer assumed for a described GPU" in capsys.readouterr().out
    # (on a preset, the preset's own P2P: no assumption said)
    argv = ["run", "--model", "llama-3-8b", "--gpu", "rtx-pro-6000", "--gpu-memory", "48GiB", "-tp", "2"]
    assert main([*argv, "--requests", "3"]) == 0
    assert "assumed" not in capsys.readouterr().out


def test_a_gpu_files_pool_and_time_lines_name_it_alike(capsys, tmp_path: Path):
    """adv46 #10: the pool line said `g1 × 0.92`, the time line the file's path."""
    path = tmp_path / "g1.toml"
    path.write_text('preset = "rtx-4090"\npeer_link = "50GB/s"\npeer_domain = 2\n')
    assert main(["run", "--model", "llama-3-8b", "--gpu", str(path), "-tp", "2", "--requests", "3"]) == 0
    out = capsys.readouterr().out
    assert "(g1 × 1.00" in out  # (unset, the share is 1.0 under 0.34.0's measured sizing)
    assert "roofline of llama-3-8b on g1," in out
    for line in out.splitlines():
        if line.startswith(("pool:", "time:")):
            assert str(path) not in line  # (the config line echoes the --gpu given: the path)
