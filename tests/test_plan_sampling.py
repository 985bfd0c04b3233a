"""How far a percentile from n requests can be trusted (DESIGN.md §Capacity search, "Sampling"): the
order statistics' distribution-free interval of a quantile (`kvsim.analysis.quantile_ci`), each kvsim
probe's intervals of its latency percentiles, and `kvsim plan` saying when the answer's decisive probes
(the bracket's ends) have a bound inside the interval, their verdicts resting on the sample."""

from __future__ import annotations

import functools
import json
import math
from fractions import Fraction

import numpy as np
import pytest

import kvsim
from kvsim.analysis.plan import at_rate, probe_summary, workload_rate
from kvsim.analysis.plan_sampling import bound_outside_ci, unsure_slos
from kvsim.analysis.plan_search import SLO
from kvsim.analysis.quantile_ci import (
    binomial_cdf,
    fewest_for_both_ends,
    order_statistic_ranks,
    quantile_interval,
    requests_to_settle,
)
from kvsim.cli import main
from kvsim.engine.simulate import latency_values
from kvsim.workloads.registry import make_workload, parse_workload

OPT = [
    "--model",
    "opt-13b",
    "--gpu",
    "a100-40gb",
    "--kv-cache-memory-bytes",
    "12GiB",
    "--block-size",
    "16",  # (the paper's setup, its block of 16)
    "--workload",
    "sharegpt",
]
SLOS = ["--slo", "ttft_p99:2s", "--slo", "tpot_p99:100ms", "--workers", "2"]


def _cdf(n: int, p: float, k: int) -> float:
    """P(B <= k) for B binomial(n, p), summed term by term in exact rational arithmetic."""
    q = Fraction(p).limit_denominator(1000)
    a, d = q.numerator, q.denominator
    return float(Fraction(sum(math.comb(n, j) * a**j * (d - a) ** (n - j) for j in range(k + 1)), d**n))


def test_the_binomial_cdf_is_the_sum_of_its_terms():
    for n, p in ((10, 0.5), (50, 0.9), (1000, 0.99)):
        cdf = binomial_cdf(n, p)
        for k in (0, n // 3, n - 5, n - 1, n):
            assert cdf[k] == pytest.approx(_cdf(n, p, k), abs=1e-12)


@pytest.mark.parametrize(("n", "p"), [(10, 0.5), (100, 0.5), (1000, 0.99), (2000, 0.99), (300, 0.9)])
def test_the_ranks_are_the_equal_tailed_order_statistics(n, p):
    """l is the largest rank with P(B <= l - 1) <= 2.5 %, u the smallest with P(B <= u - 1) >= 97.5 %
    (each checked against the exact sum and its neighbour), so [x_(l), x_(u)] covers the quantile with
    probability P(l <= B <= u - 1) >= 95 %. The textbook case: the median of 10 is between the 2nd and the
    9th smallest, with 97.9 % confidence."""
    lo, hi = order_statistic_ranks(n, p)
    assert lo is not None
    assert hi is not None
    assert _cdf(n, p, lo - 1) <= 0.025 < _cdf(n, p, lo)
    assert _cdf(n, p, hi - 1) >= 0.975 > _cdf(n, p, hi - 2)
    assert _cdf(n, p, hi - 1) - _cdf(n, p, lo - 1) >= 0.95
    if (n, p) == (10, 0.5):
        assert (lo, hi) == (2, 9)
        assert _cdf(n, p, hi - 1) - _cdf(n, p, lo - 1) == pytest.approx(0.9785, abs=1e-4)


def test_too_few_draws_leave_the_p99_without_an_upper_end():
    """Below 368 draws even the largest is under the p99 more than 2.5 % of the time (0.99^n > 0.025)."""
    assert fewest_for_both_ends(0.99) == 368
    assert 0.99**367 > 0.025 >= 0.99**368
    assert order_statistic_ranks(367, 0.99)[1] is None
    assert order_statistic_ranks(368, 0.99)[1] == 368
    assert quantile_interval(np.arange(100.0), 0.99)[1] is None


def test_the_interval_covers_the_quantile_as_often_as_the_binomial_says():
    """2,000 samples of 1,000 exponential draws: the interval holds the true p99 (ln 100) as often as
    P(l <= B <= u - 1) says (97.6 % for ranks 983 and 997: at least 95 % by construction, more for the
    binomial's steps), within three standard errors."""
    rng = np.random.default_rng(0)
    truth = math.log(100)
    hits = 0
    for _ in range(2000):
        lo, hi = quantile_interval(rng.exponential(size=1000), 0.99)
        assert lo is not None
        assert hi is not None
        hits += lo <= truth <= hi
    lo, hi = order_statistic_ranks(1000, 0.99)
    exact = _cdf(1000, 0.99, hi - 1) - _cdf(1000, 0.99, lo - 1)
    assert (lo, hi) == (983, 997)
    assert round(exact, 4) == 0.9761  # (summed exactly with math.comb: 0.97609...)
    assert 0.95 <= exact < 0.99
    assert abs(hits / 2000 - exact) < 3 * math.sqrt(exact * (1 - exact) / 2000)


def test_requests_to_settle_narrows_the_interval_as_one_over_root_n():
    """A half-width of 0.4 towards a bound 0.1 away: 16 times the requests. A percentile equal to its
    bound: no count. An open end: at least the draws that close it."""
    assert requests_to_settle(1000, 1.9, 1.6, 2.3, 2.0) == 16000
    assert requests_to_settle(1000, 2.1, 1.7, 2.5, 2.0) == 16000
    assert requests_to_settle(1000, 2.0, 1.7, 2.5, 2.0) is None
    assert requests_to_settle(100, 1.9, 1.5, None, 2.0) == 368


def test_a_probe_gives_each_latency_percentiles_interval_from_its_requests():
    """The intervals are the order statistics of the run's own latencies at the binomial ranks, and hold
    the summary's percentile; `latency_values` are the values the summary's percentiles are taken over."""
    cfg = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes=12 * 2**30)
    w = at_rate(make_workload(*parse_workload("sharegpt"), 2000, 0), 3.3)
    r = kvsim.simulate(w, cfg)
    s = probe_summary(r)
    values = latency_values(r.requests)
    for name in ("ttft_s", "tpot_s", "e2e_s", "queueing_s"):
        v = np.sort(values[name])
        assert s["quantile_n"][name] == len(v)
        for q in (0.5, 0.9, 0.99):
            key = f"{name}_p{round(100 * q)}"
            assert s[key] == pytest.approx(float(np.quantile(v, q)))
            lo, hi = order_statistic_ranks(len(v), q)
            assert s["quantile_ci"][key] == [v[lo - 1], v[hi - 1]]
            assert v[lo - 1] <= s[key] <= v[hi - 1]
    assert s["quantile_n"]["ttft_s"] == s["completed"] == 2000


def _row(passed: bool, ttft: float, low: float | None, high: float | None, **more) -> dict:
    return {"passed": passed, "ttft_p99": ttft, "ttft_p99_ci_low": low, "ttft_p99_ci_high": high,
            "ttft_p99_n": 1000, **more}  # fmt: skip


def test_a_verdict_is_clear_when_the_bound_is_outside_the_interval_on_its_side():
    ttft, mean = SLO("ttft_p99", 2.0), SLO("tpot_mean", 0.1)
    assert bound_outside_ci(_row(True, 1.5, 1.2, 1.9), [ttft]) is True
    assert bound_outside_ci(_row(True, 1.8, 1.5, 2.2), [ttft]) is False
    assert bound_outside_ci(_row(True, 1.8, 1.5, None), [ttft]) is False  # (no upper end)
    assert bound_outside_ci(_row(False, 2.5, 2.1, 2.9), [ttft]) is True
    assert bound_outside_ci(_row(False, 2.2, 1.9, 2.6), [ttft]) is False
    assert bound_outside_ci(_row(False, 2.2, 1.9, 2.6), [ttft], failed_by_rejection=True) is None
    # A mean is not judged: a pass rests on the percentiles; a fail the mean alone may settle is None,
    # one a percentile settles clearly is clear.
    assert bound_outside_ci(_row(True, 1.5, 1.2, 1.9, tpot_mean=0.05), [ttft, mean]) is True
    assert bound_outside_ci(_row(False, 2.2, 1.9, 2.6, tpot_mean=0.2), [ttft, mean]) is None
    assert bound_outside_ci(_row(False, 2.5, 2.1, 2.9, tpot_mean=0.2), [ttft, mean]) is True
    assert bound_outside_ci({"passed": True, "ttft_p99": 1.5}, [ttft]) is None  # (a caller's probe)
    row = _row(False, 2.2, 1.9, 2.6, outside_ci=False)
    assert unsure_slos(row, [ttft]) == [ttft]


def test_plan_says_when_the_answers_verdicts_rest_on_the_sample(capsys):
    """The README's OPT-13B plan: 1,000 requests answer 3.767 req/s where 32,000 answer 3.342. With 1,000
    the answer's probe and the failing one above it both have the 2 s bound inside their TTFT p99's
    interval: the line says so with their numbers, the probes clear of their intervals nearest the answer
    and an estimate of the requests that would put the bounds outside; the table marks them INSIDE. With
    32,000 the intervals are narrower (the decisive ones still hold the bound, the knee being where the
    p99 meets it) and the probes clear of them are nearer: the sample places the answer in a narrower
    range, which holds the 32,000's answer, and not the 1,000's range."""
    answers = {}
    for n in (1000, 32000):
        assert main(["plan", *OPT, "--requests", str(n), *SLOS, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        answers[n] = out
        assert out["outside_ci"] is False
        rows = {p["rate"]: p for p in out["probes"]}
        lo, hi = out["bracket"]
        message = out["message"]
        assert "THE VERDICTS REST ON THE SAMPLE: " in message
        for x, verdict in ((lo, "passes"), (hi, "fails")):
            row = rows[x]
            assert row["outside_ci"] is False
            assert row["ttft_p99_ci_low"] <= 2.0 < row["ttft_p99_ci_high"]
            assert row["ttft_p99_n"] == n
            assert f"{x:.4g} req/s {verdict} ttft_p99 <= 2 s with {row['ttft_p99']:.4g} s" in message, message
        assert f"from {n:,} requests (95 % interval {rows[lo]['ttft_p99_ci_low']:.4g} to " in message
        clear_pass = max(x for x, r in rows.items() if r["passed"] and r["outside_ci"] and x < hi)
        clear_fail = min(x for x, r in rows.items() if not r["passed"] and r["outside_ci"])
        assert (
            f"the nearest probes clear of their intervals are at {clear_pass:.4g} req/s (passing) and {clear_fail:.4g} req/s (failing), so at best the sample places the answer between those"
            in message
        )
        assert "or more would put the bounds outside them" in message
        assert "a floor on the uncertainty" in message
        assert "(near a knee a p99 spreads several times wider over workload seeds)" in message  # (p99s only)
        out["apart"] = (clear_pass, clear_fail)
    small, large = answers[1000], answers[32000]
    assert small["value"] > large["value"]
    assert large["apart"][1] - large["apart"][0] < small["apart"][1] - small["apart"][0]
    assert large["apart"][0] <= large["value"] < large["apart"][1]
    # The text: an interval column for each percentile SLO and the bound's place, INSIDE at the two ends.
    assert main(["plan", *OPT, "--requests", "1000", *SLOS]) == 0
    text = capsys.readouterr().out.splitlines()
    (header,) = [line for line in text if line.startswith("round")]
    assert "ttft_p99 95% CI (s)" in header
    assert "tpot_p99 95% CI (s)" in header
    assert header.split()[-3:] == ["bound", "vs", "CI"]
    for x in small["bracket"]:
        (line,) = [t for t in text if t.split()[1:2] == [f"{x:.4g}"]]
        assert line.split()[-1] == "INSIDE:ttft_p99"
        row = next(p for p in small["probes"] if p["rate"] == x)
        assert f"[{row['ttft_p99_ci_low']:.4g},{row['ttft_p99_ci_high']:.4g}]" in line.split()


def _knee_probe(workload, config, *, knee: float) -> dict:
    rate = workload_rate(workload)
    return {"ttft_s_p99": rate / knee, "completed": len(workload), "rejected": 0}


def test_a_loose_precision_with_many_requests_is_clear_and_a_caller_probe_is_not_judged(capsys):
    """A bracket wide against the intervals (a 50 % precision on 32,000 requests) has its ends clear of
    them: no caveat and no column of the bound's place. A caller's probe gives no interval: no column,
    no caveat, `outside_ci` None."""
    assert main(["plan", *OPT, "--requests", "32000", *SLOS, "--precision", "50%", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outside_ci"] is True
    assert "SAMPLE" not in out["message"]
    for x in out["bracket"]:
        row = next(p for p in out["probes"] if p["rate"] == x)
        assert row["outside_ci"] is True
        assert not row["ttft_p99_ci_low"] <= 2.0 < row["ttft_p99_ci_high"]
    w = kvsim.workloads.synthetic(60, arrival_rate=2.0, seed=0, lengths="sharegpt-paper", max_model_len=2048)
    plain = kvsim.plan(w, kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, workers=2,
                       probe=functools.partial(_knee_probe, knee=5.0))  # fmt: skip
    assert plain.outside_ci is None
    assert "SAMPLE" not in plain.message
    assert "95% CI" not in plain.table()
    assert "bound vs CI" not in plain.table()


def _interval_probe(workload, config, *, knee: float, spread: float) -> dict:
    """`ttft_s_p99` = rate / knee, its 95 % interval `spread` times it either way, from 1,000 requests."""
    p99 = workload_rate(workload) / knee
    return {"ttft_s_p99": p99, "completed": 1000, "rejected": 0,
            "quantile_ci": {"ttft_s_p99": [p99 / spread, p99 * spread]}, "quantile_n": {"ttft_s": 1000}}  # fmt: skip


def test_a_best_whose_answer_rests_on_the_sample_says_so():
    """`best_of`: a candidate whose decisive probes hold the bound inside their intervals is `unsure`, and
    the best line says the order may not hold; narrow intervals leave the line alone."""
    from kvsim.analysis.plan_compare import Candidate, best_of
    from kvsim.cli.plan import _best_line

    w = kvsim.workloads.synthetic(60, arrival_rate=2.0, seed=0, lengths="sharegpt-paper", max_model_len=2048)
    lines = {}
    for spread in (1.3, 1.0001):
        candidates = [
            Candidate("a", {}, functools.partial(_interval_probe, knee=5.0, spread=spread)),
            Candidate("b", {}, functools.partial(_interval_probe, knee=6.0, spread=spread)),
        ]
        out = best_of(w, kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, candidates, workers=2)
        assert out.best == "b"
        lines[spread] = (out.unsure, _best_line(out, 60))
    unsure, line = lines[1.3]
    assert unsure == ["a", "b"]
    assert line.startswith("best: b")
    assert "the answer of b rests on the sample (THE VERDICTS REST ON THE SAMPLE above)" in line
    unsure, line = lines[1.0001]
    assert unsure == []
    assert "SAMPLE" not in line


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.1, float("nan")])
def test_a_quantile_outside_zero_one_is_refused_by_name(p):
    """The 0- and 1-quantiles (a distribution's ends) have no order-statistics interval, and NaN is no
    probability: each function refuses p by name rather than raising a bare math error or answering."""
    from kvsim.errors import InvalidArgumentError

    for call in (
        lambda: order_statistic_ranks(10, p),
        lambda: quantile_interval([1.0, 2.0, 3.0], p),
        lambda: fewest_for_both_ends(p),
        lambda: requests_to_settle(10, 1.0, 0.5, 1.5, 2.0, 0.95, p),
    ):
        with pytest.raises(InvalidArgumentError, match=r"^p "):
            call()


def test_nan_estimates_and_values_are_refused_by_name():
    from kvsim.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"^estimate nan"):
        requests_to_settle(100, float("nan"), 0.5, 1.5, 2.0)
    with pytest.raises(InvalidArgumentError, match=r"^bound inf"):
        requests_to_settle(100, 1.0, 0.5, 1.5, math.inf)
    with pytest.raises(InvalidArgumentError, match=r"^values hold NaN"):
        quantile_interval(np.array([np.nan, 1.0, 2.0, 3.0] * 100), 0.5)


@pytest.mark.parametrize("n", [2, 3, 5, 10, 25, 100, 367, 368, 1000])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.99, 0.999])
def test_the_interval_holds_the_percentile_kvsim_prints(n, p):
    """With few draws an end's rank can pass the linear estimate (the p99 of 2 draws: the lower end at
    the larger, above the interpolated p99): the end widens to the estimate's neighbouring rank, which
    still covers the quantile at least 95 % of the time, so the interval never excludes the percentile."""
    rng = np.random.default_rng(n)
    v = rng.exponential(size=n)
    est = float(np.quantile(v, p))
    lo, hi = quantile_interval(v, p)
    assert lo is None or lo <= est
    assert hi is None or est <= hi
    s = np.sort(v)
    for end in (lo, hi):  # an order statistic, whose coverage is at least the level's
        if end is not None:
            (rank,) = np.flatnonzero(s == end) + 1
            if end is lo:
                assert 1 - _cdf(n, p, int(rank) - 1) >= 0.975 - 1e-12
            else:
                assert _cdf(n, p, int(rank) - 1) >= 0.975 - 1e-12
    if (n, p) == (2, 0.99):  # the report's case: [x_(2), ∞) became [x_(1), ∞)
        assert order_statistic_ranks(2, 0.99) == (2, None)
        assert (lo, hi) == (s[0], None)


def test_a_p99_of_two_requests_is_never_printed_outside_its_interval():
    """`kvsim plan` with 2 requests a probe: the table's p99 and the caveat's interval agree (before, the
    interval started at the larger e2e, above the interpolated p99, and the caveat called a bound below the
    whole interval "inside")."""
    argv = [
        "plan", "--model", "opt-13b", "--kv-cache-memory-bytes", "2GiB", "--workload", "sharegpt",
        "--requests", "2", "--workers", "1", "--max-probes", "2", "--seed", "1",
        "--slo", "e2el_p99:494.8ms", "--json",
    ]  # fmt: skip
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(argv)
    doc = json.loads(out.getvalue())
    for row in doc["probes"]:
        low, high = row["e2el_p99_ci_low"], row["e2el_p99_ci_high"]
        assert low is not None
        assert low <= row["e2el_p99"]
        assert high is None or row["e2el_p99"] <= high
        assert row["outside_ci"] is False  # the bound 0.4948 s lies inside [low, ∞)
        assert low <= 0.4948


def test_a_percentile_on_its_bound_gets_no_absurd_request_count(capsys):
    """The e2el p99 at 8 req/s is 0.9996 s against a 1 s bound: n (w/d)^2 gave about 940,000,000
    requests (years of arrivals, past the simulated clock kvsim could run). Past `SETTLE_CAP` (or the
    clock at the rate) the caveat gives the relative gap and says no practical sample settles it."""
    from kvsim.analysis.plan_sampling import SETTLE_CAP

    argv = [
        "plan", "--model", "opt-13b", "--kv-cache-memory-bytes", "2GiB", "--workload", "sharegpt",
        "--requests", "400", "--workers", "1", "--max-probes", "3", "--seed", "3",
        "--slo", "e2el_p99:1000ms", "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {p["rate"]: p for p in out["probes"]}
    row = rows[8.0]
    assert abs(row["e2el_p99"] - 1.0) < 1e-3
    gap = 100 * abs(row["e2el_p99"] - 1.0)
    message = out["message"]
    assert (
        f"e2el_p99 at 8 req/s sits {gap:.2g} % from its bound: too close for any practical sample" in message
    )
    assert f"more than {SETTLE_CAP:,} requests" in message
    assert "or more would put the bound" not in message
    assert "940,000,000" not in message
