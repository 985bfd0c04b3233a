"""`kvsim run` through the real entry point, the audits of its interface (split from tests/test_cli_run.py):
any text for any flag runs or fails in one line, the CLI and the API alike, the interface a vLLM user sees,
the CPU tier's table."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.cli import main
from tests.cli_run_common import SMALL, _error, _json

# -- any text for any flag: a run or one line with exit status 2, never a traceback ------------------------------
_FLAGS = [
    "--block-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--watermark",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--iteration-time-ps",
    "--policy",
    "--preemption-mode",
    "--enable-prefix-caching",
    "--seed",
    "--requests",
    "--time-scale",
    "--workload",
    "-tp",
]


@settings(max_examples=60, deadline=None)
@given(
    flag=st.sampled_from(_FLAGS),
    text=st.one_of(
        st.text(alphabet="0123456789.-eE:=,/abcGiBms ", min_size=1, max_size=8),
        st.sampled_from(["nan", "inf", "-1", "0", "1e400", "true", "none", "2**64", "sharegpt:turns=0"]),
    ),
)
def test_any_flag_value_runs_or_fails_in_one_line(flag, text):
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    argv = ["run", "--requests", "5", "--num-blocks", "64", "--model", "opt-13b", flag, text, "--json"]
    if flag == "--requests":
        argv = ["run", "--num-blocks", "64", flag, text, "--json"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code == 0:
        json.loads(out.getvalue())
    else:
        assert code == 2, err.getvalue()
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1, err.getvalue()
        assert "Traceback" not in err.getvalue()


def test_cli_and_api_give_the_same_latencies(capsys):
    """One configuration, two interfaces, one answer (the CLI once defaulted to a different time model)."""
    argv = [
        "run",
        "--requests",
        "300",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h100-80gb",
        "--workload",
        "sharegpt:arrival_rate=20",
    ]
    data = _json(capsys, argv)
    w = kvsim.analysis.sweep.make_workload("sharegpt", {"arrival_rate": 20.0}, 300, 0)
    api = kvsim.simulate(w, kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb")).summary
    assert data["summary"]["ttft_s_p99"] == api["ttft_s_p99"]
    assert data["summary"]["makespan_s"] == api["makespan_s"]


def test_preset_flag(capsys):
    argv = [
        "run",
        "--requests",
        "20",
        "--model",
        "opt-13b",
        "--kv-cache-memory-bytes",
        "12GiB",
        "--preset",
        "vllm-v0",
    ]
    cfg = _json(capsys, argv)["config"]
    assert (cfg["append_check"], cfg["preemption"], cfg["cpu_blocks"]) == ("one-free-block", "auto", 327)
    assert _json(capsys, [*argv, "--watermark", "0.05"])["config"]["watermark"] == 0.05


def test_a_row_window_starts_the_clock_at_its_first_request():
    from kvsim.workloads.specs import apply_trace_params

    w = kvsim.analysis.sweep.make_workload("sharegpt", {}, 100, 0)
    window = apply_trace_params(w, {"start": 40, "stop": 60}, "sharegpt")
    assert len(window) == 20
    assert window.arrival[0] == 0.0
    assert window.arrival[-1] == pytest.approx(w.arrival[59] - w.arrival[40])
    assert (window.prompt_len == w.prompt_len[40:60]).all()
    with pytest.raises(kvsim.InvalidArgumentError, match="hold no request"):
        apply_trace_params(w, {"start": 100}, "sharegpt")


@pytest.mark.parametrize(
    "head",
    [
        'requests = "abc"',
        "requests = 0",
        "requests = true",
        "requests = 1e400",
        "seed = -3",
        "seed = 1.5",
        "workload = 5",
        'backend = "gpu"',
        "config = 3",
        "bogus = 1",
    ],
)
def test_a_bad_run_file_value_is_one_line_naming_the_file(capsys, tmp_path, head):
    """A run file's values go through the same bounds as the flags (no traceback, no silent int())."""
    path = tmp_path / "run.toml"
    body = f"{head}\n" + ("[config]\nnum_blocks = 300\n" if not head.startswith("config") else "")
    path.write_text(body)
    line = _error(capsys, ["run", "--toml", str(path)])
    assert line.startswith(f"kvsim run: error: run file {path}:"), line


def test_save_result_where_nothing_can_be_written_fails_before_the_run(capsys):
    line = _error(capsys, [*SMALL, "--save-result", "/proc/kvsim-results"])
    assert line.startswith("kvsim run: error: argument --save-result: cannot create /proc/kvsim-results"), (
        line
    )


def test_a_refused_run_leaves_no_result_folder(capsys, tmp_path):
    """The folder was created when checked, before the run's other flags were: a refused run left it."""
    d = tmp_path / "new" / "results"
    _error(capsys, [*SMALL, "--save-result", str(d), "--block-size", "-1"])
    assert not (tmp_path / "new").exists()
    (tmp_path / "f").touch()
    line = _error(capsys, [*SMALL, "--save-result", str(tmp_path / "f" / "x")])
    assert line.endswith(f"cannot create {tmp_path / 'f' / 'x'}: {tmp_path / 'f'} is not a folder"), line
    assert main([*SMALL, "--save-result", str(d)]) == 0
    assert len(list(d.glob("*.json"))) == 1


# -- the audit of the interface a vLLM user sees ------------------------------------------------------------------
def test_preset_flag_offers_every_preset_simconfig_has(capsys):
    """`--preset` once offered three of SimConfig.preset's five names (vllm-0.19 and vllm-0.11 missing)."""
    from kvsim.cli.flags import PRESETS

    with pytest.raises(kvsim.InvalidArgumentError) as exc:
        kvsim.SimConfig.preset("no-such-preset")
    listed = {name.strip(" '") for name in str(exc.value).split("is not one of", 1)[1].split(",")}
    assert set(PRESETS) == listed
    for name in PRESETS:
        data = _json(capsys, [*SMALL, "--preset", name])
        expected = kvsim.SimConfig.preset(name, num_blocks=200)
        assert data["config"]["free_order"] == expected.free_order, name
        assert data["config"]["waiting_over_budget"] == expected.waiting_over_budget, name


@pytest.mark.parametrize("rows", ["5:2", "7:7"])
def test_rows_window_must_be_ordered(capsys, rows):
    line = _error(capsys, [*SMALL, "--rows", rows])
    assert line.startswith("kvsim run: error: argument --rows:"), line  # was "run file None: ..."


def test_rows_window_past_the_workload_blames_rows(capsys):
    line = _error(capsys, [*SMALL, "--rows", "100:200"])
    assert line.startswith("kvsim run: error: argument --rows:"), line
    assert "hold no request" in line, line


def test_request_rate_inf_says_how_to_queue_everything_at_once(capsys):
    """vllm bench serve's default --request-rate is inf (every request at once)."""
    line = _error(capsys, [*SMALL, "--request-rate", "inf"])
    assert line.startswith("kvsim run: error: argument --request-rate:")
    assert "arrivals=all-at-once" in line
    data = _json(capsys, [*SMALL, "--workload", "sharegpt:arrivals=all-at-once"])
    assert data["workload"]["params"]["arrivals"] == "all-at-once"


def test_bare_save_result_is_vllms_flag_with_result_dir(capsys, tmp_path, monkeypatch):
    """vllm bench serve spells it `--save-result --result-dir DIR` (a flag and a folder)."""
    d = tmp_path / "runs"
    assert main([*SMALL, "--save-result", "--result-dir", str(d)]) == 0
    assert len(list(d.glob("*.json"))) == 1
    assert len(list(d.glob("*.requests.parquet"))) == 1
    monkeypatch.chdir(tmp_path)
    assert main([*SMALL, "--save-result"]) == 0
    assert len(list(tmp_path.glob("kvsim-*.json"))) == 1
    capsys.readouterr()
    line = _error(capsys, [*SMALL, "--result-dir", str(d)])
    assert line.startswith("kvsim run: error: argument --result-dir: applies with --save-result"), line
    line = _error(capsys, [*SMALL, "--save-result", str(d), "--result-dir", str(d)])
    assert line.startswith("kvsim run: error: argument --result-dir: not allowed"), line
    f = tmp_path / "a-file"
    f.write_text("x")
    line = _error(capsys, [*SMALL, "--save-result", "--result-dir", str(f)])
    assert line.startswith("kvsim run: error: argument --result-dir:"), line
    assert "not a folder" in line, line


def test_gpu_memory_utilization_unset_is_the_releases_and_presets_keep_their_own(capsys):
    """vLLM 0.20.0 and later default --gpu-memory-utilization to 0.92 (once kvsim kept 0.9 and a run
    noted the difference), and 0.34.0 leaves it unset, 1.0 where the pool is sized from measured memory
    (`CacheConfig.resolved_gpu_memory_utilization`): `kvsim run --gpu` sizes at that unless a preset of an
    older release or the flag says otherwise (0.92 given caps measured sizing at 0.92), its --json shows the
    share it sized at, and no run notes a difference any more."""
    argv = ["run", "--requests", "20", "--model", "llama-3-8b", "--gpu", "h100-80gb"]
    measured = ["--kv-cache-sizing", "measured"]
    for extra, share in (
        (["--kv-cache-sizing", "profiled"], 0.92),
        (measured, 1.0),
        ([*measured, "--gpu-memory-utilization", "0.92"], 0.92),
        (["--preset", "vllm-0.19"], 0.9),
        (["--preset", "vllm-v0", "--gpu-memory-utilization", "0.8"], 0.8),
    ):
        data = _json(capsys, [*argv, *extra])
        assert data["config"]["gpu_memory_utilization"] == share, extra
        preset = extra[1] if extra[0] == "--preset" else "vllm-latest"
        sizing = {"kv_cache_sizing": extra[1]} if extra[0] == "--kv-cache-sizing" else {}
        blocks = kvsim.SimConfig.preset(
            preset, model="llama-3-8b", gpu="h100-80gb", gpu_memory_utilization=share, **sizing
        ).num_blocks
        assert f"{blocks:,} blocks" in data["pool"], data["pool"]
        assert not any("--gpu-memory-utilization" in n for n in data["notes"]), data["notes"]


def test_vllm_serves_batch_defaults_have_a_tier_past_160_gib():
    """vLLM 0.33.0's get_batch_defaults gives B200-class GPUs (>= 160 GiB) 16384 tokens and 1024 seqs."""
    from kvsim.model.gpus import Gpu, vllm_server_batch_defaults

    big = Gpu("b200", 180 * 2**30, 8e12, 2.2e15, 64e9, "test")
    assert vllm_server_batch_defaults(big) == (16384, 1024)
    assert vllm_server_batch_defaults(kvsim.gpus.get("h200")) == (8192, 1024)
    assert vllm_server_batch_defaults(kvsim.gpus.get("a100-80gb")) == (2048, 256)


def test_the_v0_batch_rule_reads_no_gpu_and_the_serve_rules_are_refused_without_one(capsys):
    """vLLM v0's budget is max(max_model_len, 2048) (SchedulerConfig, `_DEFAULT_MAX_NUM_BATCHED_TOKENS`) on
    any GPU, so it holds without one: OPT-13B (a 2,048 context) takes 2048, not kvsim's GPU-less 8192. A
    serve rule picks by the GPU's memory: given without a GPU it is refused by name, and a preset's is not
    shown in `config:`; any rule given with both limits picks nothing and is refused."""
    from kvsim.model.gpus import vllm_server_batch_defaults

    sized = {"model": "opt-13b", "kv_cache_bytes": 12 * 2**30}
    for cfg in (
        kvsim.SimConfig.preset("vllm-v0", **sized),
        kvsim.SimConfig.preset("vllm-v0", gpu="a100-40gb", **sized),
        kvsim.SimConfig(batch_rule="v0", **sized),
    ):
        assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (2048, 256)
    long = kvsim.SimConfig(batch_rule="v0", model="llama-3-8b", kv_cache_bytes=12 * 2**30)
    assert long.max_num_batched_tokens == 8192  # (its context of 8,192)
    assert kvsim.SimConfig(batch_rule="serve-0.9", **sized).max_num_batched_tokens == 8192
    assert vllm_server_batch_defaults(None, "v0", 4096) == (4096, 256)
    with pytest.raises(kvsim.errors.InvalidArgumentError, match="no GPU"):
        vllm_server_batch_defaults(None, "serve-0.9")
    base = ["run", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB", "--requests", "5"]
    assert main([*base, "--preset", "vllm-v0"]) == 0
    out = capsys.readouterr().out
    assert "max_num_batched_tokens=2048, batch_rule=v0" in out, out
    assert main([*base, "--preset", "vllm-v1"]) == 0
    out = capsys.readouterr().out
    assert "batch_rule" not in out, out
    assert "max_num_batched_tokens=8192" in out, out
    for rule in ("serve-0.9", "serve-0.28"):
        assert main([*base, "--batch-rule", rule]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err
        assert f"argument --batch-rule: '{rule}' does nothing here" in err, err
        assert "this run names no GPU" in err, err
        assert "give --gpu, --batch-rule v0, or drop the flag" in err, err
    assert main([*base, "--gpu", "a100-40gb", "--batch-rule", "serve-0.9"]) == 0
    capsys.readouterr()
    assert main([*base, "--batch-rule", "v0", "--max-num-seqs", "8", "--max-num-batched-tokens", "4096"]) == 2
    assert "both are given" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--model", "meta-llama/Meta-Llama-3-8B-Nope", "(did you mean llama-3-8b"),
        ("--model", "meta-llama/Meta-Llama-3-8B-Nope", "not in the Hugging Face cache (looked for "),
        ("--model", "Llama-3-8B-Nope", "did you mean llama-3-8b"),
        ("--model", "gpt-5", "or the path of a Hugging Face config.json"),
        ("--gpu", "H100", "(did you mean h100-80gb, h100-pcie?)"),
        ("--gpu", "h100", "(did you mean h100-80gb, h100-pcie?)"),
        ("--gpu", "a100", "(did you mean a100-40gb, a100-80gb?)"),
    ],
)
def test_a_vllm_users_model_and_gpu_names_get_a_suggestion(capsys, flag, value, needle):
    """vLLM takes hub names (`--model meta-llama/...`) and users say `h100`: the error points at the preset."""
    argv = ["run", "--requests", "5", "--model", "llama-3-8b", "--gpu", "h100-80gb", flag, value]
    line = _error(capsys, argv)
    assert line.startswith(f"kvsim run: error: argument {flag}:"), line
    assert needle in line, line


@pytest.mark.parametrize(
    ("flag", "text", "field", "value"),
    [
        ("--max-num-batched-tokens", "8K", "max_num_batched_tokens", 8192),
        ("--max-num-batched-tokens", "8k", "max_num_batched_tokens", 8000),
        ("--max-num-batched-tokens", "2.5k", "max_num_batched_tokens", 2500),
        ("--max-model-len", "2K", "max_model_len", 2048),
        ("--kv-cache-memory-bytes", "12G", "kv_cache_bytes", 12 * 2**30),
        ("--kv-cache-memory-bytes", "12g", "kv_cache_bytes", 12 * 10**9),
        ("--kv-cache-memory-bytes", "12GiB", "kv_cache_bytes", 12 * 2**30),
    ],
)
def test_vllms_human_readable_integers_read_as_vllm_reads_them(capsys, flag, text, field, value):
    """vLLM's --max-num-batched-tokens, --max-model-len and --kv-cache-memory-bytes take `8k` (decimal) and
    `8K` (binary); kvsim refused them, and 12G must not mean 12 * 10^9 where vLLM means 12 GiB."""
    argv = ["run", "--requests", "5", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB", flag, text]
    data = _json(capsys, argv)
    expected = kvsim.SimConfig(**{"model": "opt-13b", "kv_cache_bytes": 12 * 2**30, field: value})
    assert data["config"][field] == expected.describe()[field]
    assert data["config"]["num_blocks"] == expected.num_blocks


def test_a_binary_suffix_takes_a_whole_number(capsys):
    line = _error(capsys, [*SMALL, "--max-num-batched-tokens", "1.5K"])
    assert line.startswith("kvsim run: error: argument --max-num-batched-tokens: '1.5K'"), line


# -- the CPU tier's table ------------------------------------------------------------------------------------
TIER_RUN = [
    "run", "--num-gpu-blocks-override", "128", "--kv-offloading-chunks", "40", "--requests", "60",
    "--workload", "synthetic:system_prompt_len=256,num_system_prompts=4,arrival_rate=20",
]  # fmt: skip


@pytest.mark.parametrize("replicas", [1, 3])
def test_the_tier_table_says_how_many_chunks_its_occupancy_is_of(capsys, replicas):
    """One replica: its tier's chunks. A fleet: its tiers (the summary's `cpu_tier_chunks`, all of them),
    the mean over all, the peak the fullest tier's; the table said 'of 40 chunks' for three tiers of 40."""
    argv = [*TIER_RUN, "--replicas", str(replicas)]
    s = _json(capsys, argv)["summary"]
    assert s["cpu_tier_chunks"] == 40 * replicas
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "tier occupancy" in x)
    mean, peak = 100 * s["cpu_tier_occupancy"], 100 * s["cpu_tier_peak_occupancy"]
    held = "40 chunks" if replicas == 1 else "3 tiers × 40 chunks (peak: the fullest tier's)"
    assert line.split(None, 5)[-1] == f"{mean:.1f} % / {peak:.1f} % of {held}"


@pytest.mark.parametrize("size", ["0.001", "1B"])
def test_a_tier_smaller_than_a_chunk_is_refused(capsys, size):
    """It ran as no tier at all, its table and its checks gone (a 1 MiB tier with `--policy reserve` ran)."""
    err = _error(capsys, ["run", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "2GiB", "--requests", "20",
                          "--kv-offloading-size", size])  # fmt: skip
    assert "holds no CPU-tier chunk" in err
    assert "or 0 for no tier" in err


def test_repeated_output_flags_add_up_or_are_refused(capsys):
    """A second `--goodput` or `--percentile-metrics` replaced the first (an SLO attainment of 100 % where
    both SLOs gave 0 %); now they add up, and a name or percentile given twice is refused."""
    both = _json(capsys, [*SMALL, "--goodput", "ttft:0.5", "tpot:5"])["serving"]
    twice = _json(capsys, [*SMALL, "--goodput", "ttft:0.5", "--goodput", "tpot:5"])["serving"]
    assert twice == both
    split = _json(capsys, [*SMALL, "--percentile-metrics", "ttft", "--percentile-metrics", "e2el"])["serving"]
    assert {"p99_ttft_ms", "p99_e2el_ms"} <= set(split)
    assert "p99_tpot_ms" not in split
    for argv, says in (
        (["--goodput", "ttft:1", "--goodput", "ttft:5"], "given twice"),
        (["--percentile-metrics", "ttft", "--percentile-metrics", "ttft"], "repeat a name"),
        (["--metric-percentiles", "50,50"], "repeat a percentile"),
    ):
        assert says in _error(capsys, [*SMALL, *argv])


def test_a_percentile_is_labelled_exactly(capsys):
    """`:g` rounded 99.99999 to `p100`, so `99.99999,100` printed two `p100` columns and kept one."""
    serving = _json(capsys, [*SMALL, "--metric-percentiles", "99.99999,100"])["serving"]
    assert {"p99.99999_ttft_ms", "p100_ttft_ms"} <= set(serving)
