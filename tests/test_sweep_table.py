"""`kvsim sweep`'s printed table reads as `kvsim run` reads (newcomer review: `kv_utilization 0.8221` beside
run's `KV utilization 82.2 %`, `rejected 159.0` for a count): a share in percent, a count whole where it is
whole and to a tenth where a mean over seeds is not, each column's unit under its name; the rows on disk
keep the raw values."""

from __future__ import annotations

import polars as pl
import pytest

from kvsim.analysis.run_report import _GROUPS
from kvsim.analysis.sweep_stats import is_share
from kvsim.cli import main
from kvsim.cli.sweep_table import byte_axis, cell, fmt_value, unit
from tests.table_common import printed_header, printed_table

SHOW = "kv_utilization,peak_allocated_fraction,preemptions,rejected,peak_batch,mean_batch,throughput_rps,e2e_s_p99"


def _sweep(capsys, tmp_path, seeds: int) -> tuple[list[str], list[str], list[list[str]], pl.DataFrame]:
    out = tmp_path / f"s{seeds}.parquet"
    argv = ["sweep", "--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=2GiB"]
    argv += ["--grid", "block_size=16,32", "--workload", "sharegpt:arrival_rate=8", "--requests", "120"]
    argv += ["--seeds", str(seeds), "--show", SHOW, "--output", str(out), "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    names, units = printed_header(lines)
    header, rows = printed_table(lines)
    assert header == names
    # (a line says the cells are means over seeds, once, where there are several)
    assert len([ln for ln in lines if ln.startswith("mean over each point's ")]) == (seeds > 1)
    return names, units, rows, pl.read_parquet(out)


def test_one_seed_prints_shares_in_percent_and_counts_whole_and_keeps_the_rows_raw(capsys, tmp_path):
    names, units, rows, frame = _sweep(capsys, tmp_path, 1)
    assert frame["kv_utilization"].max() < 1  # (the parquet's share is raw, a fraction)
    assert frame["preemptions"].dtype.is_integer()
    for row in rows:
        (point,) = frame.filter(pl.col("block_size") == int(row[0])).iter_rows(named=True)
        for name, shown in zip(names, row, strict=True):
            value = point.get(name)
            if name in ("block_size", "num_blocks", "n_seeds") or value is None:
                continue
            if is_share(name):
                assert shown == f"{100 * value:.1f}", (name, shown, value)
            elif isinstance(value, int):
                assert shown == f"{value:,}", (name, shown, value)  # (no ".0")
            else:
                # (a request's latency in run's ms, the rows' seconds times 1,000: user53 #11)
                scale = 1000 if name == "e2e_s_p99" else 1
                assert float(shown.replace(",", "")) == pytest.approx(scale * value, rel=1e-3), (name, shown)
    # Each column's unit under its name: run's where run prints the metric.
    said = dict(zip(names, units, strict=True))
    assert said["kv_utilization"] == said["peak_allocated_fraction"] == "%"
    assert said["throughput_rps"] == "req/s"
    assert said["e2e_s_p99"] == "ms"  # (run's latency table: ms; it printed seconds under "s")
    assert said["mean_batch"] == said["peak_batch"] == "sequences"
    assert said["rejected"] == "requests"
    assert said["preemptions"] == ""  # (run's bare count)
    run_units = {k: u for _, group in _GROUPS for k, _, u in group}
    assert (run_units["kv_utilization"], run_units["mean_batch"]) == ("%", "sequences")


def test_several_seeds_print_the_mean_and_say_so_once(capsys, tmp_path):
    names, _, rows, frame = _sweep(capsys, tmp_path, 3)
    means = frame.group_by("block_size").agg(pl.col("preemptions", "peak_batch", "kv_utilization").mean())
    for row in rows:
        (point,) = means.filter(pl.col("block_size") == int(row[0])).iter_rows(named=True)
        for name in ("preemptions", "peak_batch"):
            mean = point[name]
            shown = row[names.index(name)].split(" ± ")[0]
            assert shown == (f"{mean:,.0f}" if mean.is_integer() else f"{mean:,.1f}"), (name, shown, mean)
        shown = row[names.index("kv_utilization")].split(" ± ")[0]
        assert shown == f"{100 * point['kv_utilization']:.1f}"


def test_a_cell_is_its_mean_in_runs_units():
    assert fmt_value(0.8221, "share") == "82.2"
    assert fmt_value(159.0, "count") == "159"
    assert fmt_value(159.5, "count") == "159.5"
    assert fmt_value(1 / 3, "count") == "0.3"
    assert fmt_value(12345.0, "count") == "12,345"
    assert fmt_value(0.747912, "value") == "0.7479"
    assert fmt_value(1234.56, "value") == "1,234.6"
    # a share's half-width in percentage points, flagged past 0..100 %; a count's, two figures
    assert cell(0.045, 0.064, "share", 2, 2) == "4.5 ± 6.4 (past 0..100 %)"
    assert cell(0.5, 0.1, "share", 2, 2) == "50.0 ± 10"
    assert cell(159.5, 6.35, "count", 2, 2) == "159.5 ± 6.3"
    assert cell(3.0, 0.0, "count", 1, 2) == "3 ± 0 (1 of 2)"
    assert cell(None, None, "value", 0, 2) == "null"
    # a request's latencies in ms as run prints them (its latency table, the tier's load wait), durations
    # and totals in s
    for metric in ("ttft_s_p50", "tpot_s_p99", "e2e_s_mean", "queueing_s_p99", "load_wait_s_mean"):
        assert unit(metric) == "ms", metric
    assert unit("load_wait_s_total") == unit("makespan_s") == "s"
    # an interval below 0 of a quantity that cannot be negative is marked, as a share's past 0..100 % is
    assert cell(56.01, 650.0, "value", 2, 2, nonnegative=True) == "56.01 ± 650 (past 0)"
    assert cell(56.01, 650.0, "value", 2, 2) == "56.01 ± 650"
    assert cell(56.01, 5.0, "value", 2, 2, nonnegative=True) == "56.01 ± 5.0"
    assert cell(1.5, 2.0, "count", 2, 2, nonnegative=True) == "1.5 ± 2.0 (past 0)"
    assert unit("recomputed_tokens") == "tokens"
    assert unit("slo_attainment_ttft") == "%"


def test_a_metric_the_files_rows_lack_prints_null_cells_and_says_why(capsys, tmp_path):
    """A file written before a metric existed, resumed with --show of it: polars raised ColumnNotFoundError
    (a traceback, exit 1), and a verdict column of nulls a TypeError in the table; now null cells and a note."""
    out = tmp_path / "old.parquet"
    argv = ["sweep", "--base", "num_blocks=120", "--base", "time_model=ticks", "--base", "max_model_len=1024",
            "--grid", "block_size=8,16", "--workload", "sharegpt:arrival_rate=20", "--requests", "60",
            "--output", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    pl.read_parquet(out).drop("kv_utilization", "overloaded").write_parquet(out)
    assert main([*argv, "--show", "kv_utilization,overloaded,preemptions"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names, rows = printed_table(lines)
    assert names[-3:] == ["kv_utilization", "overloaded", "preemptions"]
    assert [r[-3:-1] for r in rows] == [["null", "null"]] * 2
    assert all(r[-1] != "null" for r in rows)
    (note,) = [ln for ln in lines if ln.startswith("note: --show ")]
    assert note.startswith(f"note: --show kv_utilization,overloaded: the rows in {out} lack them")
    # A verdict column present but null in every row: "null" cells too (it raised TypeError).
    pl.read_parquet(out).with_columns(pl.lit(None, dtype=pl.Boolean).alias("overloaded")).write_parquet(out)
    assert main([*argv, "--show", "overloaded"]) == 0
    _, rows = printed_table(capsys.readouterr().out.splitlines())
    assert [r[-1] for r in rows] == ["null", "null"]


@pytest.mark.parametrize("show", ["", " , "])
def test_a_show_that_names_no_metric_is_refused(capsys, tmp_path, show):
    """`--show ''` ran the sweep and printed no table, exit 0."""
    out = tmp_path / "none.parquet"
    argv = ["sweep", "--base", "num_blocks=120", "--base", "time_model=ticks", "--grid", "block_size=8,16",
            "--requests", "20", "--output", str(out), "--no-progress", "--show", show]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--show" in err[0]
    assert "names no metric" in err[0]
    assert not out.exists()  # (refused before any point ran)


def test_an_unset_or_boolean_axis_reads_as_the_notes_name_it(capsys, tmp_path):
    """async_scheduling's unset value read `null` (and False `false`) in the table where the notes say
    `async_scheduling=None` (`=False`): one spelling, Python's, in both."""
    out = tmp_path / "async.parquet"
    argv = ["sweep", "--base", "model=gemma-3-27b", "--base", "gpu=h100-80gb", "--base", "max_model_len=32768",
            "--grid", "async_scheduling=none,false", "--requests", "30", "--output", str(out), "--no-progress",
            "--show", "throughput_rps"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    names, rows = printed_table(lines)
    assert names[0] == "async_scheduling"
    assert [r[0] for r in rows] == ["None", "False"]
    notes = " ".join(ln for ln in lines if ln.startswith("note: "))
    assert "async_scheduling=None" in notes  # (the too-short note names both points)
    assert "async_scheduling=False" in notes


def test_a_byte_axis_reads_as_the_command_line_takes_it(capsys, tmp_path):
    """`kv_cache_bytes` printed `4294967296` where `--grid kv_cache_bytes=4GiB` gave it: a byte axis reads in
    binary units, and the table's values are the rows' (the pool each point built: 2 MiB blocks)."""
    out = tmp_path / "bytes.parquet"
    argv = ["sweep", "--base", "model=llama-3.1-8b", "--base", "gpu=h100-80gb", "--base", "block_size=16",
            "--base", "max_model_len=8192",
            "--grid", "kv_cache_bytes=4GiB,1.5GiB,3000000000", "--requests", "20", "--output", str(out),
            "--no-progress", "--show", "throughput_rps"]  # fmt: skip
    assert main(argv) == 0
    names, rows = printed_table(capsys.readouterr().out.splitlines())
    assert names[:2] == ["kv_cache_bytes", "num_blocks"]
    assert [r[0] for r in rows] == ["4 GiB", "1.5 GiB", "2.79397 GiB"]
    frame = pl.read_parquet(out)
    # (the rows stay raw; the file's rows in the order the points finished, the table's in the grid's)
    assert sorted(frame["kv_cache_bytes"].to_list()) == sorted([4 << 30, 3 << 29, 3_000_000_000])
    assert [int(r[1]) for r in rows] == [4 << 30 >> 21, 3 << 29 >> 21, 3_000_000_000 >> 21]


def test_byte_axis_values_that_would_print_alike_print_whole():
    assert byte_axis([4 << 30, None, 512]) == ["4 GiB", "None", "512 B"]
    close = [10**12, 10**12 + 1]  # (931.323 GiB both, to six figures)
    assert byte_axis(close) == ["1,000,000,000,000 B", "1,000,000,000,001 B"]
