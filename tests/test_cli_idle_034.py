"""vLLM 0.34.0's two sizing knobs, `--cudagraph-capture-grid` and `--sparse-mla-shard-q`, in `kvsim run`,
`kvsim plan` and `kvsim sweep` (`kvsim.cli.refusals.idle_knobs`): refused by the name given where no point
reads them (the flag as typed, `--no-sparse-mla-shard-q` too, or the run file; a sweep's `--base` field), and
not refused where the user did not give them (the defaults' values, or a preset's, are not the user's)."""

from __future__ import annotations

from kvsim.cli import main

LLAMA = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
NO_SHARDQ = "does nothing here: vLLM 0.34.0 keeps ShardQ's buffers only for DeepSeek-V3.2 and GLM-5"


def test_kvsim_run_names_an_idle_knob_where_the_user_gave_it(capsys, tmp_path):
    """`kvsim run` names the knob as `kvsim plan` does (`kvsim.cli.refusals.given_where`): by the flag typed,
    or by the run file that set it (it named the positive flag, which the user typed in neither case)."""
    run = ["run", *LLAMA, "--requests", "3"]
    assert main([*run, "--no-sparse-mla-shard-q"]) == 2
    assert capsys.readouterr().err.startswith(
        f"kvsim run: error: argument --no-sparse-mla-shard-q: the flag {NO_SHARDQ}"
    )
    path = tmp_path / "r.toml"
    path.write_text("[config]\nsparse_mla_shard_q = false\n")
    assert main([*run, "--toml", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim run: error: run file {path}: [config] sparse_mla_shard_q: "), err
