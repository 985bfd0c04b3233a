"""Tests of `kvsim.Workload` (validation, selection, IO, statistics) and the synthetic generators."""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.segments import OUTPUT_BIT, output_id
from kvsim.workloads import Workload, synthetic
from kvsim.workloads.generators import PAPER_PRESETS
from kvsim.workloads.ids import content_ids, mix63

TRACES = Path(
    os.environ.get("KVSIM_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces"
)
SHAREGPT = TRACES / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"

# Large-sample tolerance of the generators' means: 2 % on 200k requests. The lognormal presets' sampling
# error is about CV/sqrt(n) = 0.9/447 = 0.2 %, so a 2 % miss means a wrong distribution, not bad luck.
N_LARGE = 200_000
REL_TOL = 0.02


def _two_turns() -> Workload:
    """Two requests: the second quotes the first's whole output after repeating its prompt."""
    return Workload(
        arrival=[0.0, 1.0],
        output_len=[5, 3],
        seg_offsets=[0, 1, 4],
        segment_id=[7, 7, output_id(0), 9],
        segment_len=[10, 10, 5, 2],
    )


# ------------------------------------------------------------------------------------ construction


def test_defaults_dtypes_and_contiguity() -> None:
    w = Workload(arrival=[0.5, 0.0, 0.5], prompt_len=[3, 4, 5], output_len=[1, 2, 3])
    assert len(w) == 3
    expected = {
        "request_id": np.uint64,
        "arrival": np.float64,
        "prompt_len": np.int64,
        "output_len": np.int64,
        "max_tokens": np.int64,
        "num_samples": np.int64,
        "beam": np.bool_,
        "seg_offsets": np.int64,
        "segment_id": np.uint64,
        "segment_len": np.int64,
    }
    for name, dtype in expected.items():
        col = getattr(w, name)
        assert col.dtype == dtype, name
        assert col.flags.c_contiguous, name
        assert not col.flags.writeable, name
    # Sorted by arrival, ties in input order; ids default to the input position.
    assert w.arrival.tolist() == [0.0, 0.5, 0.5]
    assert w.request_id.tolist() == [1, 0, 2]
    assert w.prompt_len.tolist() == [4, 3, 5]
    assert w.max_tokens.tolist() == w.output_len.tolist() == [2, 1, 3]
    assert w.num_samples.tolist() == [1, 1, 1]
    # One unique segment per request, keyed by the request id.
    assert w.seg_offsets.tolist() == [0, 1, 2, 3]
    assert w.segment_len.tolist() == [4, 3, 5]
    assert w.segment_id.tolist() == content_ids(0x5851F42D4C957F2D, w.request_id).tolist()
    assert all(s < OUTPUT_BIT for s in w.segment_id.tolist())


def test_segments_derive_prompt_len_and_sorting_moves_segments() -> None:
    w = Workload(
        arrival=[2.0, 1.0],
        output_len=[1, 1],
        seg_offsets=[0, 2, 3],
        segment_id=[11, 12, 13],
        segment_len=[4, 6, 8],
    )
    assert w.prompt_len.tolist() == [8, 10]
    assert w.segments(0) == [(13, 8)]
    assert w.segments(1) == [(11, 4), (12, 6)]
    assert w.segments(-1) == w.segments(1)
    assert w.row(0)["request_id"] == 1
    with pytest.raises(IndexError):
        w.segments(2)


def test_columns_are_copies_of_the_inputs() -> None:
    arrival = np.array([0.0, 1.0])
    w = Workload(arrival=arrival, prompt_len=[1, 2], output_len=[1, 1])
    arrival[0] = 5.0
    assert w.arrival[0] == 0.0
    with pytest.raises(AttributeError):
        w.arrival = arrival  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"prompt_len": [1, 0]}, ["row 1", "prompt_len 0"]),
        ({"output_len": [1, -2]}, ["row 1", "output_len -2"]),
        ({"max_tokens": [0, 1]}, ["row 0", "max_tokens 0"]),
        ({"num_samples": [1, 0]}, ["row 1", "num_samples 0"]),
        ({"arrival": [0.0, -1.0]}, ["row 1", "arrival -1.0"]),
        ({"arrival": [math.nan, 1.0]}, ["row 0", "arrival nan"]),
        ({"arrival": [0.0, math.inf]}, ["row 1", "arrival inf"]),
        ({"request_id": [4, 4]}, ["request_id 4", "rows 0 and 1"]),
        ({"request_id": [0, 1 << 47]}, ["row 1", "request_id"]),
        ({"prompt_len": [1.5, 2]}, ["prompt_len[0]", "1.5"]),
        ({"request_id": [-1, 2]}, ["request_id[0]", "-1"]),
        ({"prompt_len": [1, 2, 3]}, ["prompt_len has 3 rows"]),
        ({"arrival": [[0.0, 1.0]]}, ["arrival", "one-dimensional"]),
    ],
)
def test_bad_rows_name_the_row_and_value(kwargs: dict, words: list[str]) -> None:
    base = {"arrival": [0.0, 1.0], "prompt_len": [1, 2], "output_len": [1, 1]}
    with pytest.raises(InvalidArgumentError) as info:
        Workload(**{**base, **kwargs})
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("segments", "words"),
    [
        (([0, 1, 1], [1], [3]), ["row 1", "0 segments"]),
        (([0, 1], [1], [3]), ["seg_offsets has length 2"]),
        (([1, 1, 2], [1, 2], [3, 3]), ["seg_offsets[0]"]),
        (([0, 1, 2], [1, 2], [3, 0]), ["row 1", "length 0"]),
        (([0, 1, 2], [1, 2, 3], [3, 3]), ["segment_id has 3"]),
        (([0, 1, 2], [1, 2], [3, 4]), ["row 1", "sum to 4", "prompt_len is 3"]),
    ],
)
def test_bad_segments(segments: tuple, words: list[str]) -> None:
    offsets, ids, lens = segments
    with pytest.raises(InvalidArgumentError) as info:
        Workload(
            arrival=[0.0, 1.0],
            prompt_len=[3, 3],
            output_len=[1, 1],
            seg_offsets=offsets,
            segment_id=ids,
            segment_len=lens,
        )
    for word in words:
        assert word in str(info.value)


def test_partial_segment_arguments_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="together"):
        Workload(arrival=[0.0], output_len=[1], seg_offsets=[0, 1], segment_id=[1])
    with pytest.raises(InvalidArgumentError, match="prompt_len is required"):
        Workload(arrival=[0.0], output_len=[1])


def test_output_ids_must_quote_earlier_requests() -> None:
    w = _two_turns()
    assert w.segments(1) == [(7, 10), (output_id(0), 5), (9, 2)]
    assert w.prompt_len.tolist() == [10, 17]
    base = {
        "arrival": [0.0, 1.0],
        "output_len": [5, 3],
        "seg_offsets": [0, 1, 4],
        "segment_len": [10, 10, 5, 2],
    }
    cases = [
        (output_id(1), "does not come earlier"),  # quotes itself
        (output_id(5), "not an output id of a request in the table"),
        (output_id(0, 1), "sample 1"),
        (OUTPUT_BIT | 3, "sample 3"),  # any id >= 2**63 decodes to (request 0, sample 3) here
    ]
    for quoted, words in cases:
        with pytest.raises(InvalidArgumentError, match=words):
            Workload(**base, segment_id=[7, 7, quoted, 9])
    # At most the generated tokens can be quoted; max_tokens caps what request 0 generates.
    with pytest.raises(InvalidArgumentError, match="generates only 4"):
        Workload(**base, segment_id=[7, 7, output_id(0), 9], max_tokens=[4, 3])
    # Arrival order decides "earlier": swapping the arrivals makes the quote go backwards in time.
    with pytest.raises(InvalidArgumentError, match="does not come earlier"):
        Workload(**{**base, "arrival": [2.0, 1.0]}, segment_id=[7, 7, output_id(0), 9])
    # A sample the request has is fine.
    Workload(**base, segment_id=[7, 7, output_id(0, 1), 9], num_samples=[2, 1])
    # Foreign outputs are accepted only on request.
    foreign = Workload(**base, segment_id=[7, 7, output_id(5), 9], allow_foreign_outputs=True)
    assert foreign.allow_foreign_outputs


# ---------------------------------------------------------------------------------------- selection


def test_slicing_masks_and_index_arrays_agree() -> None:
    w = synthetic(50, system_prompt_len=16, sharing_ratio=0.5, seed=4)
    by_slice = w[10:20]
    by_mask = w[(np.arange(50) >= 10) & (np.arange(50) < 20)]
    by_index = w[np.arange(19, 9, -1)]  # any order: a selection keeps table order
    for sub in (by_mask, by_index):
        assert sub.equals(by_slice)
    assert len(by_slice) == 10
    for k in range(10):
        assert by_slice.segments(k) == w.segments(10 + k)
        assert by_slice.row(k)["request_id"] == w.row(10 + k)["request_id"]
    assert w[::-1].equals(w)
    assert len(w[np.array([], dtype=np.int64)]) == 0
    with pytest.raises(IndexError, match="twice"):
        w[[1, 1]]
    with pytest.raises(IndexError):
        w[[50]]
    with pytest.raises(IndexError, match="mask"):
        w[np.ones(3, dtype=bool)]
    with pytest.raises(TypeError):
        w[3]  # type: ignore[call-overload]


def test_selection_that_drops_a_quoted_turn_allows_foreign_outputs() -> None:
    w = _two_turns()
    assert not w[:].allow_foreign_outputs
    tail = w[1:]
    assert tail.allow_foreign_outputs
    assert tail.segments(0) == w.segments(1)
    assert not w[:1].allow_foreign_outputs


def test_concat_sorts_and_rejects_duplicate_ids() -> None:
    a = Workload(arrival=[0.0, 2.0], prompt_len=[1, 2], output_len=[1, 1], request_id=[0, 1])
    b = Workload(arrival=[1.0, 2.0], prompt_len=[3, 4], output_len=[1, 1], request_id=[2, 3])
    c = Workload.concat([a, b])
    assert c.request_id.tolist() == [0, 2, 1, 3]
    assert c.prompt_len.tolist() == [1, 3, 2, 4]
    assert c.segments(1) == b.segments(0)
    with pytest.raises(InvalidArgumentError, match="request_id 1 appears"):
        Workload.concat([a, a[1:]])
    with pytest.raises(InvalidArgumentError):
        Workload.concat([])


# ------------------------------------------------------------------------------------------- IO


def test_to_polars_layout() -> None:
    w = _two_turns()
    frame = w.to_polars()
    assert frame.columns == [
        "request_id",
        "arrival",
        "prompt_len",
        "output_len",
        "max_tokens",
        "num_samples",
        "beam",
        "segment_id",
        "segment_len",
    ]
    assert frame.height == 2
    assert frame["segment_id"].dtype == pl.List(pl.UInt64)
    assert frame["segment_id"].to_list()[1] == [7, output_id(0), 9]
    assert frame["segment_len"].to_list() == [[10], [10, 5, 2]]
    assert Workload.from_polars(frame).equals(w)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    n = draw(st.integers(0, 12))
    counts = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    total = sum(counts)
    seg_len = draw(st.lists(st.integers(1, 10**6), min_size=total, max_size=total))
    seg_id = draw(st.lists(st.integers(0, (1 << 63) - 1), min_size=total, max_size=total))
    floats = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
    ints = st.lists(st.integers(1, 10**6), min_size=n, max_size=n)
    ids = draw(st.lists(st.integers(0, (1 << 47) - 1), min_size=n, max_size=n, unique=True))
    return Workload(
        arrival=draw(st.lists(floats, min_size=n, max_size=n)),
        output_len=draw(ints),
        max_tokens=draw(ints),
        num_samples=draw(st.lists(st.integers(1, 64), min_size=n, max_size=n)),
        beam=draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        request_id=ids,
        seg_offsets=np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
        segment_id=np.array(seg_id, dtype=np.uint64),
        segment_len=seg_len,
        meta={"note": draw(st.text(max_size=5))},
    )


@given(workloads())
def test_parquet_round_trip_is_exact(w: Workload) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.parquet"
        w.save(path)
        back = Workload.load(path)
    assert back.equals(w)
    for name, col in w.columns().items():
        other = getattr(back, name)
        assert other.dtype == col.dtype, name
        assert other.tobytes() == col.tobytes(), name
    assert back.meta == w.meta
    assert back.allow_foreign_outputs == w.allow_foreign_outputs


def test_round_trip_of_a_conversation_workload(tmp_path: Path) -> None:
    w = synthetic(300, turns=3, num_samples=2, system_prompt_len=32, sharing_ratio=0.3, seed=5)
    w.save(tmp_path / "w.parquet")
    back = Workload.load(tmp_path / "w.parquet")
    assert back.equals(w)
    assert back.meta["turns"] == 3


def test_load_rejects_foreign_parquet(tmp_path: Path) -> None:
    pl.DataFrame({"arrival": [0.0]}).write_parquet(tmp_path / "x.parquet")
    with pytest.raises(InvalidArgumentError, match=r"not written by Workload\.save"):
        Workload.load(tmp_path / "x.parquet")


# ------------------------------------------------------------------------------------------ describe


def test_describe_matches_numpy() -> None:
    w = synthetic(2000, lengths="alpaca-paper", system_prompt_len=40, sharing_ratio=0.25, seed=6)
    d = w.describe()
    assert d["num_requests"] == 2000
    assert d["prompt_len_mean"] == pytest.approx(w.prompt_len.mean())
    assert d["output_len_p50"] == pytest.approx(np.median(w.output_len))
    assert d["output_len_p99"] == pytest.approx(np.percentile(w.output_len, 99))
    assert d["duration_s"] == pytest.approx(w.arrival[-1] - w.arrival[0])
    assert d["arrival_rate"] == pytest.approx(1999 / d["duration_s"])
    # Shared tokens are exactly the system prompts: 40 tokens in 500 of the requests.
    assert d["shared_prompt_fraction"] == pytest.approx(500 * 40 / w.prompt_len.sum())
    assert (
        Workload(arrival=[0.0, 0.0], prompt_len=[1, 1], output_len=[1, 1]).describe()["arrival_rate"]
        == math.inf
    )


# ---------------------------------------------------------------------------------------- generators


@pytest.mark.parametrize("preset", sorted(PAPER_PRESETS))
def test_paper_presets_hit_their_means(preset: str) -> None:
    w = synthetic(N_LARGE, lengths=preset, seed=7)
    prompt_mean, output_mean = PAPER_PRESETS[preset]
    assert w.prompt_len.mean() == pytest.approx(prompt_mean, rel=REL_TOL)
    assert w.output_len.mean() == pytest.approx(output_mean, rel=REL_TOL)
    assert w.prompt_len.min() >= 1
    assert w.output_len.min() >= 1
    assert (w.prompt_len + w.output_len).max() <= 2048


def test_sharegpt_real_resamples_the_pairs() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"traces folder {TRACES} is absent")
    real = pl.read_csv(SHAREGPT)
    w = synthetic(N_LARGE, lengths="sharegpt-real", length_params={"path": SHAREGPT}, seed=8)
    assert w.prompt_len.mean() == pytest.approx(real["num_prefill_tokens"].mean(), rel=REL_TOL)
    assert w.output_len.mean() == pytest.approx(real["num_decode_tokens"].mean(), rel=REL_TOL)
    pairs = set(zip(real["num_prefill_tokens"].to_list(), real["num_decode_tokens"].to_list(), strict=True))
    drawn = set(zip(w.prompt_len[:1000].tolist(), w.output_len[:1000].tolist(), strict=True))
    assert drawn <= pairs


def test_missing_length_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        synthetic(10, lengths="sharegpt-real", length_params={"path": tmp_path / "nope.csv"})


@pytest.mark.parametrize(
    ("lengths", "params", "prompt_mean", "output_mean"),
    [
        ("fixed", {"prompt_len": 17, "output_len": 5}, 17, 5),
        ("uniform", {"prompt_len": (10, 30), "output_len": (1, 9)}, 20, 5),
        ("normal", {"prompt_mean": 500, "prompt_std": 50, "output_mean": 300, "output_std": 30}, 500, 300),
        (
            "lognormal",
            {"prompt_mean": 400, "prompt_sigma": 1.0, "output_mean": 90, "output_sigma": 0.5},
            400,
            90,
        ),
    ],
)
def test_distributions_hit_their_means(
    lengths: str, params: dict, prompt_mean: float, output_mean: float
) -> None:
    w = synthetic(N_LARGE, lengths=lengths, length_params=params, seed=9)
    assert w.prompt_len.mean() == pytest.approx(prompt_mean, rel=REL_TOL)
    assert w.output_len.mean() == pytest.approx(output_mean, rel=REL_TOL)
    if lengths == "fixed":
        assert set(w.prompt_len.tolist()) == {17}
    if lengths == "uniform":
        assert w.prompt_len.min() == 10
        assert w.prompt_len.max() == 30


def test_lognormal_with_clipping_keeps_its_mean() -> None:
    params = {"prompt_mean": 600, "prompt_sigma": 1.2, "output_mean": 500, "output_sigma": 1.2}
    w = synthetic(N_LARGE, lengths="lognormal", length_params=params, max_model_len=2048, seed=10)
    assert (w.prompt_len + w.output_len).max() <= 2048
    assert w.prompt_len.mean() == pytest.approx(600, rel=REL_TOL)
    assert w.output_len.mean() == pytest.approx(500, rel=REL_TOL)


def test_empirical_lengths_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    pl.DataFrame({"in": [10, 20], "out": [3, 4]}).write_csv(path)
    w = synthetic(
        1000, lengths="empirical", length_params={"path": path, "prompt_column": "in", "output_column": "out"}
    )
    pairs = set(zip(w.prompt_len.tolist(), w.output_len.tolist(), strict=True))
    assert pairs == {(10, 3), (20, 4)}


@pytest.mark.parametrize("arrivals", ["poisson", "gamma", "constant"])
def test_arrival_rate(arrivals: str) -> None:
    w = synthetic(
        N_LARGE,
        arrival_rate=25.0,
        arrivals=arrivals,
        burstiness=2.0 if arrivals == "gamma" else 1.0,  # other arrivals refuse a burstiness
        lengths="fixed",
        length_params={"prompt_len": 1, "output_len": 1},
        seed=11,
    )
    gaps = np.diff(w.arrival)
    assert w.arrival[0] == 0.0
    assert 1 / gaps.mean() == pytest.approx(25.0, rel=REL_TOL)
    expected_cv = {"poisson": 1.0, "gamma": 2.0, "constant": 0.0}[arrivals]
    assert gaps.std() / gaps.mean() == pytest.approx(expected_cv, rel=REL_TOL, abs=1e-9)


def test_all_at_once() -> None:
    w = synthetic(100, arrivals="all-at-once", seed=1)
    assert not w.arrival.any()
    assert w.request_id.tolist() == list(range(100))


def test_same_seed_same_bits_other_seed_other_table() -> None:
    kwargs = {
        "system_prompt_len": 64,
        "num_system_prompts": 4,
        "sharing_ratio": 0.5,
        "turns": 3,
        "num_samples": 2,
    }
    a = synthetic(5000, seed=12, **kwargs)
    b = synthetic(5000, seed=12, **kwargs)
    c = synthetic(5000, seed=13, **kwargs)
    for name, col in a.columns().items():
        assert col.tobytes() == getattr(b, name).tobytes(), name
    assert not np.array_equal(a.prompt_len, c.prompt_len)
    assert not np.array_equal(a.segment_id, c.segment_id)


def test_arrival_options_do_not_change_the_lengths() -> None:
    a = synthetic(1000, arrival_rate=1.0, seed=14)
    b = synthetic(1000, arrival_rate=50.0, arrivals="gamma", burstiness=3.0, seed=14)
    assert np.array_equal(a.prompt_len, b.prompt_len)
    assert np.array_equal(a.output_len, b.output_len)


def test_content_ids_are_unique_and_below_output_range() -> None:
    w = synthetic(N_LARGE, system_prompt_len=8, num_system_prompts=3, sharing_ratio=0.5, seed=15)
    ids = w.segment_id
    assert ids.max() < OUTPUT_BIT
    # Every message id occurs once; the three system prompt ids account for every repetition.
    _, counts = np.unique(ids, return_counts=True)
    assert (counts > 1).sum() <= 3
    assert counts.sum() - len(counts) == N_LARGE // 2 - (counts > 1).sum()
    x = np.arange(1 << 16, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15 >> 1)
    assert len(np.unique(mix63(x))) == len(np.unique(x & np.uint64((1 << 63) - 1)))


def test_multi_turn_prompts_extend_the_previous_turn() -> None:
    turns = 4
    w = synthetic(400, turns=turns, turn_interval=5.0, system_prompt_len=20, sharing_ratio=1.0, seed=16)
    by_id = {int(r): i for i, r in enumerate(w.request_id.tolist())}
    conversations: dict[int, list[int]] = {}
    # Rebuild conversations from the quotes: a turn quoting request p continues p's conversation.
    for i in range(len(w)):
        segs = w.segments(i)
        outs = [s for s, _ in segs if s >= OUTPUT_BIT]
        if not outs:
            conversations[i] = [i]
            continue
        prev = by_id[(outs[-1] >> 16) & ((1 << 47) - 1)]
        chain = next(c for c in conversations.values() if c[-1] == prev)
        chain.append(i)
    assert len(conversations) == 100
    for chain in conversations.values():
        assert len(chain) == turns
        for k in range(1, turns):
            prev, cur = chain[k - 1], chain[k]
            prev_segs = w.segments(prev)
            cur_segs = w.segments(cur)
            gen = int(w.output_len[prev])
            assert cur_segs[: len(prev_segs)] == prev_segs
            assert cur_segs[len(prev_segs)] == (output_id(int(w.request_id[prev])), gen)
            assert len(cur_segs) == len(prev_segs) + 2
            assert w.arrival[cur] - w.arrival[prev] == pytest.approx(5.0)
            assert w.prompt_len[cur] == w.prompt_len[prev] + gen + cur_segs[-1][1]


def test_sharing_ratio() -> None:
    for ratio in (0.0, 0.3, 1.0):
        w = synthetic(10_000, system_prompt_len=100, num_system_prompts=5, sharing_ratio=ratio, seed=17)
        first = w.segment_id[w.seg_offsets[:-1]]
        sys_ids = set(content_ids_of_system_prompts(w))
        shared = np.isin(first, np.array(sorted(sys_ids), dtype=np.uint64))
        assert shared.mean() == pytest.approx(ratio, abs=0.01)
        assert (w.num_segments == 1 + shared).all()
        if ratio:
            assert len(set(first[shared].tolist())) == 5


def content_ids_of_system_prompts(w: Workload) -> list[int]:
    """Segment ids used by more than one request (the system prompts)."""
    ids, counts = np.unique(w.segment_id, return_counts=True)
    return ids[counts > 1].tolist()


def test_samples_beam_and_max_tokens() -> None:
    w = synthetic(100, num_samples=4, seed=18)
    assert (w.num_samples == 4).all()
    assert not w.beam.any()
    b = synthetic(100, beam_width=3, seed=18)
    assert (b.num_samples == 3).all()
    assert b.beam.all()
    assert np.array_equal(w.output_len, b.output_len)
    assert np.array_equal(synthetic(100, max_tokens="exact", seed=18).max_tokens, w.output_len)
    assert (synthetic(100, max_tokens=64, seed=18).max_tokens == 64).all()
    assert (synthetic(100, max_tokens=("fixed", 7), seed=18).max_tokens == 7).all()
    doubled = synthetic(100, max_tokens=("multiple", 1.5), seed=18)
    assert np.array_equal(doubled.max_tokens, np.ceil(1.5 * w.output_len).astype(np.int64))
    with pytest.raises(InvalidArgumentError, match="not both"):
        synthetic(10, num_samples=2, beam_width=2)


def test_capped_turns_quote_only_the_generated_tokens() -> None:
    w = synthetic(
        200, turns=2, max_tokens=8, lengths="fixed", length_params={"prompt_len": 5, "output_len": 20}
    )
    quoted = w.segment_len[w.segment_id >= np.uint64(OUTPUT_BIT)]
    assert len(quoted) == 100
    assert (quoted == 8).all()


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"lengths": "nope"}, "lengths"),
        ({"arrivals": "nope"}, "arrivals"),
        ({"arrival_rate": 0.0}, "arrival_rate"),
        ({"arrival_rate": -1.0}, "arrival_rate"),
        ({"burstiness": 0.0}, "burstiness"),
        ({"turns": 0}, "turns"),
        ({"sharing_ratio": 1.5}, "sharing_ratio"),
        ({"num_samples": 0}, "num_samples"),
        ({"max_tokens": "huge"}, "max_tokens"),
        ({"max_tokens": ("fixed", 0)}, "cap"),
        ({"lengths": "fixed", "length_params": {"prompt_len": 0, "output_len": 1}}, "prompt_len"),
        ({"lengths": "fixed", "length_params": {"prompt_len": 1}}, "output_len"),
        ({"lengths": "fixed", "length_params": {"prompt_len": 1, "output_len": 1, "x": 2}}, "'x'"),
        ({"lengths": "uniform", "length_params": {"prompt_len": (5, 2), "output_len": (1, 1)}}, "range"),
        ({"max_model_len": 1}, "max_model_len"),
        ({"first_request_id": -1}, "first_request_id"),
    ],
)
def test_bad_generator_options(kwargs: dict, word: str) -> None:
    with pytest.raises(InvalidArgumentError, match=word):
        synthetic(10, **kwargs)


def test_kvsim_namespace_exports() -> None:
    assert kvsim.Workload is Workload
    assert kvsim.workloads.synthetic is synthetic
    assert len(synthetic(0)) == 0


def test_workload_refuses_a_meta_that_is_not_a_mapping():
    """`meta=[1]` raised dict()'s bare TypeError (cannot convert dictionary update sequence)."""
    for meta in ([1], "source", 3):
        with pytest.raises(InvalidArgumentError, match=r"^meta .* must be a mapping \(a dict\) or None$"):
            Workload(arrival=[0.0], prompt_len=[4], output_len=[2], meta=meta)


def test_workload_unknown_or_missing_keywords_are_invalid_arguments():
    """As SimConfig's (one helper, `kvsim.arguments.keyword_check`): not Python's TypeError."""
    with pytest.raises(
        InvalidArgumentError, match=r"^'arival' is not a Workload field \(did you mean arrival"
    ):
        Workload(arival=[0.0], prompt_len=[4], output_len=[2])
    with pytest.raises(InvalidArgumentError, match=r"^'zzz' is not a Workload field$"):
        Workload(arrival=[0.0], prompt_len=[4], output_len=[2], zzz=1)
    with pytest.raises(InvalidArgumentError, match=r"^Workload takes keyword arguments only \(arrival, "):
        Workload([0.0], [2])  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError, match=r"^Workload needs arrival, output_len$"):
        Workload(prompt_len=[4])  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match=r"^'block_sise' is not a SimConfig field \(did you mean"):
        kvsim.SimConfig(block_sise=16)


# -- a parameter the arrival process never reads is refused ---------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "match"),
    [
        # (by synthetic's one rule: a burstiness other than 1, Poisson's own)
        ("sharegpt:arrivals=poisson,burstiness=3", "burstiness 3 applies to arrivals 'gamma' only"),
        ("sharegpt:burstiness=2", "burstiness 2 applies to arrivals 'gamma' only: arrivals 'poisson'"),
        ("sharegpt:arrivals=constant,burstiness=3", "burstiness 3 .* arrivals 'constant'"),
        (
            "sharegpt:arrivals=all-at-once,arrival_rate=3",
            "arrival_rate does nothing with arrivals=all-at-once",
        ),
        ("sharegpt:arrivals=all-at-once,time_scale=3", "time_scale does nothing with arrivals=all-at-once"),
    ],
)
def test_ignored_arrival_parameters_are_refused(spec, match):
    from kvsim.workloads.registry import make_workload, parse_workload

    name, params = parse_workload(spec)
    with pytest.raises(InvalidArgumentError, match=match):
        make_workload(name, params, 10, 0)


def test_read_arrival_parameters_are_taken():
    from kvsim.workloads.registry import make_workload, parse_workload

    for spec in (
        "sharegpt:arrivals=gamma,burstiness=3",
        "sharegpt:arrivals=poisson,burstiness=1",  # Poisson's own: the workload line says what ran
        "sharegpt:arrivals=all-at-once",
        "sharegpt:arrivals=all-at-once,turns=3,time_scale=2",  # the later turns are scaled
        "sharegpt:arrival_rate=3,time_scale=2",
    ):
        assert len(make_workload(*parse_workload(spec), 10, 0)) == 10, spec


def test_synthetic_refuses_a_burstiness_its_arrivals_ignore():
    with pytest.raises(InvalidArgumentError, match=r"^burstiness 3 applies to arrivals 'gamma' only"):
        synthetic(5, arrivals="poisson", burstiness=3.0)
    synthetic(5, arrivals="poisson", burstiness=1.0)
    synthetic(5, arrivals="gamma", burstiness=3.0)


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"num_requests": None}, "num_requests None must be an integer"),
        ({"num_requests": float("nan")}, "num_requests nan must be an integer"),
        ({"num_requests": 2.7}, "num_requests 2.7 must be an integer"),  # (it made 2 rows)
        ({"num_requests": True}, "num_requests True must be an integer"),
        ({"arrivals": "gamma", "burstiness": 1e-200}, "burstiness 1e-200 must lie in"),  # (ZeroDivisionError)
        ({"lengths": ["fixed"]}, "lengths ['fixed'] is not one of"),  # (unhashable: TypeError)
        (
            {"lengths": "fixed", "length_params": {"prompt_len": float("nan"), "output_len": 5}},
            "prompt_len nan",
        ),
        ({"lengths": "fixed", "length_params": {"prompt_len": "10", "output_len": 5}}, "prompt_len '10'"),
        ({"lengths": "uniform", "length_params": {"prompt_len": 5, "output_len": (1, 5)}}, "must be a range"),
        (
            {"lengths": "fixed", "length_params": {"prompt_len": 2**70, "output_len": 5}},
            "is more than",
        ),  # (wrapped)
        (
            {
                "lengths": "normal",
                "length_params": {"prompt_mean": 1e30, "prompt_std": 1, "output_mean": 5, "output_std": 1},
            },
            "draws prompt_len 1e+30",
        ),
        ({"max_model_len": "100"}, "max_model_len '100' must be an integer"),
        ({"num_system_prompts": 2.5}, "num_system_prompts 2.5 must be an integer"),
        ({"num_system_prompts": 3, "system_prompt_len": [5, 6]}, "gives 2 lengths for num_system_prompts 3"),
        ({"system_prompt_len": 5.7}, "system_prompt_len 5.7 must be an integer"),  # (it took 5)
        ({"sharing_ratio": "0.5"}, "sharing_ratio '0.5' must be a number"),
        ({"turns": 10**30}, "turns 1000000000000000000000000000000 must be at most"),  # (OverflowError)
        ({"turn_interval": "1"}, "turn_interval '1' must be a number"),
        ({"num_samples": 2.5}, "num_samples 2.5 must be an integer"),  # (it ran 2 samples)
        ({"first_request_id": 2.5}, "first_request_id 2.5 must be an integer"),
        ({"seed": -1}, "seed -1 must not be negative"),
    ],
)
def test_synthetic_refuses_what_it_cannot_take_by_name(kw, said):
    """Each of these raised a bare TypeError/ValueError/OverflowError/ZeroDivisionError, or was taken as
    something else (a float truncated, a wrapped int64), or made a table the engine refused later."""
    args = {"num_requests": 5, **kw}
    n = args.pop("num_requests")
    with pytest.raises(InvalidArgumentError, match=re.escape(said)):
        synthetic(n, **args)
    # Whole floats of tokens and one length per system prompt are taken.
    assert len(synthetic(3, lengths="fixed", length_params={"prompt_len": 400.0, "output_len": 5})) == 3


def test_save_load_and_from_polars_refuse_what_is_not_a_path_or_a_frame(tmp_path):
    """`save` into a missing folder raised FileNotFoundError, `save(None)`/`load(None)` TypeError,
    `from_polars` of a dict AttributeError and of a LazyFrame TypeError: each is one InvalidArgumentError."""
    w = synthetic(3)
    cases = [
        (lambda: w.save(tmp_path / "none" / "w.parquet"), "cannot write"),
        (lambda: w.save(None), "path None must be a file path"),
        (lambda: Workload.load(None), "path None must be a file path"),
        (lambda: Workload.from_polars({"arrival": [0.0]}), "frame is a dict, not a polars DataFrame"),
        (lambda: Workload.from_polars(w.to_polars().lazy()), "frame is a LazyFrame"),
    ]
    for call, said in cases:
        with pytest.raises(InvalidArgumentError, match=re.escape(said)):
            call()
    w.save(tmp_path / "w.parquet")
    assert Workload.load(tmp_path / "w.parquet").arrival.tolist() == w.arrival.tolist()
    with pytest.raises(InvalidArgumentError, match=r"^preset \['vllm-v0'\] is not one of"):
        kvsim.SimConfig.preset(["vllm-v0"])  # (unhashable: TypeError)
