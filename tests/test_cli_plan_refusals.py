"""`kvsim plan`'s and `kvsim sweep`'s refusals (split from tests/test_cli_run_refusals.py): a flag that does
nothing at any point refused by name, a sweep file's idle base field named by its table, the flags taken
where some point reads them, and which sizing flag won when several are given."""

from __future__ import annotations

import json

import polars as pl
import pytest

import kvsim
from kvsim.cli import main
from tests.cli_run_common import LLAMA_ON_H100, PLAN, SWEEP


@pytest.mark.parametrize(
    ("flags", "base", "said"),
    [
        (
            ["--placement", "buddy"],
            ["placement=buddy"],
            "placement: 'buddy' does nothing here: placement is how",
        ),
        (
            ["--gdn-prefill-backend", "flashinfer"],
            ["gdn_prefill_backend=flashinfer"],
            "gdn-prefill-backend: 'flashinfer' does nothing here",
        ),
        (["--language-model-only"], ["language_model_only=true"], "language-model-only: "),
        (
            ["--hybrid-kv-cache-manager", "off"],
            ["hybrid_kv_cache_manager=off"],
            "hybrid-kv-cache-manager: 'off'",
        ),
        (
            ["--router", "prefix-affinity"],
            ["router=prefix-affinity"],
            "router: 'prefix-affinity' does nothing",
        ),
        (
            ["--replicas", "2", "--router-seed", "3"],
            ["replicas=2", "router_seed=3"],
            "router-seed: read only by the random router",
        ),
    ],
)
def test_plan_and_sweep_refuse_a_flag_that_does_nothing_at_any_point(capsys, tmp_path, flags, base, said):
    """`kvsim plan` and `kvsim sweep` accepted the flags `kvsim run` refuses (exit 0, the search or the
    grid run with the knob unread): the same rule (`kvsim.cli.refusals.refuse_idle_at_every_point`) refuses
    them there, by the flag or the base field given, before any probe or point runs."""
    model = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    assert main([*PLAN, *model, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim plan: error: argument --{said}"), err
    assert err.rstrip().endswith(" or drop the flag") or err.rstrip().endswith("; drop the flag"), err
    out = tmp_path / "sweep.parquet"
    sweep_base = [a for b in ("model=llama-3.1-8b", "gpu=h100-80gb", *base) for a in ("--base", b)]
    assert main([*SWEEP, *sweep_base, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    field = base[-1].split("=")[0]
    assert err.startswith(f"kvsim sweep: error: argument --base {field}: "), err
    assert err.rstrip().endswith("drop it"), err
    assert not out.exists()  # (refused before any point ran)


def test_a_sweep_file_s_idle_base_field_is_named_by_its_table(capsys, tmp_path):
    """A sweep file's `[base]` field is named by the file and its table, as its other errors are."""
    path = tmp_path / "s.toml"
    path.write_text('[base]\nnum_blocks = 500\nplacement = "buddy"\n')
    assert main([*SWEEP, "--file", str(path), "--output", str(tmp_path / "s.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim sweep: error: sweep file {path}: [base] placement: 'buddy' does nothing"), (
        err
    )


def test_plan_and_sweep_take_those_flags_where_some_point_reads_them(capsys, tmp_path):
    """Refused only where no point reads the knob: a search over replica counts (`--smallest replicas`,
    `--split`) reads `--router`, a `--compare` of policies with a contiguous one reads `--placement`, a
    compare of models with a multimodal one `--language-model-only`; a sweep's grid likewise. A knob the
    search or grid varies is what it measures, not refused (the candidates tie, the rows repeat)."""
    blocks = ["--num-gpu-blocks-override", "500"]
    accepted = (
        [*blocks, "--smallest", "replicas", "--router", "least-loaded"],
        [*blocks, "--split", "--max-gpus", "3", "--router", "least-loaded", "--pd-link-ps-per-block", "1000"],
        [*blocks, "--max-model-len", "4096", "--compare", "policy=vllm,static", "--placement", "buddy"],
        [*LLAMA_ON_H100[1:5], "--compare", "model=llama-3.1-8b,gemma-3-12b", "--language-model-only"],
        [*blocks, "--compare", "placement=first-fit,buddy"],
    )
    for flags in accepted:
        assert main([*PLAN, *flags, "--json"]) == 0, flags
        out = json.loads(capsys.readouterr().out)
        knob = next(f for f in reversed(flags) if f.startswith("--")).lstrip("-").replace("-", "_")
        if knob in out["config"]:
            assert out["config"][knob] != kvsim.SimConfig(num_blocks=500).describe()[knob], flags
    for i, grid in enumerate(
        (
            ["--base", "max_model_len=4096", "--base", "placement=buddy", "--grid", "policy=vllm,static"],
            ["--base", "router=least-loaded", "--grid", "replicas=1,2"],
            ["--grid", "placement=first-fit,buddy"],
        )
    ):
        out = tmp_path / f"{i}.parquet"
        assert main([*SWEEP, "--base", "num_blocks=500", *grid, "--output", str(out)]) == 0, grid
        assert pl.read_parquet(out).height == 2
    capsys.readouterr()


def test_plan_names_the_sizing_flag_that_won_unless_the_search_varies_it(capsys):
    """`kvsim run`'s note on a sizing flag another overrides (`_overridden_sizing`) in `kvsim plan`: the
    search ran on the override's pool without a word; a search over the KV memory sizes each probe's pool
    itself, so there the note would be wrong."""
    argv = [*PLAN, "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--num-gpu-blocks-override", "2000"]
    argv += ["--kv-cache-memory-bytes", "12GiB", "--max-model-len", "65536"]  # (12 GiB holds one request)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "note: --num-gpu-blocks-override 2,000 sizes the pool, not --kv-cache-memory-bytes 12.0 GiB (whose"
        in out
    )
    # (a search of kv_cache_bytes drops the override in every probe: refused by name, one line)
    assert main([*argv, "--smallest", "kv_cache_bytes"]) == 2
    assert "argument --num-gpu-blocks-override: --smallest kv_cache_bytes sizes" in capsys.readouterr().err
    alone = [a for a in argv if a not in ("--num-gpu-blocks-override", "2000")]
    assert main([*alone, "--smallest", "kv_cache_bytes"]) == 0
    assert "sizes the pool, not" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "used", "unused", "said"),
    [
        (
            # (12 GiB holds 98,304 tokens: one request of the model's 131,072 does not fit, which vLLM
            # refuses before the override replaces the blocks)
            [
                "--num-gpu-blocks-override",
                "2000",
                "--kv-cache-memory-bytes",
                "12GiB",
                "--max-model-len",
                "65536",
            ],
            "num_blocks=2000",
            "kv_cache_bytes",
            "--num-gpu-blocks-override 2,000 sizes the pool, not --kv-cache-memory-bytes 12.0 GiB (whose KV "
            'memory holds 1,536 blocks): vLLM lets the override win (its get_kv_cache_configs logs "Overriding '
            'num_gpu_blocks=1536 with num_gpu_blocks_override=2000")',  # (12 GiB // (64 × 128 KiB))
        ),
        (
            ["--num-gpu-blocks-override", "2000", "--gpu-memory-utilization", "0.5"],
            "num_blocks=2000",
            "gpu_memory_utilization",
            "--num-gpu-blocks-override 2,000 sizes the pool, not --gpu-memory-utilization 0.5 (whose KV memory "
            "holds 2,777 blocks)",
        ),
        (
            [
                "--kv-cache-memory-bytes",
                "12GiB",
                "--gpu-memory-utilization",
                "0.5",
                "--max-model-len",
                "65536",
            ],
            "kv_cache_bytes=12 GiB",
            "gpu_memory_utilization",
            "--kv-cache-memory-bytes 12.0 GiB is the KV memory, not what --gpu-memory-utilization 0.5 leaves",
        ),
    ],
)
def test_a_sizing_flag_another_overrides_is_named_not_listed(capsys, flags, used, unused, said):
    """vLLM lets num_gpu_blocks_override win over the blocks the KV memory holds, and kv_cache_memory_bytes
    over gpu_memory_utilization: `config:` listed both (`num_blocks=2000, ..., kv_cache_bytes=12 GiB`)
    under a pool line of the override's. The run says which one sized the pool and lists only it."""
    assert main([*LLAMA_ON_H100, *flags]) == 0
    out = capsys.readouterr().out
    config = next(line for line in out.splitlines() if line.startswith("config: "))
    assert used in config, config
    assert f"{unused}=" not in config, config
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert any(line.startswith(f"note: {said}") for line in notes), notes
    sized = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", gpu_memory_utilization=0.5)
    assert sized.num_blocks == 2777  # (the count the note names is the pool that flag alone sizes)
    # (0.5 binds before the measured headroom, so the bytes are 0.33.0's profiled ones at 0.5, 11,111 blocks
    # of 16 = 2 MiB: in blocks of 64, 11,111 // 4 = 2,777)
    assert sized.replace(kv_cache_sizing="profiled", block_size=16).num_blocks // 4 == 2777


def test_a_kv_memory_beside_blocks_without_a_model_is_named_not_listed(capsys):
    """No model: the KV memory cuts into no block at all, and the blocks given are the pool."""
    argv = ["run", "--num-gpu-blocks-override", "500", "--kv-cache-memory-bytes", "12GiB", "--requests", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "kv_cache_bytes=" not in next(line for line in out.splitlines() if line.startswith("config: "))
    assert "note: --num-gpu-blocks-override 500 sizes the pool, not --kv-cache-memory-bytes 12.0 GiB: " in out


def test_plan_reads_pool_null_block_in_every_memory_search(capsys):
    """A search of the pool's memory runs probes that set that knob, and --pool-null-block counts every
    probe's blocks: a kv_cache_bytes search's cut from memory, a num_blocks search's given (vLLM v0's
    count: N usable, kvsim's null block beside; it was refused there as doing nothing)."""
    slo = ["--slo", "ttft_p99:2s", "--requests", "60", "--max-probes", "2", "--workers", "1"]
    assert main(["plan", "--preset", "vllm-v0", "--num-gpu-blocks-override", "500", *slo]) == 0
    capsys.readouterr()
    model = ["plan", "--model", "llama-3-8b", *slo, "--json"]
    for rule, pool in (("within", "pool: 2,048 blocks"), ("extra", "pool: 2,049 blocks")):
        argv = [
            *model,
            "--pool-null-block",
            rule,
            "--num-gpu-blocks-override",
            "2048",
            "--smallest",
            "num_blocks",
        ]
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["pool"].startswith(pool), rule
        # (the search starts at the num_blocks given: vLLM's 2,048 under either rule; a --kv-cache-memory-bytes
        # to start from is refused beside a num_blocks search, which drops it)
        assert data["probes"][0]["num_blocks"] == 2048, rule
    assert (
        main(
            [
                *model,
                "--pool-null-block",
                "extra",
                "--kv-cache-memory-bytes",
                "6GiB",
                "--smallest",
                "kv_cache_bytes",
            ]
        )
        == 0
    )


def test_sweep_refuses_a_swap_space_and_a_models_knob_no_point_reads(capsys):
    """kvsim sweep took `--base cpu_blocks=40` under recompute and `--base tensor_parallel_size=2` with no
    model silently (kvsim run and plan refuse both); now by the same rule, over its points: a grid of
    preemption modes with one that swaps reads the swap space, a grid of models reads -tp."""
    small = ["--requests", "5", "--no-progress"]
    for base, said in (
        (["--base", "cpu_blocks=40"], "argument --base cpu_blocks: a CPU pool of 40 blocks would do nothing"),
        (["--base", "tensor_parallel_size=2"], "argument --base tensor_parallel_size: a model's knob"),
    ):
        assert main(["sweep", "--base", "num_blocks=300", *base, "--grid", "block_size=16,32", *small]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kvsim sweep: error: {said}"), err
    grid = ["--grid", "preemption=recompute,swap"]
    assert main(["sweep", "--base", "num_blocks=300", "--base", "cpu_blocks=40", *grid, *small]) == 0
    grid = ["--grid", "model=llama-3-8b"]
    assert main(["sweep", "--base", "num_blocks=300", "--base", "tensor_parallel_size=2", *grid, *small]) == 0


@pytest.mark.parametrize("knob", ["num_blocks", "kv_cache_bytes", "gpu_memory_utilization"])
def test_plan_refuses_a_memory_search_under_max_model_len_auto(capsys, knob):
    """`--max-model-len auto` refits the length to each probe's pool, so which prompts reach it changes
    with the memory searched: a --smallest memory search took the base config's rejections as the same at
    every probe and called passing probes all-rejected. It is refused by name, one line; a number runs."""
    model = ["--model", "llama-3.1-8b", "--gpu", "l4", "--smallest", knob]
    assert main([*PLAN, *model, "--max-model-len", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        f"kvsim plan: error: knob {knob}: max_model_len auto fits the length to the pool"
    ), err
    assert main([*PLAN, *model, "--max-model-len", "8192"]) == 0
