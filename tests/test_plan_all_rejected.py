"""adv46 #4: a plan whose every request is rejected at every probe (`--max-model-len 16`) says so and why,
with no advice that cannot work (loosen the SLOs, lower min_rate, another GPU) and no "judged on the rest"
of none; the goodput table keeps its interval column ("-") as the mean's does."""

from __future__ import annotations

import pytest

from kvsim.cli import main

BASE = ["plan", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workers", "1", "--requests", "20"]
BASE += ["--max-model-len", "16"]


@pytest.mark.parametrize(
    "slo",
    [
        ["--slo", "ttft_mean:1s"],
        ["--slo", "goodput_fraction:0.5", "--goodput", "ttft:500"],
        ["--slo", "ttft_mean:1s", "--smallest", "replicas", "--rate", "1"],
    ],
)
def test_every_request_rejected_says_so_and_how_to_admit_them(capsys, slo):
    assert main([*BASE, *slo]) == 0
    out = capsys.readouterr().out
    table, _, message = out.rpartition("\n\n")
    assert "every one of the 20 requests was rejected at every probe" in message
    assert "prompt_len reaches max_model_len" in message
    assert "--max-model-len" in message
    for wrong in ("judged on the rest", "loosen", "lower min_rate", "another GPU"):
        assert wrong not in message
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("round"))
    assert "95% CI" in lines[at]  # (the goodput table's column too, "-" in every row)
    rows = [r for r in lines[at + 2 :] if r.strip()]  # (below the header and its rule)
    assert rows
    assert all(" - " in r for r in rows)


def test_a_plan_with_some_requests_served_keeps_its_advice(capsys):
    assert main([*BASE[:-2], "--slo", "ttft_mean:1ms", "--max-probes", "3"]) == 0
    out = capsys.readouterr().out
    assert "no request served" not in out
