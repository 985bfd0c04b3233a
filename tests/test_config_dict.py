"""`SimConfig`'s dictionaries (`kvsim.model.config_dict`): a configuration rebuilt from `to_dict()` or
`describe()` keeps its derived fields derived (a `replace` with another model takes that model's context and
pool), a given field stays given, `describe()` and `resolved()` show the effective values, and what
consumed the resolved values (sweep rows, `kvsim run --json`) still reads them."""

from __future__ import annotations

import json

import pytest

from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import SimConfig

H100 = {"gpu": "h100-80gb"}


def _rebuilt(cfg: SimConfig) -> dict[str, SimConfig]:
    """`cfg` rebuilt every documented way (`describe()` through JSON, as a saved result holds it)."""
    return {
        "to_dict": SimConfig(**cfg.to_dict()),
        "from_dict(to_dict)": SimConfig.from_dict(cfg.to_dict()),
        "from_dict(describe)": SimConfig.from_dict(cfg.describe()),
        "from_dict(describe, JSON)": SimConfig.from_dict(json.loads(json.dumps(cfg.describe()))),
    }


def test_a_derived_max_model_len_stays_derived_through_a_round_trip():
    cfg = SimConfig(model="llama-3-8b", **H100)
    newer = SimConfig(model="llama-3.1-8b", **H100)
    assert (cfg.max_model_len, newer.max_model_len) == (8192, 131072)  # (the models' contexts)
    for how, again in _rebuilt(cfg).items():
        assert again == cfg, how
        assert "max_model_len" in again.derived, how
        swapped = again.replace(model="llama-3.1-8b")
        assert swapped.max_model_len == 131072, how  # (the old model's 8192 was a default, not a choice)
        assert swapped == newer, how  # (its pool, batch limits and the rest derived for the new model too)


def test_a_given_max_model_len_stays_given_through_a_round_trip():
    cfg = SimConfig(model="llama-3-8b", max_model_len=4096, **H100)
    assert "max_model_len" not in cfg.derived
    assert "max_model_len" not in cfg.describe()["derived"]
    for how, again in _rebuilt(cfg).items():
        assert again == cfg, how
        assert again.replace(model="llama-3.1-8b").max_model_len == 4096, how
    # Given at the value it would default to, it is given all the same (replace keeps it).
    same = SimConfig(model="llama-3-8b", max_model_len=8192, **H100)
    assert "max_model_len" not in same.describe()["derived"]
    assert SimConfig.from_dict(same.describe()).replace(model="llama-3.1-8b").max_model_len == 8192


def test_describe_and_resolved_show_the_effective_values_to_dict_the_given_ones():
    cfg = SimConfig(model="llama-3-8b", **H100)
    described, resolved, given = cfg.describe(), cfg.resolved(), cfg.to_dict()
    assert described["max_model_len"] == resolved["max_model_len"] == 8192
    assert described["num_blocks"] == resolved["num_blocks"] == cfg.num_blocks > 0
    assert described["time_model"] == resolved["time_model"] == "roofline"
    assert given["max_model_len"] is None
    assert given["num_blocks"] is None
    assert given["time_model"] == "auto"
    assert {"max_model_len", "num_blocks", "time_model", "max_num_seqs", "max_num_batched_tokens"} <= set(
        described["derived"]
    )
    # (every field, the annotations, and the keys naming how)
    assert set(described) - {"derived", "given", "extra"} == set(resolved)
    # A rebuild from the resolved values alone makes them given: the old model's context sticks.
    assert SimConfig(**resolved).replace(model="llama-3.1-8b").max_model_len == 8192


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_blocks": 300},  # (nothing derived: no model)
        {"model": "opt-13b", "kv_cache_bytes": "12GiB", "swap_space_bytes": "4GiB", "preemption": "swap"},
        {"model": "llama-3-8b", "gpu": "h100-80gb", "time_model": "linear"},  # (coefficients derived)
        {"model": "llama-3-70b", "gpu": "h100-80gb", "tensor_parallel_size": 4, "block_size": 32},
    ],
)
def test_every_derived_field_is_derived_again(kwargs):
    """Whatever a configuration derived (a pool, CPU blocks from swap space, a linear model's coefficients)
    is derived again after a round trip, not frozen at the old value: a `replace` that changes what it is
    derived from changes it."""
    cfg = SimConfig(**kwargs)
    for how, again in _rebuilt(cfg).items():
        assert again == cfg, how
        assert again.derived == cfg.derived, how
        if cfg.model is not None:
            assert again.replace(max_model_len=2048) == cfg.replace(max_model_len=2048), how
    if "kv_cache_bytes" in kwargs:
        assert "cpu_blocks" in cfg.derived
        assert "num_blocks" in cfg.derived
        bigger = SimConfig.from_dict(cfg.describe()).replace(kv_cache_bytes="24GiB", swap_space_bytes="8GiB")
        fresh = SimConfig(**{**kwargs, "kv_cache_bytes": "24GiB", "swap_space_bytes": "8GiB"})
        assert bigger == fresh
        assert bigger.num_blocks > cfg.num_blocks
        assert bigger.cpu_blocks > cfg.cpu_blocks


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([("num_blocks", 100)], r"needs a mapping of fields"),
        ({"num_blocks": 100, "derived": "max_model_len"}, r"derived 'max_model_len' must be a list"),
        ({"num_blocks": 100, "derived": ["policy"]}, r"derived names 'policy', which is not a field"),
        ({"num_blocks": 100, "derived": [], "block_sise": 8}, r"'block_sise' is not a SimConfig field"),
    ],
)
def test_from_dict_refuses_what_it_cannot_read(data, match):
    with pytest.raises(InvalidArgumentError, match=match):
        SimConfig.from_dict(data)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            {"num_blocks": 5000},
            r"num_blocks 5000: derived names num_blocks, which this configuration derives as ",
        ),
        (
            {"num_blocks": "abc"},
            r"num_blocks 'abc' must be an integer.*a value given for a field derived names",
        ),
        ({"swap_ps_per_block": "1 ms"}, r"swap_ps_per_block '1 ms': derived names swap_ps_per_block"),
        (
            {"time_model": "linear"},
            r"time_model 'linear': derived names time_model, which this configuration ",
        ),
    ],
)
def test_from_dict_refuses_an_edited_derived_value(edit, match):
    """A value beside a name in `derived` that is not what the configuration derives would be dropped (the
    field is derived again): refused by name, never ignored."""
    described = SimConfig(model="llama-3.1-8b", **H100).describe()
    with pytest.raises(InvalidArgumentError, match=match):
        SimConfig.from_dict({**described, **edit})
    with pytest.raises(InvalidArgumentError, match=r"time_model 'bogus' is not one of .*derived names"):
        SimConfig.from_dict({"derived": ["time_model"], "time_model": "bogus", "num_blocks": 100})


def test_from_dict_takes_a_derived_value_in_any_form_it_reads():
    """The derived value as `describe()` writes it ('32.768 us'), as `resolved()` does (picoseconds), or
    unset (`to_dict()`'s None) rebuilds the same configuration."""
    cfg = SimConfig(model="llama-3.1-8b", **H100)
    described = cfg.describe()
    assert isinstance(described["swap_ps_per_block"], str)
    for value in (described["swap_ps_per_block"], cfg.swap_ps_per_block, None):
        assert SimConfig.from_dict({**described, "swap_ps_per_block": value}) == cfg
    assert SimConfig.from_dict({**described, "num_blocks": None, "time_model": "auto"}) == cfg
    assert SimConfig.from_dict({**cfg.resolved(), "derived": list(cfg.derived)}) == cfg


def test_the_annotations_survive_a_round_trip_but_identify_nothing():
    """`extra` (free-form annotations, read by no engine) is kept by `to_dict()` and `describe()`, so every
    rebuild has it; `resolved()` (a sweep point's id and its row's columns) leaves it out, as equality
    ignores it."""
    cfg = SimConfig(model="llama-3-8b", extra={"run": "baseline", "n": 3}, **H100)
    assert cfg.to_dict()["extra"] == cfg.describe()["extra"] == {"run": "baseline", "n": 3}
    for how, again in _rebuilt(cfg).items():
        assert again.extra == cfg.extra, how
    assert "extra" not in cfg.resolved()
    assert cfg.resolved() == SimConfig(model="llama-3-8b", **H100).resolved()
    cfg.to_dict()["extra"]["run"] = "changed"  # (a copy: the config's own annotations stay)
    assert cfg.extra["run"] == "baseline"


def test_described_config_in_run_json_rebuilds_the_run_config(capsys):
    """`kvsim run --json`'s (and `--save-result`'s) `config` shows the effective values and which were
    derived; `SimConfig.from_dict` reads it back to the run's configuration."""
    argv = ["run", "--requests", "5", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--json"]
    assert main(argv) == 0
    described = json.loads(capsys.readouterr().out)["config"]
    assert described["max_model_len"] == 8192
    assert "max_model_len" in described["derived"]
    assert SimConfig.from_dict(described) == SimConfig(model="llama-3-8b", **H100)
    assert main([*argv, "--max-model-len", "4096"]) == 0
    described = json.loads(capsys.readouterr().out)["config"]
    assert described["max_model_len"] == 4096
    assert "max_model_len" not in described["derived"]


def test_sweep_rows_keep_the_resolved_values():
    """A sweep row's config columns are the resolved values (`resolved()`), as before `to_dict()` became
    the given ones: a model's default context and the sized pool are in the row."""
    from kvsim.analysis.sweep import Point, run_point

    point = Point(
        config={"model": "llama-3-8b", "kv_cache_bytes": "1GiB"},
        workload="sharegpt",
        workload_params={},
        seed=0,
        requests=3,
    )
    row = run_point(point)
    cfg = point.sim_config()
    assert row["max_model_len"] == 8192
    assert row["num_blocks"] == cfg.num_blocks > 0
    assert "derived" not in row
