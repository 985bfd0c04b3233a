"""What `kvsim plan` says its numbers are: the fleet a `--smallest replicas` search sizes, which rate its
rates are (a generator's nominal `arrival_rate` or the arrivals' mean) and how `kvsim run` reproduces one,
and the rate of the requests it judges beside the rate of all arrivals."""

from __future__ import annotations

import json
import re

import pytest

from kvsim.analysis.plan import at_rate, rate_basis, workload_rate
from kvsim.cli import main
from kvsim.workloads.registry import make_workload
from kvsim.workloads.table import arrival_rate

ARGV = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt"]


def test_smallest_replicas_names_the_fleet_it_sized(capsys):
    """With a prefill pool every probe keeps, the answer counts decode replicas: the header names the
    pool, the router and a replica's GPUs, the answer the prefill replicas and the GPUs in all."""
    argv = [*ARGV, "--requests", "200", "--smallest", "replicas", "--rate", "20", "--prefill-replicas", "1"]
    assert main([*argv, "--slo", "tpot_p99:5.6ms", "--router", "least-loaded"]) == 0
    out = capsys.readouterr().out
    fleet = next(line for line in out.splitlines() if line.startswith("fleet:"))
    assert "1 prefill replica" in fleet
    assert "least-loaded" in fleet
    assert "1 GPU a replica" in fleet
    m = re.search(
        r"smallest replicas meeting tpot_p99 <= \S+ s: (\d+) decode replicas? \(\+ 1 prefill; (\d+) GPUs?\)",
        out,
    )
    assert m is not None, out
    assert int(m.group(2)) == int(m.group(1)) + 1


def test_a_rate_rescaled_to_a_mean_is_that_mean():
    """`--request-rate R` rescales a generator's sample to a mean of R: its rate is then R (plan printed
    55.63 req/s, the nominal rate such a scale implies, for 60), and a plan probe at r has a mean of r."""
    w = make_workload("sharegpt", {"request_rate": 60.0}, 300, 0)
    assert rate_basis(w) == "mean"
    assert workload_rate(w) == pytest.approx(60.0)
    probe = at_rate(w, 24.0)
    assert rate_basis(probe) == "mean"
    mean = arrival_rate(len(probe), float(probe.arrival[-1] - probe.arrival[0]))
    assert mean == pytest.approx(24.0)
    assert workload_rate(probe) == pytest.approx(24.0)
    assert probe.meta["request_rate"] == pytest.approx(24.0)
    # A generator's own sample: its nominal rate, which its mean is not.
    g = make_workload("sharegpt", {"arrival_rate": 60.0}, 300, 0)
    assert rate_basis(g) == "arrival_rate"
    assert workload_rate(g) == 60.0
    assert arrival_rate(len(g), float(g.arrival[-1] - g.arrival[0])) != pytest.approx(60.0, rel=1e-3)


def test_plan_says_which_rate_and_how_to_reproduce_it(capsys):
    argv = [*ARGV, "--requests", "300", "--smallest", "replicas", "--slo", "tpot_p99:5.6ms"]
    assert main([*argv, "--request-rate", "60"]) == 0
    out = capsys.readouterr().out
    assert "every probe at 60 req/s" in out
    assert "reproduce a rate R with kvsim run --request-rate R" in out
    assert main([*argv, "--rate", "60", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rate_basis"]["basis"] == "arrival_rate"
    assert "--workload sharegpt:arrival_rate=R" in data["rate_basis"]["line"]


def test_the_rate_of_a_search_that_set_requests_aside_says_whose_it_is(capsys):
    """The answer's rate counts every arrival, those set aside too: the message says so and gives the
    judged requests' rate beside it, `--json` as `servable_rate`."""
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "mooncake-conversation"]
    argv += ["--requests", "300", "--max-model-len", "16384", "--slo", "ttft_p99:5s", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    aside = sum(data["unservable"].values())
    assert aside > 0
    total = 300
    assert data["servable_rate"] == pytest.approx(data["value"] * (total - aside) / total)
    assert (
        f"counts all {total:,} arrivals, those set aside too; the {total - aside:,} judged arrive at"
        in (data["message"])
    )
    assert f"{data['servable_rate']:.4g} req/s)" in data["message"]


def test_split_help_says_what_its_per_gpu_column_is(capsys):
    """`--split`'s help said "goodput per GPU"; its column is the target rate over a fleet's GPUs."""
    assert main(["plan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    split = text[text.index("--split instead") :][:400]
    assert "goodput" not in split
    assert "--rate over their GPUs" in split
