"""adv46 #1 and #3: a rate too high for a request count ends in the note's "more than kvsim usefully
runs", never an error after the run; `steady_requests`, `fmt_spans` and `too_short_note` refuse every bad
argument by name (`InvalidArgumentError`), never OverflowError, TypeError or ZeroDivisionError."""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.analysis.steady_state import COUNT_CEILING, fmt_spans, steady_requests, too_short_note
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from tests.test_sampling_hostile import ANY as HOSTILE
from tests.test_sampling_hostile import _refused_or

HUGE = ["--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "20"]
USEFULLY = "more than 10,000,000 requests at this rate, more than kvsim usefully runs"


def test_a_run_at_1e15_requests_a_second_says_more_than_kvsim_usefully_runs(capsys):
    """It ended "e2e 4.03 at rate 1e+15 asks more requests than a count holds", rc 2, after simulating."""
    assert main(["run", *HUGE, "--workload", "sharegpt:arrival_rate=1e15"]) == 0
    out = capsys.readouterr().out
    assert USEFULLY in out


def test_a_sweep_with_a_1e15_point_writes_every_point(capsys, tmp_path: Path):
    """The 2 req/s point's run was lost with the file."""
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--base", "model=llama-3-8b", "--base", "gpu=h100-80gb"]
    argv += ["--grid", "workload.arrival_rate=1e15,2", "--requests", "20", "--output", str(out)]
    assert main(argv) == 0
    frame = pl.read_parquet(out)
    assert frame.height == 2
    assert COUNT_CEILING in frame["steady_requests"].to_list()
    assert "more than kvsim usefully runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra", [["--start-rate", "1e15", "--max-probes", "3"], ["--rate", "1e15", "--smallest", "replicas"]]
)
def test_plan_at_1e15_requests_a_second_answers(capsys, extra):
    argv = ["plan", *HUGE, "--workers", "1", "--slo", "ttft_mean:100s", *extra]
    assert main(argv) == 0
    assert "asks more requests than a count holds" not in capsys.readouterr().err


def test_the_count_past_2_53_is_the_ceiling_a_floor():
    assert steady_requests(4.03, 1e15) == COUNT_CEILING
    assert steady_requests(1e300, 0.0, 100, 3.0) == COUNT_CEILING  # (the run's count scaled)
    assert steady_requests(1.0, 1.0, 100, 1e-320) == COUNT_CEILING
    assert steady_requests(1.0, 2.0, 50, 1.0) == 250  # (10 at the rate: the run's 50 scaled by 5 e2e p99s)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"finished": 10**400, "span": 1.0}, "finished 1000"),
        ({"finished": 1e308, "span": 1.0}, "finished 1e+308"),
        ({"finished": "100", "span": 3.0}, "finished '100'"),
        ({"finished": -5, "span": 1.0}, "finished -5"),
        ({"finished": 2.5, "span": 1.0}, "finished 2.5"),
        ({"finished": True, "span": 1.0}, "finished True"),
        ({"finished": 100, "span": "3"}, "span '3'"),
        ({"finished": 100, "span": math.nan}, "span nan"),
        ({"finished": 100, "span": -1.0}, "span -1.0"),
    ],
)
def test_the_run_arguments_are_refused_by_name(kwargs, word):
    with pytest.raises(InvalidArgumentError, match=re.escape(word)):
        steady_requests(1.0, 1.0, **kwargs)


def test_an_e2e_p99_of_0_is_refused_by_name_not_divided_by():
    with pytest.raises(InvalidArgumentError, match="e2e 0 must be above 0"):
        fmt_spans(1, 0)
    with pytest.raises(InvalidArgumentError, match="e2e 0 must be above 0"):
        too_short_note(37, 1e-320, 0, None)
    assert "usefully runs" in too_short_note(1655, 1e-320, 7.6e161, 1e-320)
    assert fmt_spans(1, 1e-320) == "∞"


# Whatever a caller might pass (`test_sampling_hostile`'s), plus plain rates and spans in range.
ANY = st.one_of(HOSTILE, st.floats(0, 1e6))


@settings(max_examples=400, deadline=None)
@given(ANY, ANY, ANY, ANY)
def test_steady_requests_refuses_or_counts(e2e, rate, finished, span):
    out = _refused_or(steady_requests, e2e, rate, finished, span)
    if out is not None:
        assert isinstance(out, int)
        assert 0 <= out <= COUNT_CEILING


@settings(max_examples=300, deadline=None)
@given(ANY, ANY, ANY, st.one_of(st.none(), st.floats(0, 1e300), ANY))
def test_the_note_and_its_spans_refuse_or_say(finished, span, e2e, rate):
    out = _refused_or(fmt_spans, span, e2e)
    assert out is None or out
    if isinstance(finished, int) and not isinstance(finished, bool) and 0 <= finished < 10**9:
        note = _refused_or(too_short_note, finished, span, e2e, rate)
        assert note is None or note.startswith("not a steady state")
