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


MOONCAKE = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "200", "--max-model-len", "16384"]


def _plan_then_run(
    capsys, plan_flags: list[str], recipe: str, kept: list[str]
) -> tuple[dict, int, dict | None]:
    """`kvsim plan --json` with `plan_flags`, then `kvsim run` with the plan's flags `kept` and those its
    `rate_basis` line says (`recipe`: a regex whose group 1 is the flags, R standing for the rate) at the
    answer's rate: the plan, run's exit status and its summary."""
    assert main(["plan", *MOONCAKE, *plan_flags, "--slo", "ttft_p99:5s", "--workers", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    m = re.search(recipe, data["rate_basis"]["line"])
    assert m is not None, data["rate_basis"]["line"]
    flags = [repr(data["value"]) if f == "R" else f for f in m.group(1).split()]
    rc = main(["run", *MOONCAKE, *kept, *flags, "--json"])
    captured = capsys.readouterr()
    return data, rc, json.loads(captured.out)["summary"] if rc == 0 else None


def test_the_recipe_for_a_trace_given_a_time_scale_runs_the_answer(capsys):
    """User audit 54 finding 15: on a trace given as `mooncake-conversation:time_scale=4` the line said
    "reproduce a rate R with kvsim run --request-rate R", which kvsim run refused with that workload ("give
    time_scale or request_rate, not both"): it now names the workload without its time_scale, and that
    command, run at the answer's rate, measures what the answer's probe did; a `--time-scale` flag alike."""
    recipe = r"reproduce a rate R with kvsim run ((?:--workload \S+ )?--request-rate R)"
    for plan_flags, kept, dropped in (
        (["--workload", "mooncake-conversation:time_scale=4"], [], "the workload's time_scale=4 dropped"),
        (
            ["--workload", "mooncake-conversation", "--time-scale", "4"],
            ["--workload", "mooncake-conversation"],
            "without --time-scale",
        ),
    ):
        data, rc, summary = _plan_then_run(capsys, plan_flags, recipe, kept)
        assert dropped in data["rate_basis"]["line"]
        assert data["status"] == "converged"
        assert rc == 0
        (probe,) = [p for p in data["probes"] if p["rate"] == data["value"]]
        assert summary["ttft_s_p99"] == pytest.approx(probe["ttft_p99"], rel=1e-9)
    # (the line as it was, the workload as given beside --request-rate R, is refused)
    argv = ["run", *MOONCAKE, "--workload", "mooncake-conversation:time_scale=4", "--request-rate", "7"]
    assert main(argv) == 2
    assert "give time_scale or request_rate, not both" in capsys.readouterr().err


def test_the_recipe_for_a_generator_given_a_time_scale_drops_it(capsys):
    """A generator given a `time_scale` has a nominal rate over it, and `arrival_rate=R` beside that scale
    runs R / scale: the line says to drop it, and the generator at `arrival_rate=R`, its other parameters
    as given, measures what the answer's probe did (with the scale kept: another run)."""
    argv = ["plan", *MOONCAKE[:6], "--workload", "sharegpt:time_scale=2,arrivals=gamma,burstiness=0.5"]
    assert main([*argv, "--slo", "ttft_p99:100ms", "--workers", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "converged"
    line = data["rate_basis"]["line"]
    assert (
        "--workload sharegpt:arrival_rate=R (its other parameters as given; the workload's time_scale=2"
        in line
    )
    (probe,) = [p for p in data["probes"] if p["rate"] == data["value"]]
    given = f"sharegpt:arrivals=gamma,burstiness=0.5,arrival_rate={data['value']!r}"
    for spec, same in ((given, True), (f"{given},time_scale=2", False)):
        assert main(["run", *MOONCAKE[:6], "--workload", spec, "--json"]) == 0
        ttft = json.loads(capsys.readouterr().out)["summary"]["ttft_s_p99"]
        assert (ttft == pytest.approx(probe["ttft_p99"], rel=1e-9)) is same, spec
