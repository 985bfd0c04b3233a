"""kvsim.model.units: the one parser of sizes and durations (SimConfig fields, `kvsim run` flags, sweep values)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvsim.analysis.sweep import check_grid, coerce
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import SIZE_UNITS, TIME_UNITS, parse_bytes, parse_duration_ps


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12GiB", 12 * 2**30), ("12 gib", 12 * 2**30), ("1.5GB", 1_500_000_000), ("512", 512), ("2KiB", 2048)],
)
def test_sizes(text, expected):
    assert parse_bytes("kv_cache_bytes", text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5ms", 5 * 10**9),
        ("120us", 120 * 10**6),
        ("120µs", 120 * 10**6),
        ("1.5ns", 1500),
        ("1s", 10**12),
        ("7", 7),
    ],
)
def test_durations(text, expected):
    assert parse_duration_ps("c0_ps", text) == expected


@given(n=st.integers(0, 10**6), unit=st.sampled_from(sorted(SIZE_UNITS)))
def test_every_size_unit_scales_exactly(n, unit):
    assert parse_bytes("x", f"{n}{unit}") == n * SIZE_UNITS[unit]


@given(n=st.integers(0, 10**6), unit=st.sampled_from(sorted(TIME_UNITS)))
def test_every_time_unit_scales_exactly(n, unit):
    assert parse_duration_ps("x", f"{n}{unit}") == n * TIME_UNITS[unit]


@given(
    bad=st.one_of(
        st.text(alphabet="abcxyz!?-+ ", max_size=6).filter(lambda t: t.strip() not in ("",)),
        st.sampled_from(["-1GiB", "1.5ps", "0.5B", "nan", "inf", "12 XB", "", "GiB", "5 parsecs"]),
        st.floats(allow_nan=True).filter(lambda f: not (math.isfinite(f) and f >= 0 and f.is_integer())),
        st.booleans(),
        st.none(),
    )
)
def test_bad_sizes_and_durations_name_the_field(bad):
    if isinstance(bad, str) and bad.strip().replace(".", "", 1).isdigit():
        return  # a bare number is a value in both syntaxes
    for parse in (parse_bytes, parse_duration_ps):
        with pytest.raises(InvalidArgumentError, match=r"^the_field"):
            parse("the_field", bad)


def test_sweep_values_go_through_the_same_parser():
    assert coerce("kv_cache_bytes", "12GiB") == 12 * 2**30
    assert coerce("iteration_time_ps", "2ms") == 2 * 10**9
    assert coerce("max_model_len", "none") is None
    assert check_grid({"kv_cache_bytes": ["8GiB", "12GiB"]}) == {"kv_cache_bytes": [8 * 2**30, 12 * 2**30]}


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (
            {"workload.arrival_rate": ["abc"]},
            "^--grid workload.arrival_rate: arrival_rate 'abc' must be a number",
        ),
        ({"workload.turns": [1.5]}, "turns 1.5 must be a whole number"),
        ({"workload.num_samples": ["abc"]}, "num_samples 'abc'"),
        ({"kv_cache_bytes": ["12XB"]}, "--grid kv_cache_bytes: kv_cache_bytes '12XB'"),
        ({"watermark": [True]}, "watermark True must be a number"),
    ],
)
def test_bad_grid_values_fail_naming_the_parameter(grid, match):
    with pytest.raises(InvalidArgumentError, match=match):
        check_grid(grid)


@given(st.integers(min_value=0, max_value=2**62))
def test_exact_forms_read_back_to_the_same_number(n):
    """What `SimConfig.describe()` (and so `--json` / `--save-result`) writes parses back exactly."""
    from kvsim.model.units import exact_bytes, exact_duration_ps

    assert parse_bytes("kv_cache_bytes", exact_bytes(n)) == n
    assert parse_duration_ps("c0_ps", exact_duration_ps(n)) == n


def test_exact_forms_are_human():
    from kvsim.model.units import exact_bytes, exact_duration_ps

    assert exact_bytes(12 * 2**30) == "12 GiB"
    assert exact_bytes(10**12) == "1 TB"
    assert exact_bytes(60_038_674_841) == "60.038674841 GB"
    assert exact_bytes(512) == "512 B"
    assert exact_duration_ps(10**9) == "1 ms"
    assert exact_duration_ps(4_793_827_261) == "4.793827261 ms"


@pytest.mark.parametrize(
    "text", ["1e999999999999", "-1e999999999999", "1e999999", "1e41", "1e999999999999GiB"]
)
def test_huge_exponents_are_out_of_range(text):
    """Decimal overflow (or a million-digit integer) must not escape the parser."""
    with pytest.raises(InvalidArgumentError, match="out of range"):
        parse_bytes("kv_cache_bytes", text)
    if not text.endswith("GiB"):
        with pytest.raises(InvalidArgumentError, match="out of range"):
            parse_duration_ps("c0_ps", text)


def test_a_tiny_exponent_is_not_a_whole_number():
    with pytest.raises(InvalidArgumentError, match="not a whole number"):
        parse_bytes("kv_cache_bytes", "1e-999999999")


@pytest.mark.parametrize(
    ("power", "binary", "decimal"), [(1, "KiB", "kB"), (2, "MiB", "MB"), (3, "GiB", "GB"), (4, "TiB", "TB")]
)
def test_the_units_written_are_those_parsed(power, binary, decimal):
    """The formatters write each unit as spelled here, at the scale the parser reads it at (one table)."""
    from kvsim.model.units import exact_bytes, fmt_bytes, fmt_bytes_exact

    n = 3 * 1024**power
    assert fmt_bytes(n) == f"3.0 {binary}"
    assert fmt_bytes_exact(n + 1024 ** (power - 1) * 256) == f"3.25 {binary}"
    assert exact_bytes(n) == f"3 {binary}"
    assert exact_bytes(7 * 1000**power + 1).endswith(f" {decimal}")
    assert parse_bytes("x", exact_bytes(7 * 1000**power + 1)) == 7 * 1000**power + 1
    assert parse_bytes("x", f"3{binary}") == n
