"""Sweeps (kvsim.sweep): grid validation before any work, identical rows on every executor (threads,
processes, a real Dask LocalCluster on 127.0.0.1), resume, TOML files and aggregation across seeds."""

from __future__ import annotations

import math

import polars as pl
import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.sweep import (
    SweepSpec,
    aggregate,
    parse_grid_args,
    parse_workload,
    run_sweep,
    t_quantile_975,
)

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
    assert agg["x_ci95"][0] == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))
    assert agg["x_ci95"][1] == 0.0
    assert t_quantile_975(1000) == pytest.approx(1.9623, abs=1e-3)
