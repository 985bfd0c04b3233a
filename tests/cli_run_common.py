"""What the `kvsim run` command-line tests share (tests/test_cli_run*.py, test_cli_plan_refusals.py): a small run's flags and the two
ways a command is run: for its `--json` result, or as a bad command (exit status 2, one line on stderr)."""

from __future__ import annotations

import json

from kvsim.cli import main

SMALL = ["run", "--requests", "60", "--num-gpu-blocks-override", "200"]
LLAMA_ON_H100 = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "3"]
# `kvsim plan` and `kvsim sweep` in a few probes and points (tests/test_cli_plan_refusals.py, test_cli_idle_034.py)
PLAN = ["plan", "--slo", "ttft_p99:2s", "--max-probes", "2", "--workers", "1", "--requests", "5"]
SWEEP = ["sweep", "--requests", "5", "--no-progress", "--workers", "1", "--no-resume"]


def _json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys, argv):
    """Runs a bad command: exit status 2, one line on stderr, which is returned."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]
