"""`kvsim sweep` says what `kvsim run` says when one sizing field overrides another (vLLM lets
`num_gpu_blocks_override` win over the KV memory, `kv_cache_memory_bytes` over `gpu_memory_utilization`):
once for the sweep, not once a point, where it applies (with how many configurations where not all), its
fields named as given (`--base`, `--grid`, the sweep file's tables); a sweep without an override says
nothing of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.cli import main

SMALL = ["--requests", "5", "--seeds", "3", "--no-progress", "--no-resume"]


def _notes(capsys: pytest.CaptureFixture[str], argv: list[str], out: Path) -> list[str]:
    assert main(["sweep", *argv, *SMALL, "--output", str(out)]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]


def test_the_sweep_says_kvsim_runs_override_note_once(capsys, tmp_path):
    """The base overrides at every point: kvsim run's own note (its numbers too), printed once for the
    sweep's 2 configurations x 3 seeds."""
    base = ["--base", "model=llama-3-8b", "--base", "num_blocks=3000", "--base", "kv_cache_bytes=12GiB"]
    notes = _notes(capsys, [*base, "--grid", "max_num_seqs=8,16"], tmp_path / "a.parquet")
    assert notes == [
        "note: --base num_blocks 3,000 sizes the pool, not --base kv_cache_bytes 12.0 GiB (whose KV memory "
        'holds 6,144 blocks): vLLM lets the override win (its get_kv_cache_configs logs "Overriding '
        'num_gpu_blocks=6144 with num_gpu_blocks_override=3000"), so --base kv_cache_bytes sizes nothing here'
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
