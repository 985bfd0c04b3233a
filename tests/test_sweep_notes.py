"""`kvsim sweep` says what `kvsim run` says when one sizing field overrides another (vLLM lets
`num_gpu_blocks_override` win over the KV memory, `kv_cache_memory_bytes` over `gpu_memory_utilization`):
once for the sweep, not once a point, where it applies (with how many configurations where not all), its
fields named as given (`--base`, `--grid`, the sweep file's tables); a sweep without an override says
nothing of it. And it says what `kvsim run` says of a run too short to reach a steady state, once for the
sweep, naming its points too short."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kvsim.analysis.steady_state import STEADY_SPANS, sweep_overloaded_note, sweep_too_short_note
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from tests.table_common import printed_table

SMALL = ["--requests", "5", "--seeds", "3", "--no-progress", "--no-resume"]
STEADY = "note: not a steady state"


def _notes(capsys: pytest.CaptureFixture[str], argv: list[str], out: Path) -> list[str]:
    """The sizing notes (5 requests are too short for a steady state: that note is tested below)."""
    assert main(["sweep", *argv, *SMALL, "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line for line in lines if line.startswith("note: ") and not line.startswith(STEADY)]


def test_the_sweep_says_kvsim_runs_override_note_once(capsys, tmp_path):
    """The base overrides at every point: kvsim run's own note (its numbers too), printed once for the
    sweep's 2 configurations x 3 seeds."""
    base = ["--base", "model=llama-3-8b", "--base", "num_blocks=3000", "--base", "kv_cache_bytes=12GiB"]
    notes = _notes(capsys, [*base, "--grid", "max_num_seqs=8,16"], tmp_path / "a.parquet")
    assert notes == [
        # (12 GiB of Llama-3-8B in blocks of 64, the default: 12 × 2^30 // (64 × 131,072) = 1,536)
        "note: --base num_blocks 3,000 sizes the pool, not --base kv_cache_bytes 12.0 GiB (whose KV memory "
        'holds 1,536 blocks): vLLM lets the override win (its get_kv_cache_configs logs "Overriding '
        'num_gpu_blocks=1536 with num_gpu_blocks_override=3000"), so --base kv_cache_bytes sizes nothing here'
    ]
    # kvsim run says the same of one of those points, spelled as its flags.
    run = [
        "run",
        "--model",
        "llama-3-8b",
        "--num-gpu-blocks-override",
        "3000",
        "--kv-cache-memory-bytes",
        "12GiB",
    ]
    assert main([*run, "--requests", "5", "--max-num-seqs", "8"]) == 0
    said = [
        x for x in capsys.readouterr().out.splitlines() if x.startswith("note: --num-gpu-blocks-override")
    ]
    assert said == [
        notes[0]
        .replace("--base num_blocks", "--num-gpu-blocks-override")
        .replace("--base kv_cache_bytes", "--kv-cache-memory-bytes")
    ]


def test_points_that_differ_get_one_note_with_what_they_share(capsys, tmp_path):
    """A grid of block sizes holds a different count at each point (6,144 and 3,072 blocks): one note, without
    the counts; a grid of the overridden field itself: without the values, naming it as a grid axis."""
    base = ["--base", "model=llama-3-8b", "--base", "num_blocks=3000"]
    notes = _notes(
        capsys,
        [*base, "--base", "kv_cache_bytes=12GiB", "--grid", "block_size=16,32"],
        tmp_path / "b.parquet",
    )
    assert notes == [
        "note: --base num_blocks 3,000 sizes the pool, not --base kv_cache_bytes 12.0 GiB: vLLM lets the "
        'override win (its get_kv_cache_configs logs "Overriding num_gpu_blocks=M with '
        'num_gpu_blocks_override=3000"), so --base kv_cache_bytes sizes nothing here'
    ]
    notes = _notes(capsys, [*base, "--grid", "kv_cache_bytes=12GiB,16GiB"], tmp_path / "c.parquet")
    assert notes == [
        "note: --base num_blocks sizes the pool, not --grid kv_cache_bytes: vLLM lets the override win (its "
        'get_kv_cache_configs logs "Overriding num_gpu_blocks=M with num_gpu_blocks_override=N"), so --grid '
        "kv_cache_bytes sizes nothing here"
    ]


def test_an_override_at_some_points_says_how_many(capsys, tmp_path):
    """A grid of pools given in blocks and in bytes: the override applies where num_blocks is set."""
    argv = ["--base", "model=llama-3-8b", "--base", "gpu=h100-80gb", "--base", "kv_cache_bytes=12GiB"]
    argv += ["--base", "gpu_memory_utilization=0.8", "--grid", "num_blocks=3000,None"]
    notes = _notes(capsys, argv, tmp_path / "d.parquet")
    assert len(notes) == 2, notes
    assert notes[0].startswith(
        "note: --grid num_blocks 3,000 sizes the pool, not --base kv_cache_bytes 12.0 GiB"
    )
    assert notes[0].endswith("sizes nothing here (at 1 of the sweep's 2 configurations)")
    # (kv_cache_bytes over gpu_memory_utilization: at both)
    assert notes[1] == (
        "note: --base kv_cache_bytes 12.0 GiB is the KV memory, not what --base gpu_memory_utilization 0.8 "
        "leaves: vLLM's kv_cache_memory_bytes skips the memory profiling and ignores gpu_memory_utilization "
        '("This does not respect the gpu_memory_utilization config"), so --base gpu_memory_utilization sizes '
        "nothing here"
    )


def test_a_sweep_files_fields_are_named_by_its_tables_and_no_override_no_note(capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "s"\nworkloads = ["sharegpt"]\n[base]\nmodel = "llama-3-8b"\nkv_cache_bytes = "12GiB"\n'
        "[grid]\nnum_blocks = [3000, 4000]\n"
    )
    notes = _notes(capsys, ["--file", str(path)], tmp_path / "e.parquet")
    assert notes == [
        f"note: sweep file {path}: [grid] num_blocks sizes the pool, not sweep file {path}: [base] kv_cache_bytes: "
        'vLLM lets the override win (its get_kv_cache_configs logs "Overriding num_gpu_blocks=M with '
        f'num_gpu_blocks_override=N"), so sweep file {path}: [base] kv_cache_bytes sizes nothing here'
    ]
    notes = _notes(
        capsys, ["--base", "model=llama-3-8b", "--grid", "kv_cache_bytes=4GiB,8GiB"], tmp_path / "f.parquet"
    )
    assert notes == []


# (the paper's setup, its block of 16 given)
OPT = ["--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=12GiB", "--base", "block_size=16",
       "--workload", "sharegpt:arrival_rate=2", "--no-progress", "--no-resume"]  # fmt: skip


def _steady(capsys: pytest.CaptureFixture[str], argv: list[str], out: Path) -> list[str]:
    assert main(["sweep", *OPT, *argv, "--output", str(out)]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(STEADY)]


def test_a_sweep_too_short_for_a_steady_state_says_so_once_naming_its_points(capsys, tmp_path):
    """20 requests at 2 req/s arrive over less than their e2e p99: one note for the sweep naming both
    points of the grid (not once a seed), with how long their arrivals lasted, and asking for the requests
    `kvsim run`'s note asks for of the same run (the workload's rate over 5 of its e2e p99s)."""
    (note,) = _steady(capsys, ["--grid", "max_num_seqs=16,64", "--requests", "20"], tmp_path / "a.parquet")
    assert note.startswith(
        "note: not a steady state at 2 of the sweep's 2 points: max_num_seqs=16 (arrivals over "
    )
    assert "; max_num_seqs=64 (arrivals over " in note
    assert "less than 5 times their e2e p99, kvsim run's rule" in note
    assert main(["run", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "12GiB",
                 "--workload", "sharegpt:arrival_rate=2", "--requests", "20"]) == 0  # fmt: skip
    (said,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith(STEADY)]
    need = said.split("about ")[-1].split(" requests at this rate")[0]
    assert f"about {need} requests or more (--requests) to cover them all" in note
    frame = pl.read_parquet(tmp_path / "a.parquet")
    assert (frame["arrival_span_s"] < STEADY_SPANS * frame["e2e_s_p99"]).all()
    assert frame["steady_requests"].to_list() == [int(need.replace(",", ""))] * 2


def test_a_long_enough_sweep_says_nothing_of_it_and_many_points_are_counted(capsys, tmp_path):
    """2,000 requests at 2 req/s last many times their e2e p99: no note. Ten short points: the first
    eight named, then how many more, and several seeds say in one seed's run at least."""
    assert (
        _steady(capsys, ["--grid", "max_num_seqs=16,64", "--requests", "2000"], tmp_path / "b.parquet") == []
    )
    grid = ",".join(str(8 * i) for i in range(1, 11))
    argv = ["--grid", f"max_num_seqs={grid}", "--requests", "20", "--seeds", "2"]
    (note,) = _steady(capsys, argv, tmp_path / "c.parquet")
    assert note.startswith("note: not a steady state at 10 of the sweep's 10 points: max_num_seqs=8 ")
    assert "max_num_seqs=64 (" in note
    assert "max_num_seqs=72" not in note
    assert "; and 2 more: " in note
    assert "(in one seed's run at least)" in note


def test_rows_without_the_columns_get_no_note():
    """A sweep file written before rows kept `arrival_span_s` (resumed): no judgement, no note."""
    old = pl.DataFrame({"point_id": ["a"], "seed": [0], "e2e_s_p99": [3.0], "completed": [20]})
    assert sweep_too_short_note(old) is None
    assert sweep_too_short_note(old.with_columns(arrival_span_s=pl.lit(None, pl.Float64))) is None
    assert sweep_too_short_note(old.with_columns(arrival_span_s=pl.lit(15.0))) is None  # (exactly 5 times)
    assert "at 1 of the sweep's 1 point: the sweep's point (arrivals over 4.67 times" in (
        sweep_too_short_note(old.with_columns(arrival_span_s=pl.lit(14.0))) or ""
    )


def test_a_sweeps_header_counts_runs_and_says_what_they_are(capsys, tmp_path):
    """newcomer46 #9: the header said "8 points run" (points × seeds) beside the note's "2 of the sweep's 4
    points"; it counts runs now and says they are the points × the seeds, the note's points."""
    out = tmp_path / "h.parquet"
    argv = [
        "sweep",
        *OPT,
        "--grid",
        "max_num_seqs=16,64",
        "--requests",
        "20",
        "--seeds",
        "2",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"sweep: 4 runs now, 0 already in {out}: 2 points × 2 seeds (")
    (note,) = [x for x in lines if x.startswith(STEADY)]
    assert note.startswith("note: not a steady state at 2 of the sweep's 2 points: ")


RATES = ["--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=12GiB", "--base", "block_size=16",
         "--workload", "sharegpt", "--requests", "600", "--no-progress", "--no-resume"]  # fmt: skip
OVERLOADED = "note: overloaded at "


def _run_notes(capsys: pytest.CaptureFixture[str], rate: float) -> list[str]:
    """`kvsim run`'s notes on the sweep's point at `rate` req/s (one seed: the sweep's first, 0)."""
    argv = ["run", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "12GiB"]
    argv += [
        "--block-size",
        "16",
        "--workload",
        f"sharegpt:arrival_rate={rate}",
        "--requests",
        "600",
        "--seed",
        "0",
    ]
    assert main(argv) == 0
    return [x for x in capsys.readouterr().out.splitlines() if x.startswith("note: ")]


def test_a_sweep_over_rates_past_capacity_names_its_overloaded_points_as_kvsim_run_does(capsys, tmp_path):
    """600 ShareGPT-like requests on OPT-13B (12 GiB of KV on an A100-40GB), which serves about 3.7 req/s:
    at 1 req/s a steady state, at 16 req/s the queue grows through the run. One note for the sweep names
    the point at 16 by its column, with its rates, in kvsim run's words; kvsim run of each point says
    overloaded of that one only, and the rows keep the verdict. The overloaded point is not also named too
    short (kvsim run gives an overloaded run that note only), though its arrivals lasted less than 5 of its
    e2e p99s."""
    out = tmp_path / "r.parquet"
    assert main(["sweep", *RATES, "--grid", "workload.arrival_rate=1,16", "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (note,) = [x for x in lines if x.startswith(OVERLOADED)]
    assert note.startswith(
        "note: overloaded at 1 of the sweep's 2 points: workload.arrival_rate=16.0 (arrived at 16.7 "
        "requests/s, served at 3.79/s): "
    )
    assert "arrival_rate=1.0" not in note
    assert not [x for x in lines if x.startswith(STEADY)]  # (the point at 1 req/s is long enough)
    frame = pl.read_parquet(out).sort("workload.arrival_rate")
    assert frame["overloaded"].to_list() == [False, True]
    assert frame["arrival_span_s"][1] < STEADY_SPANS * frame["e2e_s_p99"][1]  # (short too: not said)
    # kvsim run's rule and words: its note on the point at 16, none on the point at 1.
    (said,) = [x for x in _run_notes(capsys, 16) if x.startswith("note: overloaded: ")]
    assert "offers 16.7 requests/s and this configuration served 3.79/s" in said
    tail = "TTFT and end-to-end latency count that wait and grow with --requests, not a steady state; lower the rate"
    assert tail in said
    assert tail in note
    assert said.endswith("or find the highest rate that meets an SLO with kvsim plan")
    assert note.endswith("lower the rate or find the highest rate that meets an SLO with kvsim plan")
    assert not [x for x in _run_notes(capsys, 1) if "overloaded" in x]


def test_the_overloaded_note_names_points_by_seed_and_old_rows_get_none():
    """A point is overloaded when one of its seeds' runs is, named by the seed served the least share of
    its arrivals; rows without the column (a sweep file from before it, resumed) or none overloaded: no
    note; bad arguments are refused by name."""
    frame = pl.DataFrame(
        {
            "point_id": ["a", "a", "b"],
            "seed": [0, 1, 0],
            "max_num_seqs": [8, 8, 64],
            "completed": [101] * 3,
            "arrival_span_s": [10.0, 20.0, 10.0],
            "throughput_rps": [8.0, 2.5, 9.0],
            "overloaded": [True, True, None],
        }
    )
    note = sweep_overloaded_note(frame) or ""
    assert note.startswith(
        "overloaded at 1 of the sweep's 2 points: max_num_seqs=8 (arrived at 5 requests/s, served at 2.5/s): "
        "its requests arrived faster than the configuration served them (in one seed's run at least), "
    )
    assert sweep_overloaded_note(frame.drop("overloaded")) is None
    assert sweep_overloaded_note(frame.with_columns(overloaded=pl.lit(False))) is None
    # (a too-short row that was overloaded is left to this note)
    short = frame.with_columns(e2e_s_p99=pl.lit(100.0))
    assert (sweep_too_short_note(short) or "").startswith(
        "not a steady state at 1 of the sweep's 2 points: max_num_seqs=64 "
    )
    with pytest.raises(InvalidArgumentError, match="shown 0"):
        sweep_overloaded_note(frame, shown=0)
    with pytest.raises(InvalidArgumentError, match="axes"):
        sweep_overloaded_note(frame, ["nope"])


def test_a_point_overloaded_in_one_seed_is_not_also_named_too_short(capsys, tmp_path):
    """adv47 B2: seed 0 of each point overloaded, seeds 1-3 not (200 requests at 3.8 and 4.2 req/s, 4
    seeds): the overloaded note names both points, a point being overloaded when one seed is, and the
    too-short note named them again from their other seeds, with more --requests as the way out (which
    only lengthens an overloaded run's queue). Both notes now judge per point: the too-short note leaves
    out every point with an overloaded seed."""
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=12GiB"]
    argv += ["--grid", "workload.arrival_rate=3.8,4.2", "--requests", "200", "--seeds", "4"]
    assert main([*argv, "--output", str(out), "--no-progress", "--no-resume"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (note,) = [x for x in lines if x.startswith(OVERLOADED)]
    assert note.startswith("note: overloaded at 2 of the sweep's 2 points: ")
    assert not [x for x in lines if x.startswith(STEADY)]
    frame = pl.read_parquet(out)
    # (the case itself: per point, an overloaded seed and others not, some of those too short)
    for _, g in frame.group_by("workload.arrival_rate"):
        assert g["overloaded"].any()
        calm = g.filter(~pl.col("overloaded"))
        assert calm.height
        assert (calm["arrival_span_s"] < STEADY_SPANS * calm["e2e_s_p99"]).any()
    # A point whose seeds are all calm is still judged by its rows.
    calm = frame.filter(~pl.col("overloaded"))
    assert (sweep_too_short_note(calm) or "").startswith("not a steady state at 2 of the sweep's 2 points: ")


def test_show_overloaded_prints_each_points_verdict_over_its_seeds(capsys, tmp_path):
    """`--show overloaded` was refused as "not a metric of a sweep row", though every row has the column
    (the rule of kvsim run's "overloaded" note): a point's cell is `yes` or `no` where its seeds agree,
    else how many of them were overloaded, as the rows say. Near the configuration's 3.7 req/s the 4
    seeds disagree."""
    out = tmp_path / "o.parquet"
    argv = [
        "sweep",
        *RATES,
        "--grid",
        "workload.arrival_rate=1,4,4.5,16",
        "--seeds",
        "4",
        "--output",
        str(out),
    ]
    argv[argv.index("600")] = "300"
    assert main([*argv, "--show", "overloaded,throughput_rps"]) == 0
    header, rows = printed_table(capsys.readouterr().out.splitlines())
    assert header == ["workload.arrival_rate", "n_seeds", "overloaded", "throughput_rps"]
    frame = pl.read_parquet(out)
    said = {}
    for (rate,), g in frame.group_by("workload.arrival_rate"):
        k = int(g["overloaded"].sum())
        said[f"{rate:.1f}"] = "no" if k == 0 else "yes" if k == g.height else f"{k} of {g.height} seeds"
    assert {r[0]: r[2] for r in rows} == said
    assert said["1.0"] == "no"
    assert said["16.0"] == "yes"
    assert any(cell.endswith(" of 4 seeds") for cell in said.values())  # (the case's point)
