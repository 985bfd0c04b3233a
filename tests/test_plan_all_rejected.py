"""adv46 #4: a plan whose every request is rejected at every probe (`--max-model-len 16`) says so and why,
with no advice that cannot work (loosen the SLOs, lower min_rate, another GPU) and no "judged on the rest"
of none; the goodput table keeps its interval column ("-") as the mean's does. Its status says so too,
`all-rejected`, where it said `below-floor` (a rate search) or `above-cap` (replicas, memory): the search
learned nothing of its axis, so no rate lies below a floor and no fleet above a cap; in --json, the
--compare table and each --split search alike, and only there."""

from __future__ import annotations

import json

import pytest

from kvsim.analysis.plan_search import STATUSES
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
    assert message.startswith("all-rejected: no request served at any ")
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
    assert "all-rejected" not in out
    assert out.rpartition("\n\n")[2].startswith("probe-limit: ")


def test_the_status_is_all_rejected_in_json_compare_and_split(capsys):
    """--json's `status`, each --compare candidate's and each --split search's: `all-rejected`, one of
    `STATUSES`; the split's lines say no fleet served a request, and that none is left to judge on."""
    assert "all-rejected" in STATUSES
    assert main([*BASE, "--slo", "ttft_mean:1s", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "all-rejected"
    assert data["value"] is None
    assert main([*BASE, "--slo", "ttft_mean:1s", "--compare", "max_num_seqs=8,16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [x.split() for x in lines if x.startswith("max_num_seqs=") and "  " in x]
    assert [r[:3] for r in rows] == [
        ["max_num_seqs=8", "-", "all-rejected"],
        ["max_num_seqs=16", "-", "all-rejected"],
    ]
    argv = [*BASE, "--slo", "ttft_mean:1s", "--split", "--rate", "1", "--max-gpus", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    searches = [x.split() for x in out.splitlines() if x.startswith(("aggregated ", "P="))]
    assert searches
    assert all("all-rejected" in r for r in searches)
    assert "aggregated: no fleet of at most 4 GPUs served a request at 1 req/s (all-rejected" in out
    assert "disaggregated: no split of at most 4 GPUs served a request at 1 req/s (all-rejected" in out
    assert "20 of 20 requests set aside" in out
    assert "judged on the rest" not in out
    assert "no request is left to judge the SLOs on" in out
