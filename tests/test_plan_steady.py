"""Whether `kvsim plan`'s answer is a steady state (DESIGN.md §Capacity search, "Steady state"): a run
too short to reach one (its arrivals lasting less than `STEADY_SPANS` times its requests' e2e p99) is
flagged, which the rule of a queue growing through the run alone missed: 3,000 ShareGPT-like requests on
Llama-3.1-70B at tp 4 answered 41.7 req/s where 30,000 answer 35.5; a long run is not flagged; a
`probe-limit` search that never found one end of its bracket says so instead of "- fails"."""

from __future__ import annotations

import functools
import json
import math

import polars as pl

import kvsim
from kvsim.analysis.plan import at_rate, workload_rate
from kvsim.analysis.plan_compare import Candidate, best_of
from kvsim.analysis.plan_search import SLO, PlanResult
from kvsim.analysis.steady_state import (
    STEADY_SPANS,
    fmt_spans,
    queue_growth,
    steady_requests,
    sweep_too_short_note,
    too_short,
    too_short_note,
)
from kvsim.cli import main
from kvsim.workloads.registry import make_workload, parse_workload

MODEL = ["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "-tp", "4", "--workload", "sharegpt"]
SLOS = ["--slo", "ttft_p99:2s", "--slo", "tpot_p99:100ms", "--workers", "2"]


def _cfg() -> kvsim.SimConfig:
    return kvsim.SimConfig(model="llama-3.1-70b", gpu="h100-80gb", tensor_parallel_size=4)


def _sharegpt(n: int) -> kvsim.Workload:
    return make_workload(*parse_workload("sharegpt"), n, 0)


def _plan(capsys, n: int) -> dict:
    assert main(["plan", *MODEL, "--requests", str(n), *SLOS, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _answer_row(out: dict) -> dict:
    (row,) = [p for p in out["probes"] if p["rate"] == out["value"]]
    return row


def test_a_short_runs_answer_says_it_is_not_a_steady_state(capsys):
    """The review's case: 3,000 requests answer 41.7 req/s, 15 % above what 30,000 answer (35.5), and the
    answer's run was not overloaded by the queue-growth rule (its queue grew only in its last seconds);
    its arrivals lasted 1.3 times its requests' e2e p99, so it is flagged too short, with the numbers and
    the request count a steady state needs. 30,000 requests' answer is steady: no flag, no caveat."""
    short = _plan(capsys, 3000)
    long = _plan(capsys, 30000)
    assert short["status"] == long["status"] == "converged"
    assert short["value"] > 1.1 * long["value"]  # (the short run overstates the rate)
    row = _answer_row(short)
    assert row["passed"]
    assert row["steady"] is False
    assert row["overloaded"] is False
    assert row["arrival_span_s"] < 2 * row["e2e_s_p99"]
    # The old rule alone (a queue growing through the run) says nothing of this run.
    assert queue_growth(kvsim.simulate(at_rate(_sharegpt(3000), short["value"]), _cfg())) is None
    assert short["steady"] is False
    assert short["burst"] is False
    message = short["message"]
    assert f"NOT A STEADY STATE: the run at {short['value']:.4g} req/s was too short to reach one" in message
    need = math.ceil(STEADY_SPANS * row["e2e_s_p99"] * short["value"])
    assert 10_000 < need < 13_000
    assert f"about {need:,} requests at this rate, or more" in message
    assert "--requests" in message
    row = _answer_row(long)
    assert row["steady"] is True
    assert row["arrival_span_s"] >= STEADY_SPANS * row["e2e_s_p99"]
    assert long["steady"] is True
    assert "STEADY" not in long["message"]
    # The text: a steady column naming why each probe that was not, the caveat on the answer's line.
    assert main(["plan", *MODEL, "--requests", "3000", *SLOS]) == 0
    text = capsys.readouterr().out.splitlines()
    (header,) = [line for line in text if line.startswith("round")]
    assert header.split()[-1] == "steady"
    (answer,) = [line for line in text if line.split()[1:2] == [f"{short['value']:.4g}"]]
    assert answer.split()[-1] == "NO:too-short"
    (last,) = [line for line in text if line.startswith("converged: ")]
    assert "NOT A STEADY STATE" in last


def test_too_short_is_the_runs_length_against_its_latency():
    """The same 3,000 requests: at 4 req/s they arrive over 12 minutes, many times their e2e p99, a steady
    state; at 35 req/s (below the long runs' knee) over 85 s, under twice their e2e p99: too short, though
    nothing queued (its engine held 478 requests over its last quarter of arrivals where 100,000
    requests hold about 700, TPOT p99 43 ms against 85)."""
    w = _sharegpt(3000)
    assert too_short(kvsim.simulate(at_rate(w, 4.0), _cfg())) is None
    r = kvsim.simulate(at_rate(w, 35.0), _cfg())
    got = too_short(r)
    assert got is not None
    span, e2e, rate = got
    assert span < STEADY_SPANS * e2e
    assert abs(rate - workload_rate(at_rate(w, 35.0))) < 0.05 * 35
    assert queue_growth(r) is None
    assert r.summary["queueing_s_p99"] < 0.1


# ------------------------------------------------------------------------------------- stand-in probes


def _workload(n: int = 60, rate: float = 2.0) -> kvsim.Workload:
    return kvsim.workloads.synthetic(
        n, arrival_rate=rate, seed=0, lengths="sharegpt-paper", max_model_len=2048
    )


def _knee_probe(workload, config, *, knee: float, steady: bool | None = True) -> dict:
    """`ttft_s_p99` = rate / knee (`ttft_p99 <= 1 s` holds up to `knee`); every run `steady` or none."""
    rate = workload_rate(workload)
    out = {"ttft_s_p99": rate / knee, "completed": len(workload), "rejected": 0}
    if steady is not None:
        out.update(overloaded=False, steady=steady, arrival_span_s=100.0, e2e_s_p99=40.0)
    return out


def test_a_caller_probe_that_says_nothing_is_not_flagged():
    """A probe that reports neither `overloaded` nor `steady` leaves `steady` unknown: no caveat, no
    column; one that says `steady` False gets the caveat, with its numbers."""
    slos = {"ttft_p99": 1.0}
    plain = kvsim.plan(_workload(), kvsim.SimConfig(num_blocks=64), slos, workers=2,
                       probe=functools.partial(_knee_probe, knee=5.0, steady=None))  # fmt: skip
    assert plain.steady is None
    assert not plain.burst
    assert "STEADY" not in plain.message
    assert "steady" not in plain.table()
    short = kvsim.plan(_workload(), kvsim.SimConfig(num_blocks=64), slos, workers=2,
                       probe=functools.partial(_knee_probe, knee=5.0, steady=False))  # fmt: skip
    assert short.steady is False
    assert not short.burst
    assert short.value == plain.value
    assert short.message.startswith(plain.message)
    assert "arrived over 100 s, 2.5 times their e2e p99 of 40 s" in short.message
    assert short.to_dict()["steady"] is False


def test_a_best_from_a_run_too_short_says_so():
    """A best whose answer is not a steady state because its run was too short still ranks (its rate is
    overstated, but a rate, where a burst's is not: `bursts` decide nothing); the best line says so, and
    the ranking table's `steady` column names why."""
    candidates = [
        Candidate("a", {}, functools.partial(_knee_probe, knee=5.0)),
        Candidate("b", {}, functools.partial(_knee_probe, knee=6.0, steady=False)),
    ]
    out = best_of(_workload(), kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, candidates, workers=2)
    assert out.best == out.decided == "b"
    assert out.unsteady == ["b"]
    assert out.bursts == []
    from kvsim.cli.plan import _best_line, _ranking_table

    line = _best_line(out, 60)
    assert line.startswith("best: b; the answer of b comes from runs too short to reach a steady state")
    assert "--requests" in line
    table = _ranking_table(out.table).splitlines()
    assert table[0].split()[-1] == "steady"
    assert [r.split()[-1] for r in table[2:]] == ["NO:too-short", "yes"]


# ---------------------------------------------------------------------------------------- probe-limit


def test_a_probe_limit_without_one_end_says_so():
    """`probe-limit` with every probe passing (or failing) names no "-" end: it says what every probe did
    and how far the probes went; with both ends, the bracket as before."""
    slos = {"ttft_p99": 1.0}
    cfg = kvsim.SimConfig(num_blocks=64)
    up = kvsim.plan(_workload(), cfg, slos, workers=2, max_probes=4,
                    probe=functools.partial(_knee_probe, knee=1000.0))  # fmt: skip
    assert up.status == "probe-limit"
    assert up.bracket[1] is None
    assert "- " not in up.message
    top = up.probes["rate"].max()
    assert f"every rate probed passes, up to {top:.4g} req/s: no failing rate bounds the answer yet" in (
        up.message
    )
    down = kvsim.plan(_workload(), cfg, slos, workers=2, max_probes=4,
                      probe=functools.partial(_knee_probe, knee=0.001))  # fmt: skip
    assert down.status == "probe-limit"
    assert down.value is None
    assert "- " not in down.message
    low = down.probes["rate"].min()
    assert f"every rate probed fails, down to {low:.4g} req/s: no passing rate bounds the answer yet" in (
        down.message
    )
    both = kvsim.plan(_workload(), cfg, slos, workers=2, max_probes=6,
                      probe=functools.partial(_knee_probe, knee=5.0))  # fmt: skip
    assert both.status == "probe-limit"
    lo, hi = both.bracket
    assert f"{lo:.4g} req/s passes, {hi:.4g} req/s fails (max_probes" in both.message
    # The inverse axes (a failing end below, a passing end above).
    slo = SLO("ttft_p99", 1.0)
    frame = pl.DataFrame({"round": [0, 0], "replicas": [2, 4], "passed": [True, True]})
    res = PlanResult("replicas", 2, (None, 2), 0.0, "probe-limit", (slo,), frame)
    assert (
        "every replica count probed passes, down to 2: no failing replica count bounds the answer yet"
        in res.message
    )
    frame = pl.DataFrame({"round": [0, 0], "replicas": [2, 4], "passed": [False, False]})
    res = PlanResult("replicas", None, (4, None), 0.0, "probe-limit", (slo,), frame)
    assert (
        "every replica count probed fails, up to 4: no passing replica count bounds the answer yet"
        in res.message
    )


def test_an_inverse_searchs_answer_too_short_says_its_rate():
    """A replica search's answer whose run was too short names the rate its requests arrived at, once,
    and the requests a steady state needs at that rate."""
    slo = SLO("ttft_p99", 1.0)
    frame = pl.DataFrame(
        {"round": [0], "replicas": [2], "passed": [True], "ttft_p99": [0.5], "rate": [200.0],
         "completed": [300], "rejected": [0], "overloaded": [False], "steady": [False],
         "arrival_span_s": [1.5], "e2e_s_p99": [7.5]}
    )  # fmt: skip
    res = PlanResult("replicas", 2, (1, 2), 0.0, "converged", (slo,), frame)
    assert res.steady is False
    assert (
        "NOT A STEADY STATE: the run at replicas 2 was too short to reach one (its 300 requests at 200 req/s "
        "arrived over 1.5 s, 0.2 times their e2e p99 of 7.5 s; a steady state needs arrivals over 5 times "
        "it: about 7,500 requests at this rate, or more)"
    ) in res.message


def test_a_run_just_short_of_the_rule_prints_below_it_and_asks_for_more_than_it_ran():
    """newcomer46 #1: 1,000 requests arriving over 160 s against an e2e p99 of 32.3 s (4.95 times it, at a
    probe rate of 6.189 req/s, a little under their own 999 / 160) printed "5 times" while flagged for not
    reaching 5 times, and asked for "about 1,000 requests", the run itself. The ratio now prints below the
    rule, and the count is the run's scaled by how far it fell short: 1,000 × 5 × 32.3 / 160 = 1,010."""
    slo = SLO("ttft_p99", 2.0)
    frame = pl.DataFrame(
        {"round": [0], "rate": [6.189], "passed": [True], "ttft_p99": [1.8], "completed": [1000],
         "rejected": [0], "overloaded": [False], "steady": [False], "arrival_span_s": [160.0],
         "e2e_s_p99": [32.3]}
    )  # fmt: skip
    res = PlanResult("rate", 6.189, (6.189, 6.242), 0.0, "converged", (slo,), frame)
    assert (
        "its 1,000 requests arrived over 160 s, 4.95 times their e2e p99 of 32.3 s; a steady state needs "
        "arrivals over 5 times it: about 1,010 requests at this rate, or more)"
    ) in res.message
    note = too_short_note(1000, 160.0, 32.3, 6.189)
    assert "arrived over 160 s, 4.95 times their e2e p99 of 32.3 s" in note
    assert "about 1,010 requests at this rate, or more (--requests)" in note
    # A sweep's row at 173.02 s over 34.81 s (4.97 times) is named below 5 too.
    row = pl.DataFrame({"point_id": ["a"], "seed": [1], "arrival_span_s": [173.02], "e2e_s_p99": [34.81],
                        "steady_requests": [steady_requests(34.81, 6.0, 1000, 173.02)]})  # fmt: skip
    swept = sweep_too_short_note(row) or ""
    assert "(arrivals over 4.97 times its e2e p99)" in swept
    assert "about 1,045 requests or more (--requests)" in swept  # (5 × 34.81 × 6 req/s: more than it ran)


def test_the_ratio_never_rounds_up_to_the_rule_and_the_count_always_exceeds_the_run():
    """`fmt_spans` rounds to three figures except where that would reach `STEADY_SPANS` from below;
    `steady_requests` for a short run is more than it ran, whatever the rate it is asked at."""
    assert fmt_spans(4.996, 1.0) == "4.99"
    assert fmt_spans(4.9999, 1.0) == "4.99"
    assert fmt_spans(14.0, 3.0) == "4.67"
    assert fmt_spans(2.5, 1.0) == "2.5"
    assert fmt_spans(5.0, 1.0) == "5"
    for ratio in (0.3, 2.0, 4.5, 4.95, 4.999):
        span = ratio * 30.0
        assert float(fmt_spans(span, 30.0)) < STEADY_SPANS
        for rate in (0.1, 1.0, 6.0, 100.0):
            assert steady_requests(30.0, rate, 1000, span) > 1000
    assert steady_requests(30.0, 6.0) == math.ceil(STEADY_SPANS * 30.0 * 6.0)


def test_the_plot_carries_the_answers_caveats():
    """newcomer46 #2: the plot's titles said "converged" while the text said NOT A STEADY STATE and THE
    VERDICT RESTS ON THE SAMPLE; each panel's title now carries what the text does, and a steady answer
    clear of its intervals carries neither."""
    slo = SLO("ttft_p99", 2.0)
    base = {"round": [0, 1], "rate": [6.189, 6.242], "passed": [True, False], "ttft_p99": [1.8, 2.4],
            "completed": [1000, 1000], "rejected": [0, 0], "overloaded": [False, False],
            "arrival_span_s": [160.0, 159.0], "e2e_s_p99": [32.3, 33.0]}  # fmt: skip
    short = pl.DataFrame({**base, "steady": [False, False], "outside_ci": [False, True]})
    res = PlanResult("rate", 6.189, (6.189, 6.242), 0.0, "converged", (slo,), short)
    assert res.steady is False
    assert res.outside_ci is False
    assert "NOT A STEADY STATE" in res.message
    assert " ON THE SAMPLE: " in res.message
    (ax,) = res.figure().get_axes()
    title = " ".join(ax.get_title().split())
    assert "NOT A STEADY STATE (run too short); RESTS ON THE SAMPLE" in title
    clean = pl.DataFrame({**base, "steady": [True, True], "outside_ci": [True, True]})
    res = PlanResult("rate", 6.189, (6.189, 6.242), 0.0, "converged", (slo,), clean)
    assert "STEADY" not in res.message
    assert "SAMPLE" not in res.message
    (ax,) = res.figure().get_axes()
    assert "STEADY" not in ax.get_title()
    assert "SAMPLE" not in ax.get_title()
