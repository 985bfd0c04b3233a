"""What `kvsim run` and `kvsim sweep` print must not mislead: the help leads with examples and groups every
flag where a reader looks for it, a run without a GPU says its times are ticks, a flag that would do
nothing is refused, and a sweep shows the columns its axes move."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from kvsim.analysis.sweep_stats import is_share
from kvsim.cli import build_parser, main
from kvsim.cli.flags import GROUPS, RUN_EXAMPLES, VLLM_FLAGS, VLLM_V0_FLAGS, _knob_flags
from kvsim.model.config import CLUSTER_KNOBS
from tests.table_common import printed_table

# Section titles of `kvsim run --help`, in order.
SECTIONS = ["workload", *GROUPS.values(), "output"]


def run_help(capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["run", "--help"]) == 0
    return capsys.readouterr().out


def sections(text: str) -> dict[str, str]:
    """The help's text under each group title (a title is a line that ends with a colon, not indented)."""
    out: dict[str, str] = {}
    title = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            out[title] = ""
        elif title:
            out[title] += line + "\n"
    return out


def listed(section: str) -> set[str]:
    """The flags a help section lists (its invocation lines: `  --flag METAVAR, --alias   help`)."""
    out: set[str] = set()
    for line in section.splitlines():
        if line.startswith("  -"):
            invocation = re.split(r"\s{2,}", line.strip())[0]
            out |= {w.strip(",") for w in invocation.split() if w.startswith("-")}
    return out


def test_run_help_leads_with_examples_that_parse(capsys):
    text = run_help(capsys)
    head = text.splitlines()[:12]
    assert "Examples:" in head, head
    for _, line in RUN_EXAMPLES:
        assert line in text
        args = build_parser().parse_args(shlex.split(line)[1:])  # every flag of it exists
        assert args.command == "run"


def test_run_help_fleet_example_serves_its_trace(capsys):
    """The help's fleet example runs every request it is given (audit54 #11: on llama-3-8b, whose 8,192
    tokens are too few for most Mooncake conversation prompts, it rejected 4,568 of 10,000); 300 of them."""
    (line,) = [line for what, line in RUN_EXAMPLES if "--replicas" in line]
    assert main([*shlex.split(line)[1:], "--requests", "300"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["rejected"] == 0
    assert out["summary"]["completed"] == 300


def test_run_help_groups_every_flag(capsys):
    """vLLM's engine flags, vLLM v0's, kvsim's own, the fleet's and output each under their own title (the
    help was one 250-line list); every flag is still there, an underscore twin parses without a line."""
    text = run_help(capsys)
    found = sections(text)
    titles = [t for t in found if any(t.startswith(s.split(" (")[0]) for s in SECTIONS)]
    assert [t.split(" (")[0].split(":")[0] for t in titles] == [
        s.split(" (")[0].split(":")[0] for s in SECTIONS
    ]
    by_title = {t.split(" (")[0].split(":")[0]: found[t] for t in titles}
    vllm, v0 = by_title["vLLM's engine flags"], by_title["vLLM v0's flags"]
    own, fleet = by_title["kvsim's own knobs"], by_title["fleet"]
    vllm, v0, own, fleet, output = (listed(t) for t in (vllm, v0, own, fleet, by_title["output"]))
    for name in VLLM_FLAGS:
        assert _knob_flags(name)[0] in vllm, name
    for name in VLLM_V0_FLAGS:
        assert _knob_flags(name)[0] in v0, name
    for name in CLUSTER_KNOBS:
        assert _knob_flags(name)[0] in fleet, name
    for flag in ("--policy", "--gpu", "--time-model", "--free-order", "--preset"):
        assert flag in own, flag
        assert flag not in vllm, flag
    assert {"--json", "--save-result", "--goodput"} <= output
    # Every option string is listed, but for the underscore twins, which still parse.
    every = listed(text)
    parser = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    for action in parser._actions:
        for flag in action.option_strings:
            twin = flag.replace("_", "-")
            shown = flag in every
            assert shown == (twin == flag or twin not in action.option_strings), flag
    assert main(["run", "--block_size", "32", "--num_blocks", "200", "--requests", "10", "--json"]) == 0


def test_a_run_without_a_gpu_says_its_times_are_ticks(capsys):
    """With no GPU every step takes 1 ms: the throughput and latency groups say their times are ticks and a
    note says why (it printed "TTFT 1.415" ms unqualified); with a GPU they are the roofline's."""
    argv = ["run", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB", "--workload", "alpaca"]
    assert main([*argv, "--requests", "300"]) == 0
    out = capsys.readouterr().out
    assert "== latency (ms of ticks: 1 ms a step, not a GPU's time) ==" in out
    assert "== throughput (seconds of ticks: 1 ms a step, not a GPU's time) ==" in out
    assert "note: times are ticks (no GPU named): every step takes 1 ms" in out
    assert "--gpu NAME prices each step of the model with the roofline" in out
    assert main([*argv, "--requests", "300", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["time_model"] == "ticks"
    assert any(n.startswith("times are ticks") for n in data["notes"])
    assert (
        main(["run", "--model", "opt-13b", "--gpu", "a100-40gb", "--workload", "alpaca", "--requests", "300"])
        == 0
    )
    out = capsys.readouterr().out
    assert "ticks" not in out
    assert "== latency (ms; datasheet roofline: optimistic bounds) ==" in out
    # A GPU named with ticks chosen, or without a model: the line and the note say so (they said "no GPU
    # named" and told the user to name the GPU they had named).
    for extra, why in (
        (["--model", "opt-13b", "--time-model", "ticks"], "time_model ticks chosen"),
        (["--num-blocks", "500"], "a GPU but no model named"),
    ):
        assert main(["run", "--gpu", "a100-40gb", *extra, "--requests", "20"]) == 0
        out = capsys.readouterr().out
        assert f"({why}: not a GPU's time;" in out
        assert f"note: times are ticks ({why})" in out
        assert "no GPU named" not in out


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--model", "opt-13b", "--gpu", "a100-40gb", "--swap-space", "4"], "--swap-space"),
        (
            [
                "--model",
                "opt-13b",
                "--gpu",
                "a100-40gb",
                "--swap-space",
                "4",
                "--preemption-mode",
                "recompute",
            ],
            "--swap-space",
        ),
        (["--num-gpu-blocks-override", "200", "--cpu-blocks", "8"], "--cpu-blocks"),
    ],
)
def test_swap_space_with_recompute_is_refused(capsys, flags, named):
    """A CPU swap space with preemption recompute did nothing, silently. vLLM 0.33.0 has no --swap-space
    (its engine preempts by recompute only; vllm serve refuses the flag), so kvsim refuses it there too:
    one line, exit status 2, saying which preemption would use it."""
    assert main(["run", *flags, "--requests", "20"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"kvsim run: error: argument {named}: ")
    assert "would do nothing: preemption is 'recompute'" in err[0]
    assert "--preemption-mode swap or auto" in err[0]
    assert "Traceback" not in err[0]


def test_swap_space_is_used_where_something_swaps(capsys, tmp_path):
    argv = ["run", "--model", "opt-13b", "--gpu", "a100-40gb", "--requests", "20", "--json"]
    for more in (["--preemption-mode", "swap"], ["--preemption-mode", "auto"], ["--preset", "vllm-v0"]):
        assert main([*argv, "--swap-space", "4", *more]) == 0
        assert json.loads(capsys.readouterr().out)["config"]["cpu_blocks"] > 0
    # The v0 preset's own 4 GiB (not given) stays with recompute asked for, as v0 allocated it.
    assert main([*argv, "--preset", "vllm-v0", "--preemption-mode", "recompute"]) == 0
    capsys.readouterr()
    # A run file's [config] is named as such.
    path = tmp_path / "run.toml"
    path.write_text("[config]\nnum_blocks = 200\ncpu_blocks = 8\n")
    assert main(["run", "--toml", str(path), "--requests", "20"]) == 2
    assert f"run file {path}: [config] cpu_blocks: a CPU pool of 8 blocks" in capsys.readouterr().err


def sweep_table(
    capsys: pytest.CaptureFixture[str], tmp_path, *args: str
) -> tuple[list[str], list[list[str]]]:
    """`kvsim sweep ...`'s printed table: its column names and its rows (cells as printed)."""
    out = tmp_path / f"s{len(list(tmp_path.iterdir()))}.parquet"
    base = ["sweep", "--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=12GiB"]
    assert main([*base, *args, "--requests", "300", "--output", str(out), "--no-progress"]) == 0
    return printed_table(capsys.readouterr().out.splitlines())


def test_a_sweep_that_runs_with_and_without_a_tier_shows_the_tiers_metrics(capsys, tmp_path):
    """The metrics --show accepts were the first point's: a grid starting without a CPU tier refused
    `--show loads` though its tier rows have it. Rows without a tier show null there."""
    header, rows = sweep_table(
        capsys, tmp_path, "--grid", "kv_offloading_size=0,4", "--workload",
        "synthetic:num_system_prompts=4,system_prompt_len=600,arrival_rate=2", "--show", "loads,load_wait_s_mean",
    )  # fmt: skip
    assert header[-2:] == ["loads", "load_wait_s_mean"]
    assert rows[0][-2:] == ["null", "null"]
    assert rows[1][-2] != "null"


def test_a_sweeps_intervals_say_what_they_are_and_flag_a_share_past_its_bounds(capsys, tmp_path):
    """Two seeds printed `slo_attainment 0.649 ± 4.0` with no legend: a t-interval (t = 12.7 at one degree
    of freedom) far outside a share's [0, 1]. A line under the table says what a cell is (the mean over
    the seeds) and what ± is and over how many seeds; a share's interval (in percentage points) past 0 %
    or 100 % is kept as computed and marked, and the legend says what the mark means; other metrics'
    intervals are not marked."""
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=2GiB"]
    argv += ["--base", "pool_null_block=extra"]  # (the pool this case was found on: one block more than v1's)
    argv += ["--grid", "block_size=16,32", "--requests", "200", "--seeds", "2", "--goodput", "ttft:200"]
    argv += ["--workload", "sharegpt:arrival_rate=4", "--output", str(out), "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = printed_table(lines)
    marked = 0
    past, below = " (past 0..100 %)", " (past 0)"
    assert header[:3] == ["block_size", "num_blocks", "n_seeds"]
    for name in header[3:]:
        for cell in (r[header.index(name)] for r in rows):
            text = cell.removesuffix(past).removesuffix(below)
            mean, ci = (float(x.replace(",", "")) for x in text.split(" ± "))
            bound = 100 if is_share(name) else 1
            beyond = mean - ci < 0 or mean + ci > bound
            assert cell.endswith(past) == (beyond and name.startswith("slo_attainment")), (name, cell)
            # (user53 #11: every other metric here cannot be negative: an interval below 0 is marked too)
            assert cell.endswith(below) == (not is_share(name) and mean - ci < 0), (name, cell)
            marked += cell.endswith(past)
    assert marked  # (this sweep has one: slo_attainment 4.5 ± 6.4)
    legend = [ln for ln in lines if ln.startswith(("mean over ", past.strip() + ": "))]
    assert legend[0].startswith(
        "mean over each point's 2 seeds (a count's to a tenth where it is not whole) ± "
    )
    assert "the 95 % t-interval's half-width (a share's in percentage points)" in legend[0]
    assert "t = 12.7 at 2 seeds (so the interval is wide" in legend[0]
    assert legend[1].startswith("(past 0..100 %): a share whose interval reaches below 0 % or above 100 %")
    # One seed: no interval, no legend.
    assert (
        main([*argv[: argv.index("--seeds")], "--output", str(tmp_path / "one.parquet"), "--no-progress"])
        == 0
    )
    assert not [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("mean over", "(past"))]


def test_a_sweep_shows_what_its_axes_move(capsys, tmp_path):
    """Over block size the default columns were throughput, batch, utilisation and e2e p99, identical for
    16 and 32: now the blocks the memory holds, internal fragmentation and preemptions come first. The
    fragmentation is the share of the slots allocated (as a share of the pool it reads ~0 wherever the pool
    is large, whatever the block size)."""
    header, rows = sweep_table(capsys, tmp_path, "--grid", "block_size=16,32")
    frag = "internal_fragmentation_of_allocated"
    assert header[:5] == ["block_size", "num_blocks", "n_seeds", frag, "preemptions"]
    col = {name: [r[i] for r in rows] for i, name in enumerate(header)}
    assert col["block_size"] == ["16", "32"]
    # 12 GiB cut into blocks of each size (983.04 and 491.52 of them)
    assert (int(col["num_blocks"][0]), int(col["num_blocks"][1])) == (983, 491)
    assert 0.0 < float(col[frag][0]) < float(col[frag][1]) < 100.0  # (percent)
    assert header[5:] == ["throughput_rps", "e2e_s_p99"]  # then what any knob is for
    assert "kv_utilization" not in header  # block size barely moves it (0.3533 and 0.3537 once)
    # A policy grid leads with what a policy moves; --show still chooses.
    header, _ = sweep_table(capsys, tmp_path, "--grid", "policy=vllm,orca-max")
    assert header[2:6] == ["mean_batch", "reservation_waste", "external_fragmentation", "preemptions"]
    assert "num_blocks" not in header  # the same pool at every point
    header, _ = sweep_table(capsys, tmp_path, "--grid", "block_size=16,32", "--show", "throughput_rps")
    assert header == ["block_size", "num_blocks", "n_seeds", "throughput_rps"]


def test_a_sweep_of_several_workloads_over_a_workload_parameter_names_each_workload_once(capsys, tmp_path):
    """Beside the column `workload.arrival_rate` the workload column read `sharegpt:arrival_rate=4.0`: the
    grid's parameter twice. It reads each workload's name and its own parameters only, as one workload's
    sweep names its points by the grid's column alone; the steady-state note names the points the same way."""
    header, rows = sweep_table(
        capsys, tmp_path, "--grid", "workload.arrival_rate=2,4", "--workload", "sharegpt",
        "--workload", "alpaca:arrival_rate=1", "--workload", "sharegpt:arrivals=gamma,burstiness=0.5",
    )  # fmt: skip
    assert header[:3] == ["workload", "workload.arrival_rate", "n_seeds"]
    shown = [(r[0], r[1]) for r in rows]
    assert shown == [
        ("sharegpt", "2.0"),
        ("sharegpt", "4.0"),
        ("alpaca", "2.0"),
        ("alpaca", "4.0"),
        ("sharegpt:arrivals=gamma,burstiness=0.5", "2.0"),
        ("sharegpt:arrivals=gamma,burstiness=0.5", "4.0"),
    ]
    # One workload: no workload column at all (the grid's column names its points).
    header, _ = sweep_table(capsys, tmp_path, "--grid", "workload.arrival_rate=2,4", "--workload", "sharegpt")
    assert header[:2] == ["workload.arrival_rate", "n_seeds"]


def test_the_sweeps_notes_name_a_workload_without_the_grids_parameters(capsys, tmp_path):
    """The steady-state note named a point `workload=sharegpt:arrival_rate=4.0 workload.arrival_rate=4.0`."""
    out = tmp_path / "n.parquet"
    argv = ["sweep", "--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--base", "kv_cache_bytes=12GiB"]
    argv += ["--grid", "workload.arrival_rate=2,4", "--workload", "sharegpt", "--workload", "alpaca"]
    assert main([*argv, "--requests", "50", "--output", str(out), "--no-progress"]) == 0
    notes = [x for x in capsys.readouterr().out.splitlines() if x.startswith("note: not a steady state")]
    assert notes  # (50 requests are too short for a steady state at these rates)
    assert "workload=sharegpt workload.arrival_rate=" in notes[0]
    assert "arrival_rate=2.0 workload.arrival_rate" not in notes[0]


def test_the_config_line_names_tier_knobs_only_with_a_tier(capsys):
    """A run without a CPU tier lists no kv_offloading_* knob (its derived link time is moot); one with a
    tier lists its size, chunks and link time."""
    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "20"]
    assert main(base) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("config: "))
    assert "kv_offloading" not in line
    assert main([*base, "--kv-offloading-size", "4"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("config: "))
    assert "kv_offloading_chunks=512" in line  # (4 GiB of 8 MiB blocks: 64 tokens × 128 KiB)
    assert "kv_offloading_ps_per_block=" in line
    assert "kv_offloading_size=4 GiB," in line  # its unit, as vLLM's flag reads it (was a bare 4.0)
    assert main([*base, "--kv-offloading-size", "512MiB"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("config: "))
    assert "kv_offloading_size=0.5 GiB," in line
    assert "kv_offloading_chunks=64" in line  # (512 MiB / 8 MiB)
    # ShareGPT-like prompts share nothing: no load, so no mean wait per load to show (was "0 ms").
    loads = next(x for x in out if x.strip().startswith("loads "))
    assert re.search(
        r"^  loads \(transfers: blocks, bytes\)\s+0 \(0 blocks, 0 B \[kv_offload_load_bytes\]\)$", loads
    ), loads
    wait = next(x for x in out if "waiting for loads" in x)
    assert wait.endswith("- (no loads)")


def test_a_run_in_which_no_step_ran_shows_no_means(capsys):
    """Every request rejected at arrival (a 2-block pool): no step ran, so the memory means, the mean
    batch and the hit rates have nothing to average ("-", they read 0.0 % and 0: the summary says None); peaks
    and counts are 0."""
    assert main(["run", "--num-gpu-blocks-override", "2", "--workload", "sharegpt", "--requests", "50"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) == 2:
            rows[parts[0]] = parts[1]
    for label in (
        "KV utilization (tokens stored)",
        "mean batch (per step)",
        "prefix hit rate",
        "blocks saved by sharing (mean)",
    ):
        assert rows[label].startswith("-"), (label, rows[label])
    assert rows["peak batch"] == "0 sequences"
    assert rows["evictions (cached free blocks reused)"] == "0 blocks"
    assert rows["requests rejected"] == "50"


def test_a_run_in_which_no_step_ran_has_none_for_its_means_in_json(capsys):
    """The same run as JSON (and `kvsim.simulate`'s summary): a mean or a rate over nothing is null, not
    0.0 (it said 0.0 for the memory means, the batch and the hit rates, while the latencies were null);
    its peaks and counts are 0; with a CPU tier its hit rates and occupancy are null too."""
    import json

    argv = ["run", "--num-gpu-blocks-override", "2", "--workload", "sharegpt", "--requests", "50", "--json"]
    assert main(argv) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["num_steps"] == 0
    for key in (
        "kv_utilization",
        "mean_batch",
        "time_weighted_batch",
        "mean_batched_tokens",
        "prefix_hit_rate",
        "prefix_hit_rate_first_admission",
        "blocks_saved_by_sharing",
        "stored_share_of_allocated",
        "ttft_s_mean",
    ):
        assert s[key] is None, key
    assert (s["peak_batch"], s["evictions"], s["throughput_rps"]) == (0, 0, 0.0)  # (0 finished over its span)
    import kvsim
    from kvsim.workloads import synthetic

    w = synthetic(5, lengths="fixed", length_params={"prompt_len": 4000, "output_len": 10})
    cfg = kvsim.SimConfig(model="llama-3.1-8b", kv_cache_bytes="100MiB", kv_offloading_chunks=64)
    t = kvsim.simulate(w, cfg).summary
    assert t["num_steps"] == 0
    for key in ("cpu_hit_rate", "miss_rate", "external_prefix_cache_hit_rate", "cpu_tier_occupancy"):
        assert t[key] is None, key
    assert t["cpu_tier_peak_occupancy"] == 0.0


def test_a_replica_routed_no_request_has_no_hit_rate(capsys):
    """Two requests over four replicas (round-robin): replicas 2 and 3 admit nothing, so their hit rate is
    "-" (it read 0.0 %), while the two that ran show theirs."""
    argv = [
        "run",
        "--requests",
        "2",
        "--replicas",
        "4",
        "--time-model",
        "ticks",
        "--num-gpu-blocks-override",
        "300",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.startswith("== fleet: 4 replicas"))
    rows = [line.split() for line in out[head + 2 : head + 6]]
    assert [r[1] for r in rows] == ["1", "1", "0", "0"]
    assert [r[4] for r in rows] == ["0.0", "0.0", "-", "-"]


def test_a_sweep_says_which_combinations_skip_invalid_left_out(capsys, tmp_path):
    """--skip-invalid ran the valid points and said nothing of the rest (4 of 6 here): now a note lists
    them with why."""
    out = tmp_path / "s.parquet"
    argv = [
        "sweep",
        "--base",
        "model=opt-13b",
        "--base",
        "gpu=a100-40gb",
        "--grid",
        "tensor_parallel_size=1,2,3",
    ]
    argv += ["--grid", "max_model_len=2048,4096", "--requests", "50", "--skip-invalid", "--output", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "sweep: 2 runs now" in printed
    # (50 requests are too short for a steady state: that note is tests/test_sweep_notes.py's)
    (note,) = [
        line for line in printed.splitlines() if line.startswith("note: ") and "steady state" not in line
    ]
    assert note.startswith("note: 4 invalid grid combinations skipped (--skip-invalid): ")
    assert "'max_model_len': 4096" in note
    assert "'tensor_parallel_size': 3" in note


def test_a_compare_whose_best_candidates_tie_says_so(capsys):
    """Buddy and first-fit placement give the same paged run, so the same rate: 'best: placement=buddy'
    named one of them for the order they were given in."""
    argv = ["plan", "--model", "opt-13b", "--gpu", "a100-40gb", "--workload", "sharegpt", "--workers", "2"]
    argv += ["--requests", "300", "--slo", "ttft_p99:2s", "--compare", "placement=buddy,first-fit"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    (best,) = [line for line in out if line.startswith("best: ")]
    assert best.startswith("best: a tie at ")
    assert "between placement=buddy, placement=first-fit; " in best
    # (300 requests at 3.4 req/s arrive over less than 5 times their e2e p99: not a steady state)
    assert best.endswith("from runs too short to reach a steady state (NOT A STEADY STATE above), so the "
                         "rate may be overstated; more requests (--requests) tell whether the order holds")  # fmt: skip
    # --json says the same: `tied` lists both, and no `best` (it named the first given).
    import json

    assert main([*argv, "--json"]) == 0
    compare = json.loads(capsys.readouterr().out)["compare"]
    assert compare["tied"] == ["placement=buddy", "placement=first-fit"]
    assert compare["best"] is None
    assert compare["searched"] == "placement=buddy"
    # The header's pool is every candidate's here; over block sizes it is the base config's only.
    (pool,) = [line for line in out if line.startswith("pool: ")]
    assert "the probes vary it" not in pool
    assert main([*argv[:-1], "block_size=8,16,32"]) == 0
    (pool,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pool: ")]
    assert pool.endswith("(the base config's: the probes vary it)")


def test_a_smallest_kv_cache_search_probes_no_cache_the_gpu_cannot_hold(capsys):
    """--smallest kv_cache_bytes on a GPU: its default cap (64 x the config's own) reached caches that do
    not fit beside the weights; refused, they counted as failures above passing sizes ("NOT MONOTONE").
    The cap is now what the GPU holds (`kvsim.analysis.plan_smallest.smallest_memory`'s `high` above it is refused, below)."""
    argv = ["plan", "--model", "opt-13b", "--gpu", "a100-40gb", "--workload", "sharegpt", "--workers", "2"]
    argv += ["--requests", "300", "--slo", "ttft_p99:2s", "--smallest", "kv_cache_bytes", "--rate", "2.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "NOT MONOTONE" not in out
    assert "does not fit" not in out
    assert "converged: smallest kv_cache_bytes" in out
    import kvsim
    from kvsim.analysis.plan_smallest import smallest_memory
    from kvsim.errors import InvalidArgumentError
    from kvsim.workloads import synthetic

    cfg = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb")
    with pytest.raises(
        InvalidArgumentError, match=r"high 1e\+11: kv_cache_bytes above .* does not fit a100-40gb"
    ):
        smallest_memory(synthetic(10), cfg, {"ttft_p99": 2.0}, rate=1.0, knob="kv_cache_bytes", high=1e11)


def test_a_slow_host_link_blames_the_link_and_only_where_a_tier_uses_it(capsys):
    """`--gpu-link 1MB/s` with no CPU tier was refused as "kv_offloading_ps_per_block 2097152000000 must be
    between ...", a knob nobody set, for a run where nothing crosses the link."""
    argv = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--gpu-link", "1MB/s", "--requests", "20"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--kv-offloading-size", "4GiB"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    # (a block of 64 tokens, the default, of 128 KiB each: 8,388,608 B at 10^6 B/s)
    assert "host link (1e+06 B/s) moves a KV block in 8.389 s" in err
    assert "kv_offloading_ps_per_block 2097152000000" not in err


def test_no_count_is_written_with_a_parenthesised_plural():
    """A count agrees with its noun (`kvsim.model.units.fmt_count`): "1 value failed", "2 values", never
    "value(s)". Every string literal in kvsim's Python and every Rust format string that the user may
    read is searched for a word followed by "(s)" (a unit such as "TTFT (s)" has a space before it; a Rust
    string's `{}` fields are filled, not written)."""
    import io
    import tokenize
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "python" / "kvsim").rglob("*.py")):
        with path.open("rb") as f:
            for tok in tokenize.tokenize(f.readline):
                text = re.sub(r"\{[^{}]*\}", "", tok.string)  # (an f-string's fields are code: `pct(s)`)
                if tok.type == tokenize.STRING and re.search(r"[A-Za-z]\(s\)", text):
                    found.append(f"{path.relative_to(root)}:{tok.start[0]}")
    for path in sorted((root / "rust").rglob("*.rs")):
        for i, line in enumerate(io.StringIO(path.read_text()), 1):
            if not line.lstrip().startswith("//") and re.search(r'"[^"]*[A-Za-z]\(s\)[^"]*"', line):
                found.append(f"{path.relative_to(root)}:{i}")
    assert not found, found


def test_a_sweeps_invalid_combinations_agree_with_their_count(capsys, tmp_path):
    """`kvsim sweep --skip-invalid` said "1 invalid grid combination(s)": one is singular, two plural."""
    argv = ["sweep", "--requests", "5", "--no-progress", "--base", "num_blocks=64", "--skip-invalid"]
    argv += ["--grid", "kv_offloading_chunks=0,4", "--grid", "policy=vllm,reserve"]
    assert main([*argv, "--output", str(tmp_path / "a.parquet")]) == 0
    assert "note: 1 invalid grid combination skipped (--skip-invalid): " in capsys.readouterr().out
    argv += ["--grid", "block_size=16,32"]
    assert main([*argv, "--output", str(tmp_path / "b.parquet")]) == 0
    assert "note: 2 invalid grid combinations skipped (--skip-invalid): " in capsys.readouterr().out


def test_evictions_in_a_run_far_from_full_are_said_to_be_reuses_not_pressure(capsys):
    """newcomer46 #3: a run peaking at 30 % of its pool still counts ten thousand evictions, every block
    allocated once the never-used ones ran out taking the oldest cached free one. The row says what it
    counts, and the not-memory-bound note says they are reuses, not pressure, with the count in the row
    and vLLM's metric for them."""
    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--kv-cache-memory-bytes", "4GiB",
            "--max-model-len", "8192", "--workload", "sharegpt:arrival_rate=8", "--requests", "400"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    (row,) = [line for line in out if line.strip().startswith("evictions")]
    label, count = re.split(r"\s{2,}", row.strip())
    assert label == "evictions (cached free blocks reused)"
    n = int(count.removesuffix(" blocks").replace(",", ""))
    assert n > 1000
    (note,) = [line for line in out if line.startswith("note: not memory-bound")]
    assert note.endswith(
        f"; the run's {n:,} evictions are cached free blocks reused for new ones (vLLM's prefix-cache "
        "evictions, which it times, sampled, as vllm:kv_block_idle_before_evict_seconds with "
        "--kv-cache-metrics), not memory pressure"
    )
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["evictions"] == n
    assert data["summary"]["peak_allocated_fraction"] < 0.5


def test_a_hybrid_pools_block_adds_up_and_an_alias_is_named_as_given(capsys):
    """newcomer46 #11: gemma-3-27b's pool line said "1 block = 1.2 MiB" for a 1.25 MiB block (10 layers ×
    128 KiB), so its blocks × the block missed the GiB beside them; three significant figures now. And
    `--model deepseek-r1` named deepseek-v3 in the pool and time lines while config said deepseek-r1:
    they name the alias and the architecture it shares."""
    from kvsim.model.units import fmt_bytes

    argv = [
        "run",
        "--model",
        "gemma-3-27b",
        "--gpu",
        "h100-80gb",
        "--max-model-len",
        "32768",
        "--requests",
        "5",
        "--block-size",
        "16",
    ]
    assert main(argv) == 0
    (pool,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pool: ")]
    m = re.match(r"pool: ([\d,]+) blocks = ([\d.]+ GiB) in .*; block 16, 1 block = ([\d.]+) MiB \(", pool)
    assert m is not None, pool
    blocks, total, block = int(m[1].replace(",", "")), m[2], float(m[3])
    assert block == 1.25
    assert fmt_bytes(blocks * block * 2**20) == total
    argv = [
        "run",
        "--model",
        "deepseek-r1",
        "--gpu",
        "h200",
        "--tensor-parallel-size",
        "8",
        "--requests",
        "5",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    (pool,) = [line for line in out if line.startswith("pool: ")]
    (time,) = [line for line in out if line.startswith("time: ")]
    assert "; deepseek-r1 (deepseek-v3 architecture) 68.6 KiB per token, tp 8)" in pool
    assert time.startswith("time: roofline of deepseek-r1 (deepseek-v3 architecture) on h200, ")
    assert (
        main(
            [
                "run",
                "--model",
                "deepseek-v3",
                "--gpu",
                "h200",
                "--tensor-parallel-size",
                "8",
                "--requests",
                "5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "; deepseek-v3 68.6 KiB per token" in out
    assert "architecture)" not in out


def test_hit_rates_read_off_without_prefix_caching(capsys):
    """rev48 #8: with `--no-enable-prefix-caching` the cache group printed "prefix hit rate 0.0 %" as if
    measured; it reads "off". With caching on, the same run's rates are numbers."""

    def cache_rows(*flags: str) -> dict[str, str]:
        argv = ["run", "--num-gpu-blocks-override", "400", "--workload", "sharegpt", "--requests", "40"]
        assert main([*argv, *flags]) == 0
        rows = {}
        for line in capsys.readouterr().out.split("== cache ==")[1].split("==")[0].splitlines():
            parts = re.split(r"\s{2,}", line.strip())
            if len(parts) == 2:
                rows[parts[0]] = parts[1]
        return rows

    off = cache_rows("--no-enable-prefix-caching")
    assert off["prefix hit rate"] == off["prefix hit rate (first admissions)"] == "off"
    on = cache_rows()
    assert re.fullmatch(r"\d+\.\d %", on["prefix hit rate"]), on


def test_a_fleets_cache_group_says_its_counts_are_summed(capsys):
    """rev48b #4: under the memory group's "one replica's" heading, a fleet's blocks saved by sharing and
    evictions read as one replica's where they are the replicas' sum; a line under the cache group says so,
    and the figures are the sums of the replicas' own (`--json`'s per_replica)."""
    argv = ["run", "--num-gpu-blocks-override", "120", "--workload", "sharegpt", "--requests", "200"]
    assert main([*argv, "--replicas", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    per = d["fleet"]["per_replica"]
    assert d["summary"]["evictions"] == sum(r["evictions"] for r in per) > 0
    assert d["summary"]["cow_copies"] == sum(r["cow_copies"] for r in per)
    assert d["summary"]["blocks_saved_by_sharing"] == pytest.approx(
        sum(r["blocks_saved_by_sharing"] for r in per)
    )
    assert main([*argv, "--replicas", "2"]) == 0
    out = capsys.readouterr().out
    assert "blocks saved, evictions and copies summed over the 2 replicas)" in out.split("== cache ==")[1]
    assert main(argv) == 0
    assert "summed over" not in capsys.readouterr().out


def test_a_disaggregated_run_says_why_fewer_transfers_than_requests_routed(capsys):
    """rev48b #11: "transfers: 599" under 600 requests routed to a prefill replica, with no word why; a line
    says how many moved nothing and the two reasons (a prompt filling no whole block, a rejection there)."""
    argv = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workload", "sharegpt:arrival_rate=12"]
    argv += ["--requests", "600", "--replicas", "3", "--prefill-replicas", "1", "--router", "least-loaded"]
    assert main([*argv, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    gap = s["pd_disaggregated"] - s["pd_transfers"]
    assert gap > 0
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"  ({gap:,} of the {s['pd_disaggregated']:,} routed to a prefill replica moved nothing: " in out


def test_sweep_base_refuses_a_workload_parameter_with_what_to_give_instead(capsys):
    """`kvsim sweep --base workload.X=V` said only "'workload.X' is not a SimConfig field": one line, exit 2,
    naming the two ways a sweep takes a workload parameter, with the value given."""
    assert main(["sweep", "--base", "workload.arrival_rate=3", "--requests", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kvsim sweep: error: argument --base: workload.arrival_rate is a workload parameter, not a SimConfig "
        "field: give it in the workload (--workload NAME:arrival_rate=3) or as a grid of one value "
        "(--grid workload.arrival_rate=3)"
    ], err
