"""Sweeps (kvsim.analysis.sweep): grid validation before any work, identical rows on every executor (threads,
processes, a real Dask LocalCluster on 127.0.0.1), resume, TOML files and aggregation across seeds."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kvsim.analysis.sweep import (
    ResultStore,
    SweepSpec,
    invalid_text,
    parse_grid_args,
    parse_workload,
    run_sweep,
)
from kvsim.analysis.sweep_stats import aggregate, t_quantile_975
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError

BASE = {"num_blocks": 120, "time_model": "ticks", "max_model_len": 1024}
VOLATILE = ("wall_s", "workload_s")


def tiny(grid: list[str] | None = None, **kw) -> SweepSpec:
    """Four configs x two seeds of 150 requests on a small pool (preemptions happen)."""
    spec = SweepSpec(
        name="tiny",
        grid=parse_grid_args(grid or ["block_size=8,16", "policy=vllm,orca-oracle"]),
        base=dict(BASE),
        workloads=["sharegpt:arrival_rate=20"],
        seeds=2,
        requests=150,
    )
    for k, v in kw.items():
        setattr(spec, k, v)
    return spec


def stable(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop(VOLATILE).sort("point_id")


@pytest.fixture(scope="module")
def threads_rows() -> pl.DataFrame:
    return run_sweep(tiny(), executor="threads", workers=2, progress=False).frame


def test_threads_give_one_row_per_point_with_params_metrics_and_wall_time(threads_rows):
    assert threads_rows.height == 8
    for col in (
        "point_id",
        "block_size",
        "policy",
        "seed",
        "workload",
        "kv_utilization",
        "e2e_s_p99",
        "wall_s",
    ):
        assert col in threads_rows.columns
    assert threads_rows["point_id"].n_unique() == 8
    assert (threads_rows["completed"] + threads_rows["rejected"] == 150).all()


def test_processes_give_identical_rows(threads_rows):
    rows = run_sweep(tiny(), executor="processes", workers=2, progress=False).frame
    assert stable(rows).equals(stable(threads_rows))


def test_dask_local_cluster_gives_identical_rows(threads_rows):
    rows = run_sweep(tiny(), executor="dask", workers=2, progress=False).frame
    assert stable(rows).equals(stable(threads_rows))


def test_resume_skips_finished_points(tmp_path, threads_rows):
    out = tmp_path / "tiny.parquet"
    first = run_sweep(tiny(grid=["block_size=8,16", "policy=vllm"]), output=out, progress=False)
    assert (first.ran, first.skipped) == (4, 0)
    again = run_sweep(tiny(grid=["block_size=8,16", "policy=vllm"]), output=out, progress=False)
    assert (again.ran, again.skipped) == (0, 4)
    more = run_sweep(tiny(), output=out, progress=False)
    assert (more.ran, more.skipped) == (4, 4)
    on_disk = pl.read_parquet(out)
    assert on_disk.height == 8
    assert stable(on_disk).equals(stable(threads_rows))
    fresh = run_sweep(tiny(grid=["block_size=8"]), output=out, progress=False, resume=False)
    assert fresh.ran == 2
    assert pl.read_parquet(out).height == 2


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (["blok_size=8,16"], "did you mean block_size"),
        (["block_size="], "empty value"),
        (["block_size=8,,16"], "empty value"),
        (["block_size"], "expected NAME=V1"),
        (["block_size=8", "block_size=16"], "given twice"),
        (["block_size=8,8"], "repeats a value"),
        (["block_size=eight"], "--grid block_size: block_size .eight. must be an integer"),
        (["enable_prefix_caching=maybe"], "enable_prefix_caching .maybe. must be True or False"),
    ],
)
def test_bad_grid_flags_fail(grid, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_grid_args(grid)


def test_grid_takes_router_weights_candidates_apart_with_semicolons():
    """A weighting is itself a comma list: `--grid router_weights=prefix=3,queue=1` was two points
    (`prefix=3` and `queue=1`); it is one, and ';' separates candidates, as `kvsim plan --compare` does."""
    one = parse_grid_args(["router_weights=prefix=3,queue=1"])
    assert one == {"router_weights": [{"prefix": 3.0, "queue": 1.0}]}
    two = parse_grid_args(["router_weights=prefix=3,queue=1; queue=1", "block_size=8,16"])
    assert two == {"router_weights": [{"prefix": 3.0, "queue": 1.0}, {"queue": 1.0}], "block_size": [8, 16]}
    with pytest.raises(InvalidArgumentError, match="empty value"):
        parse_grid_args(["router_weights=prefix=3;;queue=1"])


def test_invalid_combinations_fail_before_any_work(tmp_path):
    out = tmp_path / "bad.parquet"
    spec = tiny(grid=["policy=vllm,static,orca-max", "preemption=recompute,swap"])
    spec.base = {"num_blocks": 120, "time_model": "ticks", "cpu_blocks": 8}
    with pytest.raises(InvalidArgumentError, match="invalid grid combination") as err:
        run_sweep(spec, output=out, progress=False)
    assert "static" in str(err.value)
    assert "swap" in str(err.value)
    assert not out.exists()
    kept = spec.points(skip_invalid=True)
    assert sorted({(p.config["policy"], p.config["preemption"]) for p in kept}) == [
        ("orca-max", "recompute"),
        ("vllm", "recompute"),
        ("vllm", "swap"),
    ]


def test_combinations_refused_alike_share_their_reason_once():
    """A grid of points refused for one reason wrote it once a point (four points, four copies of a
    600-character reason, one line): each reason once, after the combinations it refuses."""
    spec = tiny(grid=["preemption=recompute,swap", "num_blocks=100,120", "block_size=16,32"])
    spec.base = {"time_model": "ticks", "cpu_blocks": 0}
    bad = spec.invalid()
    assert len(bad) == 4
    assert len({reason for _, reason in bad}) == 1
    text = invalid_text(bad)
    assert text.count(bad[0][1]) == 1
    assert text == " and ".join(combo for combo, _ in bad) + ": " + bad[0][1]
    nine = [(f"c{i}", f"reason {i}") for i in range(9)] + [("c9", "reason 0")]
    text = invalid_text(nine)
    assert text.startswith("c0 and c9: reason 0; c1: reason 1; ")
    assert text.endswith("c7: reason 7; ... and 1 more reasons")


def test_bad_workloads_and_options_fail_before_any_work():
    with pytest.raises(InvalidArgumentError, match="unknown workload"):
        tiny(workloads=["sharegtp"]).points()
    with pytest.raises(InvalidArgumentError, match="arrival_rate"):
        tiny(workloads=["sharegpt:arrival_rate=-1"]).points()
    with pytest.raises(InvalidArgumentError, match="is not a trace parameter"):
        parse_workload("azure-code:arrival_rate=3")
    with pytest.raises(InvalidArgumentError, match="requests"):
        tiny(requests=0).points()
    with pytest.raises(InvalidArgumentError, match="executor"):
        run_sweep(tiny(), executor="mpi", progress=False)
    with pytest.raises(InvalidArgumentError, match="needs --executor dask"):
        run_sweep(tiny(), scheduler="tcp://127.0.0.1:1", progress=False)


def test_workload_grid_and_toml_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "share"\nrequests = 60\nseeds = 1\nworkloads = ["synthetic:system_prompt_len=64,arrival_rate=50"]\n'
        '[base]\nnum_blocks = 200\ntime_model = "ticks"\n'
        "[grid]\n'workload.sharing_ratio' = [0.0, 1.0]\n"
    )
    spec, options = SweepSpec.from_toml(path)
    assert spec.name == "share"
    assert options == {}
    rows = run_sweep(spec, progress=False).frame.sort("workload.sharing_ratio")
    hit = rows["prefix_hit_rate"].to_list()
    assert hit[1] > hit[0]


def test_traces_run_once_whatever_the_seeds():
    spec = tiny(workloads=["azure-code"], grid=["policy=vllm"], seeds=3)
    spec.base = {"num_blocks": 20_000, "time_model": "ticks"}
    points = spec.points()
    assert [p.seed for p in points] == [0]


def test_aggregate_mean_and_confidence_interval():
    frame = pl.DataFrame(
        {
            "workload": ["w"] * 4,
            "block_size": [8, 8, 16, 16],
            "seed": [0, 1, 0, 1],
            "point_id": ["a", "b", "c", "d"],
            "x": [1.0, 3.0, 5.0, 5.0],
        }
    )
    agg = aggregate(frame, metrics=["x"]).sort("block_size")
    assert agg["n_seeds"].to_list() == [2, 2]
    assert agg["x_mean"].to_list() == [2.0, 5.0]
    assert agg["x_ci95"][0] == pytest.approx(12.706204736)  # (t at 0.975, 1 df: tan(0.475 pi))
    assert agg["x_ci95"][1] == 0.0
    assert t_quantile_975(1000) == pytest.approx(1.9623, abs=1e-3)
    assert "x_n" not in agg.columns  # (every seed has a value: its count is n_seeds)


def test_aggregate_counts_only_the_seeds_with_a_value():
    """Six seeds, two with an e2e p99 (the others finished no request): the mean and its 95 % interval
    are over those two (t with 1 degree of freedom, over sqrt(2)), where the interval took t(5) / sqrt(6)
    and came out ~8x too narrow; the count says 2 of 6."""
    frame = pl.DataFrame(
        {
            "workload": ["w"] * 6,
            "seed": list(range(6)),
            "point_id": [f"p{i}" for i in range(6)],
            "e2e": [0.150, None, None, 0.912, None, None],
            "steps": [3, 0, 0, 5, 0, 0],
        }
    )
    agg = aggregate(frame, metrics=["e2e", "steps"])
    assert agg["n_seeds"].to_list() == [6]
    assert agg["e2e_n"].to_list() == [2]
    assert agg["e2e_mean"][0] == pytest.approx(0.531)
    std = math.sqrt(((0.150 - 0.531) ** 2 + (0.912 - 0.531) ** 2) / 1)
    assert agg["e2e_ci95"][0] == pytest.approx(t_quantile_975(1) * std / math.sqrt(2))
    assert agg["steps_ci95"][0] == pytest.approx(t_quantile_975(5) * agg["steps_std"][0] / math.sqrt(6))
    one = aggregate(frame.filter(pl.col("seed") <= 2), metrics=["e2e"])
    assert one["e2e_n"].to_list() == [1]
    assert one["e2e_ci95"].to_list() == [None]  # one value: no interval


def test_aggregate_leaves_a_nan_out_of_the_mean_as_it_does_of_the_count():
    """One seed's NaN (a ratio over nothing) is no sample: mean, deviation and interval are over the other
    two, as the count is, where the mean came out NaN beside a count of 2 and the cell printed "null"."""
    frame = pl.DataFrame(
        {"workload": ["w"] * 3, "seed": [0, 1, 2], "point_id": ["a", "b", "c"], "x": [1.0, math.nan, 3.0]}
    )
    agg = aggregate(frame, metrics=["x"])
    assert agg["x_n"].to_list() == [2]
    assert agg["x_mean"].to_list() == [2.0]
    assert agg["x_std"][0] == pytest.approx(math.sqrt(2))
    assert agg["x_ci95"][0] == pytest.approx(t_quantile_975(1) * math.sqrt(2) / math.sqrt(2))
    from kvsim.cli.sweep_table import sweep_table

    table = sweep_table(frame.with_columns(pl.lit(8).alias("block_size")), ["block_size"], ["x"])
    assert table[table.columns[-1]].to_list() == ["2 ± 13 (2 of 3)"]  # (two figures)


# -- the result store: parts while running, one table at the end ------------------------------------------
def _rows(ids: list[str]) -> list[dict]:
    return [{"point_id": i, "seed": 0, "x": float(n)} for n, i in enumerate(ids)]


def test_store_appends_parts_and_finishes_as_one_table(tmp_path):
    out = tmp_path / "s.parquet"
    store = ResultStore(out, flush_every_s=0.0)  # every add flushes
    for row in _rows(["a", "b", "c"]):
        store.add(row)
    parts = sorted((tmp_path / "s.parquet.parts").glob("part-*.parquet"))
    assert len(parts) == 3  # one part per flush, each holding only its new rows
    assert [pl.read_parquet(p).height for p in parts] == [1, 1, 1]
    assert pl.scan_parquet(parts).collect()["point_id"].to_list() == ["a", "b", "c"]
    assert not out.exists()
    # Interrupted here (no finish): the next store resumes from the parts.
    again = ResultStore(out, flush_every_s=0.0)
    assert again.done == {"a", "b", "c"}
    again.add(_rows(["d"])[0])
    again.finish()
    assert not (tmp_path / "s.parquet.parts").exists()
    assert pl.read_parquet(out)["point_id"].to_list() == ["a", "b", "c", "d"]
    # A file and leftover parts that repeat it (finish interrupted before removing them): each point once.
    (tmp_path / "s.parquet.parts").mkdir()
    pl.DataFrame(_rows(["d"])).write_parquet(tmp_path / "s.parquet.parts" / "part-000000.parquet")
    assert ResultStore(out).old["point_id"].to_list() == ["a", "b", "c", "d"]


def test_interrupted_sweep_keeps_its_rows_and_resumes_exactly(tmp_path, monkeypatch, threads_rows):
    import kvsim.analysis.sweep as sweep

    out = tmp_path / "tiny.parquet"
    real = sweep.run_point
    calls = {"n": 0}

    def flaky(point):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(point)

    monkeypatch.setattr(sweep, "run_point", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny(), output=out, workers=1, progress=False, flush_every_s=0.0)
    monkeypatch.setattr(sweep, "run_point", real)
    kept = pl.read_parquet(out).height
    assert kept == 3  # the three points before the interruption
    rest = run_sweep(tiny(), output=out, workers=1, progress=False)
    assert (rest.ran, rest.skipped) == (8 - kept, kept)
    assert stable(pl.read_parquet(out)).equals(stable(threads_rows))


def test_a_sweep_that_cannot_write_at_the_end_says_where_its_rows_are(tmp_path):
    out = tmp_path / "d" / "s.parquet"
    store = ResultStore(out)
    for row in _rows(["a", "b"]):
        store.add(row)
    shutil.rmtree(tmp_path / "d")
    (tmp_path / "d").write_text("now a file")  # the folder is gone: nothing can be written there
    with pytest.raises(InvalidArgumentError, match="its 2 rows are in ") as err:
        store.finish()
    kept = str(err.value).rsplit(" are in ", 1)[1]
    assert pl.read_parquet(kept)["point_id"].to_list() == ["a", "b"]
    Path(kept).unlink()


# -- the command line: one line, exit status 2, before any point runs -------------------------------------
def _fails(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err, err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_bad_outputs_fail_in_one_line_before_any_point(tmp_path, capsys):
    sweep = ["sweep", "--requests", "20", "--base", "num_blocks=64", "--base", "time_model=ticks"]
    regular = tmp_path / "file"
    regular.write_text("x")
    folder = tmp_path / "folder"
    folder.mkdir()
    other = tmp_path / "other.parquet"
    other.write_text("not parquet")
    _fails(capsys, [*sweep, "--output", str(regular / "x.parquet")], "--output", "is a file, not a folder")
    _fails(capsys, [*sweep, "--output", str(folder)], "--output", "is a folder")
    _fails(capsys, [*sweep, "--output", str(other)], "--output", "not a parquet file")
    assert other.read_text() == "not parquet"  # refused, not overwritten
    unwritable = Path("/proc/kvsim-test/x.parquet")  # /proc takes no new folders, even for root
    _fails(capsys, [*sweep, "--output", str(unwritable)], "--output", "cannot write")
    _fails(capsys, [*sweep, "--output", str(tmp_path / "a.parquet"), "--grid", "workload.arrival_rate=abc"],
           "--grid workload.arrival_rate: arrival_rate 'abc'")  # fmt: skip
    _fails(capsys, [*sweep, "--output", str(tmp_path / "a.parquet"), "--show", "throughput_rps,thruput"],
           "--show thruput", "throughput_rps")  # fmt: skip
    assert sorted(tmp_path.iterdir()) == sorted([regular, folder, other])  # no point ran, nothing written


def test_sweep_prints_grid_order_and_only_the_varying_parameters(tmp_path, capsys):
    out = tmp_path / "bs.parquet"
    argv = ["sweep", "--grid", "block_size=32,8,16", "--requests", "40", "--seeds", "2", "--output", str(out),
            "--base", "model=opt-13b", "--base", f"kv_cache_bytes={2**30}", "--base", "time_model=ticks",
            "--show", "throughput_rps,preemptions"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err  # no progress bar: stderr is not a terminal
    lines = captured.out.splitlines()
    header = next(line for line in lines if "block_size" in line)
    # num_blocks, derived (1 GiB cut into blocks of each size), shows beside the axis: it differs.
    assert [c.strip("│ ") for c in header.split("┆")][:2] == ["block_size", "num_blocks"]
    assert "swap_ps_per_block" not in header
    body = [line for line in lines if line.startswith("│") and line.split("┆")[0].strip("│ ").isdigit()]
    assert [int(line.split("┆")[0].strip("│ ")) for line in body] == [32, 8, 16]
    assert all("±" in line for line in body)


def test_the_example_sweep_file_is_valid():
    root = Path(__file__).resolve().parent.parent
    spec, options = SweepSpec.from_toml(root / "examples" / "sweep.toml")
    assert options["output"] == "results/example.parquet"
    points = spec.points()
    assert len(points) == 3 * 2 * spec.seeds  # block sizes x policies x seeds
    assert spec.goodput == {"ttft": 500.0, "tpot": 50.0}
    assert points[0].goodput == spec.goodput
    assert "sweep:" in (root / "Makefile").read_text()  # `make sweep` runs it


# ------------------------------------------------------------------------------ goodput in sweeps

SLO_SWEEP = ["sweep", "--grid", "block_size=8,16", "--workload", "sharegpt:arrival_rate=20", "--seeds", "2",
             "--requests", "150", "--base", "num_blocks=120", "--base", "time_model=ticks",
             "--base", "max_model_len=1024", "--no-progress"]  # fmt: skip
SLO_COLUMNS = ("request_goodput", "good_requests", "slo_attainment", "slo_attainment_ttft",
               "slo_attainment_tpot")  # fmt: skip


def test_sweep_goodput_columns_equal_simulate_for_the_same_point(tmp_path, capsys):
    import kvsim
    from kvsim.analysis.sweep import make_workload

    out = tmp_path / "slo.parquet"
    assert main([*SLO_SWEEP, "--goodput", "ttft:1000", "tpot:1.5", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if "block_size" in line)
    for col in ("request_goodput", "slo_attainment", "slo_attainment_ttft", "slo_attainment_tpot"):
        assert col in header  # shown by default when there are SLOs
    rows = pl.read_parquet(out)
    assert rows.height == 4
    assert set(rows["goodput_slos_ms"]) == {"ttft:1000,tpot:1.5"}
    # the SLOs bite: some requests meet each, not all
    for col in ("slo_attainment_ttft", "slo_attainment_tpot"):
        assert 0 < rows[col].min() < 1, col
    assert (rows["slo_attainment"] <= rows["slo_attainment_ttft"]).all()
    spec = SweepSpec(grid=parse_grid_args(["block_size=8,16"]), base=dict(BASE), seeds=2, requests=150,
                     workloads=["sharegpt:arrival_rate=20"], goodput={"ttft": 1000, "tpot": 1.5})  # fmt: skip
    by_id = {r["point_id"]: r for r in rows.to_dicts()}
    points = spec.points()
    assert {p.point_id() for p in points} == set(by_id)  # the flags and the API name the same points
    for p in points:
        w = make_workload(p.workload, p.workload_params, p.requests, p.seed)
        want = kvsim.simulate(w, p.sim_config(), goodput={"ttft": 1000, "tpot": 1.5}).summary
        for col in SLO_COLUMNS:
            assert by_id[p.point_id()][col] == want[col], col
    agg = aggregate(rows)  # across seeds like any metric
    assert agg.height == 2
    for bs in (8, 16):
        mine = rows.filter(pl.col("block_size") == bs)["request_goodput"].mean()
        assert agg.filter(pl.col("block_size") == bs)["request_goodput_mean"].item() == pytest.approx(mine)


def test_slos_are_part_of_the_point_identity_so_resume_never_mixes_rows(tmp_path, capsys):
    out = tmp_path / "slo.parquet"
    argv = [*SLO_SWEEP, "--output", str(out), "--show", "throughput_rps"]
    assert main(argv) == 0  # no SLOs: no goodput columns
    assert "4 runs now" in capsys.readouterr().out
    assert "request_goodput" not in pl.read_parquet(out).columns
    assert main([*argv, "--goodput", "ttft:1000"]) == 0  # other SLOs: the points run again, as new rows
    assert "4 runs now, 0 already" in capsys.readouterr().out
    assert main([*argv, "--goodput", "ttft:1000"]) == 0  # the same SLOs resume
    assert "0 runs now, 4 already" in capsys.readouterr().out
    assert main([*argv, "--goodput", "ttft:2000", "--show", "slo_attainment"]) == 0
    assert "4 runs now, 0 already" in capsys.readouterr().out
    assert main(argv) == 0  # and the sweep without SLOs still finds its rows
    assert "0 runs now, 4 already" in capsys.readouterr().out
    rows = pl.read_parquet(out)
    assert rows.height == 12
    assert rows["goodput_slos_ms"].to_list().count(None) == 4
    assert rows["goodput_slos_ms"].value_counts().height == 3
    tight = rows.filter(pl.col("goodput_slos_ms") == "ttft:1000")["slo_attainment_ttft"].sort()
    loose = rows.filter(pl.col("goodput_slos_ms") == "ttft:2000")["slo_attainment_ttft"].sort()
    assert (tight <= loose).all()
    assert (tight < loose).any()
    assert aggregate(rows).height == 2 * 3  # block sizes x SLO sets: the SLOs group like a parameter


def test_bad_slos_fail_in_one_line_naming_the_flag_before_any_point(tmp_path, capsys):
    from kvsim.cli import bench_main

    out = tmp_path / "bad.parquet"
    for spec, why in (("ttft=5", "METRIC:MILLISECONDS"), ("itl:5", "not one of ttft, tpot, e2el"),
                      ("ttft:-1", "positive"), ("ttft:abc", "not a number")):  # fmt: skip
        line = _fails(capsys, [*SLO_SWEEP, "--output", str(out), "--goodput", spec], "--goodput", why)
        assert line.startswith("kvsim sweep: error: argument --goodput:"), line
        assert bench_main([*SLO_SWEEP[1:], "--output", str(out), "--goodput", spec]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith("bench.sweep: error: argument --goodput:"), err
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text("requests = 10\ngoodput = {ttft = 500, tpot = 0}\n[base]\nnum_blocks = 64\n")
    _fails(capsys, ["sweep", "--file", str(bad_file), "--output", str(out)], "bad.toml", "tpot:0", "positive")
    _fails(capsys, [*SLO_SWEEP, "--output", str(out), "--show", "request_goodput"], "--show request_goodput",
           "need --goodput")  # fmt: skip
    assert sorted(tmp_path.iterdir()) == [bad_file]  # nothing ran, nothing written
    with pytest.raises(InvalidArgumentError, match="goodput"):
        tiny(goodput="ttft:abc").points()


def test_a_sweep_file_sets_slos_and_the_flag_overrides_them(tmp_path):
    from kvsim.cli import build_parser, spec_from_args

    path = tmp_path / "s.toml"
    path.write_text("requests = 10\ngoodput = {ttft = 500, tpot = 50}\n[base]\nnum_blocks = 64\n")
    spec, _ = SweepSpec.from_toml(path)
    assert spec.goodput == {"ttft": 500.0, "tpot": 50.0}
    assert all(p.goodput == {"ttft": 500.0, "tpot": 50.0} for p in spec.points())
    path.write_text('requests = 10\ngoodput = "ttft:500 e2el:2000"\n[base]\nnum_blocks = 64\n')
    assert SweepSpec.from_toml(path)[0].goodput == {"ttft": 500.0, "e2el": 2000.0}
    args = build_parser().parse_args(["sweep", "--file", str(path), "--goodput", "tpot:20"])
    assert spec_from_args(args)[0].goodput == {"tpot": 20.0}


def test_the_watermark_rule_is_part_of_a_point_identity_only_with_a_watermark():
    """Without a watermark both rules run alike and a point keeps the id it had before the rule existed;
    with one, the rule names another point (the default's results changed with it)."""
    from kvsim.analysis.sweep import Point

    def pid(**cfg):
        return Point(
            config={"num_blocks": 100, **cfg}, workload="sharegpt", workload_params={}, seed=0, requests=10
        ).point_id()

    assert pid() == pid(watermark_rule="always") == pid(watermark=0.0, watermark_rule="always")
    assert pid(watermark=0.1) != pid(watermark=0.1, watermark_rule="always")
    assert pid(watermark=0.1) == pid(watermark=0.1, watermark_rule="while-running")
    assert pid(watermark=0.1) != pid()


# ------------------------------------------------------------------ bad input, refused before any work

SMALL = [
    "sweep",
    "--requests",
    "20",
    "--base",
    "num_blocks=64",
    "--base",
    "time_model=ticks",
    "--no-progress",
]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("output = 5\n", "output 5 must be a non-empty string"),
        ("name = 3\n", "name 3 must be a non-empty string"),
        ("workers = 1.5\n", "workers 1.5 must be a whole number >= 1"),
        ("requests = 20.5\n", "requests 20.5 must be a whole number >= 1"),
        ("requests = true\n", "requests True must be a whole number >= 1"),
        ('requests = "20"\n', "requests '20' must be a whole number >= 1"),
        ("requests = 99999999999999999999\n", "requests 99999999999999999999 must be between 1 and 2**40"),
        ("seeds = 1.5\n", "seeds 1.5 must be a whole number >= 1"),
        ("seeds = true\n", "seeds True must be a whole number >= 1"),
        ("seeds = 0\n", "seeds 0 must be between 1 and 2**40"),
        ('workloads = "sharegpt"\n', "workloads 'sharegpt' must be a list"),
        ("base = 5\n", "base must be a [base] table"),
        ("grid = [1]\n", "grid must be a [grid] table"),
        (
            "[base]\nnum_blocks = 64\nblock_size = 8\n[grid]\nblock_size = [8, 16]\n",
            "block_size is both a base field (8)",
        ),
        # A run file's [config] rule (SimConfig's): no "400" for an integer; they ran as 400 and 8, 16.
        ('[base]\nnum_blocks = "64"\n', "[base] num_blocks '64' must be an integer, not a string"),
        (
            '[base]\nnum_blocks = 64\n[grid]\nblock_size = ["8", "16"]\n',
            "[grid] block_size: block_size '8' must be an integer, not a string",
        ),
        (
            "[base]\nnum_blocks = 64\n[grid]\n'workload.arrival_rate' = [\"4\", 8]\n",
            "[grid] workload.arrival_rate: arrival_rate '4' must be a number",
        ),
        # "none" unsets only an optional field: model = "none" ran without a model.
        (
            '[base]\nnum_blocks = 64\nmodel = "none"\n',
            "[base] model 'none': 'none' unsets only an optional field, and model is not one",
        ),
    ],
)
def test_a_bad_sweep_file_value_is_one_line_naming_it(tmp_path, capsys, text, needle):
    """Sweep-file values of the wrong type were truncated (requests = 20.5 ran 20), taken as 1 (true), or
    crashed (output = 5: a TypeError; workloads = "sharegpt" was read letter by letter): now one line
    naming the key, kvsim run --toml's rule for counts, and nothing is written."""
    path = tmp_path / "s.toml"
    path.write_text(text + ("" if "[base]" in text or "base =" in text else "[base]\nnum_blocks = 64\n"))
    out = tmp_path / "s.parquet"
    _fails(capsys, ["sweep", "--file", str(path), "--output", str(out), "--no-progress"], needle)
    assert sorted(tmp_path.iterdir()) == [path]


def test_a_sweep_file_keeps_units_choices_and_none(tmp_path):
    """What a run file's [config] takes, a sweep file's [base] and [grid] take: sizes with units, the
    choice `none` (`admission_gate`, once read as unset and refused), `"none"` for an optional field."""
    path = tmp_path / "s.toml"
    path.write_text(
        'requests = 10\n[base]\nnum_blocks = 64\nkv_offloading_size = "none"\nadmission_gate = "none"\n'
        "[grid]\nmax_model_len = ['none', 4096]\niteration_time_ps = ['2ms']\n"
    )
    spec, _ = SweepSpec.from_toml(path)
    assert spec.grid == {"max_model_len": [None, 4096], "iteration_time_ps": [2 * 10**9]}
    points = spec.points()
    assert {p.config["admission_gate"] for p in points} == {"none"}
    assert [p.config["max_model_len"] for p in points] == [None, 4096]


def test_the_api_takes_numpy_numbers_as_python_ones():
    """numpy integers and floats (a grid built with np.arange, counts read from an array) are their Python
    values, as SimConfig takes them: `requests` and `seeds` were refused, a numpy array of values was one
    value, a numpy integer for a workload parameter was not a number. A bool is still no count."""
    spec = tiny(grid=[], requests=np.int64(20), seeds=np.int64(2))
    spec.grid = {"block_size": np.array([8, 16]), "workload.arrival_rate": [np.int64(5), np.float32(2.5)]}
    points = spec.points()
    assert len(points) == 2 * 2 * 2
    assert {type(p.requests) for p in points} == {int}
    assert [p.grid["block_size"] for p in points[::4]] == [8, 16]
    assert {p.grid["workload.arrival_rate"] for p in points} == {5.0, 2.5}
    assert points[0].point_id()  # JSON of plain values
    for k in ("requests", "seeds"):
        with pytest.raises(InvalidArgumentError, match=f"{k} np.True_ must be a whole number"):
            tiny(**{k: np.bool_(True)}).points()


def test_an_unreadable_sweep_file_is_one_line(tmp_path, capsys):
    binary = tmp_path / "bin.toml"
    binary.write_bytes(bytes([0xC6, 0xFF, 0x00, 0x81]) * 50)
    _fails(capsys, ["sweep", "--file", str(binary)], f"sweep file {binary}:", "utf-8")
    _fails(capsys, ["run", "--toml", str(binary)], f"run file {binary}:", "utf-8")  # the same reader
    _fails(capsys, ["sweep", "--file", str(tmp_path / "none.toml")], "none.toml does not exist")
    assert sorted(tmp_path.iterdir()) == [binary]


def test_the_api_refuses_counts_that_are_not_whole_numbers():
    for k, v in (("requests", 20.5), ("requests", True), ("seeds", 1.5), ("seeds", True)):
        with pytest.raises(InvalidArgumentError, match=f"{k} {v!r} must be a whole number"):
            tiny(**{k: v}).points()
    with pytest.raises(InvalidArgumentError, match="workloads 'sharegpt' must be a list"):
        tiny(workloads="sharegpt").points()
    with pytest.raises(InvalidArgumentError, match=r"metrics \['preemptions'\] listed twice"):
        aggregate(pl.DataFrame({"seed": [0], "preemptions": [1]}), metrics=["preemptions", "preemptions"])


def test_conflicting_base_and_grid_values_are_refused(tmp_path, capsys):
    """`--base num_blocks=400 --base num_blocks=300` ran 300 and `--base block_size=8 --grid block_size=8,16`
    dropped the base value: both are refused, naming the field. A flag overrides the file's value of its
    field, in either table."""
    out = tmp_path / "s.parquet"
    _fails(
        capsys, [*SMALL, "--base", "num_blocks=32", "--output", str(out)], "--base: num_blocks given twice"
    )
    _fails(capsys, [*SMALL, "--base", "block_size=8", "--grid", "block_size=8,16", "--output", str(out)],
           "block_size is both a base field (8) and a grid parameter (8, 16)")  # fmt: skip
    assert list(tmp_path.iterdir()) == []
    from kvsim.cli import build_parser, spec_from_args

    path = tmp_path / "s.toml"
    path.write_text("[base]\nnum_blocks = 64\nblock_size = 8\n[grid]\npolicy = ['vllm', 'orca-max']\n")
    spec, _ = spec_from_args(
        build_parser().parse_args(["sweep", "--file", str(path), "--grid", "block_size=8,16"])
    )
    assert "block_size" not in spec.base
    assert spec.grid["block_size"] == [8, 16]
    spec, _ = spec_from_args(
        build_parser().parse_args(["sweep", "--file", str(path), "--base", "policy=vllm"])
    )
    assert spec.base["policy"] == "vllm"
    assert "policy" not in spec.grid
    assert len(spec.points()) == 1


def test_a_repeated_show_metric_is_refused_before_any_work(tmp_path, capsys):
    """It crashed in polars (DuplicateError) after the sweep had run and written its rows."""
    out = tmp_path / "s.parquet"
    _fails(capsys, [*SMALL, "--output", str(out), "--show", "throughput_rps,preemptions,throughput_rps"],
           "argument --show: throughput_rps given twice")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_parquet_that_is_not_a_sweeps_is_refused_and_left_as_it_was(tmp_path, capsys):
    """Resume appended the sweep's rows to any parquet file (3 rows x 116 columns from a 2 x 1 table);
    --no-resume would have deleted it."""
    other = tmp_path / "other.parquet"
    pl.DataFrame({"a": [1, 2]}).write_parquet(other)
    before = other.read_bytes()
    for extra in ([], ["--no-resume"]):
        _fails(capsys, [*SMALL, "--output", str(other), *extra], f"{other} exists and is not a sweep's",
               "no point_id column")  # fmt: skip
        assert other.read_bytes() == before
    with pytest.raises(InvalidArgumentError, match="not a sweep's parquet file"):
        run_sweep(tiny(), output=other, progress=False)
    assert other.read_bytes() == before
    assert sorted(tmp_path.iterdir()) == [other]


def test_a_sweep_names_its_workloads_and_says_a_file_is_kvsim_runs(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival,prompt_len,output_len\n0,10,10\n")
    _fails(capsys, [*SMALL, "--workload", str(trace), "--output", str(tmp_path / "s.parquet")],
           "a sweep's workloads are named", "kvsim run --workload PATH")  # fmt: skip
    assert sorted(tmp_path.iterdir()) == [trace]


def test_rows_of_a_default_that_changed_with_its_meaning_run_again(tmp_path):
    """async_scheduling's default was False until 2026-12-07 (None since): a sweep that never named it wrote
    its rows under ids hashing False, which today's --no-async-scheduling (one batch in flight) does not
    mean; resumed today, those rows are replaced, not kept beside today's nor reused."""
    out = tmp_path / "default.parquet"
    spec = tiny(grid=["max_num_seqs=8,16"], seeds=1)
    run_sweep(spec, output=out, progress=False)
    before = {
        p.point_id(): p.point_id({**p.sim_config().resolved(), "async_scheduling": False}, revisions={})
        for p in spec.points()
    }
    assert all(k != v for k, v in before.items())
    pl.read_parquet(out).with_columns(pl.col("point_id").replace(before)).write_parquet(out)
    again = run_sweep(spec, output=out, progress=False)
    assert (again.ran, again.skipped, again.replaced) == (2, 0, {"async_scheduling": 2})
    rows = pl.read_parquet(out)
    assert sorted(rows["point_id"]) == sorted(before)  # the old rows gone from the file
    assert run_sweep(spec, output=out, progress=False).ran == 0


def test_rows_written_before_a_knobs_meaning_changed_are_not_reused(tmp_path, capsys):
    """async_scheduling=False meant two batches in flight before 2026-12-07 and one since, with the same
    resolved config: a file written then (its False rows under the ids they had, with numbers that are not
    today's) must not be resumed as today's rows."""
    out = tmp_path / "async.parquet"
    spec = tiny(grid=["async_scheduling=none,false"], seeds=1)
    first = run_sweep(spec, output=out, progress=False)
    assert (first.ran, first.replaced) == (2, {})
    points = spec.points()
    # The file as the old kvsim wrote it: ids without the knob's revision, and numbers of the old meaning
    # (a sentinel here).
    legacy = {p.point_id(): p.point_id(revisions={}) for p in points}
    changed = [p.point_id() for p in points if p.config.get("async_scheduling") is False]
    assert len(changed) == 1
    assert legacy[changed[0]] != changed[0]
    assert sum(k == v for k, v in legacy.items()) == 1
    old = pl.read_parquet(out).with_columns(
        pl.col("point_id").replace(legacy),
        pl.when(pl.col("point_id").is_in(changed)).then(-1.0).otherwise(pl.col("throughput_rps"))
        .alias("throughput_rps"),
    )  # fmt: skip
    old.write_parquet(out)
    again = run_sweep(spec, output=out, progress=False)
    assert (again.ran, again.skipped, again.replaced) == (1, 1, {"async_scheduling": 1})
    rows = pl.read_parquet(out)
    assert rows.height == 2
    assert (rows["throughput_rps"] > 0).all()  # the old row is gone from the file, not only from the frame
    assert sorted(rows["point_id"]) == sorted(legacy)
    assert run_sweep(spec, output=out, progress=False).ran == 0  # and today's rows resume
    old.write_parquet(out)  # the CLI says why the points ran again
    argv = ["sweep", "--grid", "async_scheduling=none,false", "--base", "num_blocks=120", "--base",
            "time_model=ticks", "--base", "max_model_len=1024", "--workload", "sharegpt:arrival_rate=20",
            "--seeds", "1", "--requests", "150", "--output", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "1 row in" in text, text
    assert "async_scheduling=False meant two batches in flight" in text, text


def test_a_utilization_of_092_under_measured_sizing_changed_meaning():
    """Until 2026-12-07 gpu_memory_utilization had one default, 0.92, which measured sizing read as unset
    (1.0); since then it is unset by default (1.0 there, vLLM 0.34.0's resolved_gpu_memory_utilization) and
    0.92 given caps at 0.92. A point given 0.92 under measured sizing hashes the knob's revision, and its rows
    of before (at 1.0) are stale; a point left unset (1.0 now) resolved 0.92 then; a profiled point is as it
    was."""
    from kvsim import SimConfig
    from kvsim.analysis.sweep_revisions import knob_revisions, legacy_identities

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb"}
    given = SimConfig(**base, kv_cache_sizing="measured", gpu_memory_utilization=0.92).resolved()
    unset = SimConfig(**base, kv_cache_sizing="measured").resolved()
    profiled = SimConfig(**base, kv_cache_sizing="profiled").resolved()
    assert (given["gpu_memory_utilization"], unset["gpu_memory_utilization"]) == (0.92, 1.0)
    assert knob_revisions(given) == {"gpu_memory_utilization": 2}
    assert knob_revisions(unset) == knob_revisions(profiled) == {}

    def legacy(resolved: dict) -> list:  # (async_scheduling's own change adds its entry to every point)
        return [(dict(c), r) for k, c, r in legacy_identities(resolved) if k == "gpu_memory_utilization"]

    assert legacy(given) == [(given, {})]
    assert legacy(unset) == [({**unset, "gpu_memory_utilization": 0.92}, {})]
    assert legacy(profiled) == []
