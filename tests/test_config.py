"""SimConfig validates and converts every field where it enters (issue 12 part 2), the one table of
defaults (KNOBS), sizing from a GPU, tensor parallelism, KV dtype and the pool line (issue 13 part 1)."""

from __future__ import annotations

import dataclasses
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import KNOBS, Knob, SimConfig

FIELDS = [f.name for f in dataclasses.fields(SimConfig)]


# -- issue 12 part 2: every reproducer ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"watermark": "abc"}, "watermark", "'abc'"),
        ({"watermark": None}, "watermark", "None"),
        ({"watermark": 10**400}, "watermark", "401 digits"),
        ({"watermark": "0.5"}, "watermark", "'0.5'"),
        ({"kv_cache_bytes": math.inf, "model": "opt-13b"}, "kv_cache_bytes", "inf"),
        ({"kv_cache_bytes": math.nan, "model": "opt-13b"}, "kv_cache_bytes", "nan"),
        ({"kv_cache_bytes": "x", "model": "opt-13b"}, "kv_cache_bytes", "'x'"),
        ({"model": 5}, "model", "5"),
        ({"c_ctx_ps": 1.25}, "c_ctx_ps", "1.25"),
        ({"kv_cache_bytes": 2**59, "model": "opt-13b", "num_blocks": None}, "kv_cache_bytes", "blocks"),
    ],
)
def test_issue_12_reproducers_name_the_field(kwargs, field, value):
    args = {"num_blocks": 16, **kwargs}
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(**args)
    msg = str(info.value)
    assert field in msg, msg
    assert value in msg, msg


def test_too_large_kv_cache_is_not_blamed_on_num_blocks():
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(model="opt-13b", kv_cache_bytes=2**59)
    assert str(info.value).startswith("kv_cache_bytes")
    assert "num_blocks" not in str(info.value)


def test_c_ctx_ps_is_checked_under_ticks_too():
    """A field the mode does not use is validated all the same."""
    with pytest.raises(InvalidArgumentError, match="c_ctx_ps"):
        SimConfig(num_blocks=16, time_model="ticks", c_ctx_ps=1.25)


def test_integral_floats_and_numpy_numbers_are_converted():
    import numpy as np

    cfg = SimConfig(
        num_blocks=np.int64(20), block_size=16.0, watermark=np.float32(0.5), iteration_time_ps=1e9
    )
    assert type(cfg.num_blocks) is int
    assert cfg.num_blocks == 20
    assert type(cfg.block_size) is int
    assert type(cfg.watermark) is float
    assert cfg.iteration_time_ps == 10**9


def test_units_are_accepted_where_a_field_takes_them():
    cfg = SimConfig(model="opt-13b", kv_cache_bytes="12GiB", iteration_time_ps="1ms", block_size=16)
    assert cfg.kv_cache_bytes == 12 * 2**30
    assert cfg.num_blocks == 983  # the paper's 15.7K token slots, the null block one of the 983 blocks
    assert cfg.iteration_time_ps == 10**9
    linear = SimConfig(num_blocks=4, time_model="linear", c0_ps="120us", c_tok_ps="1us", c_ctx_ps=0)
    assert linear.c0_ps == 120 * 10**6
    with pytest.raises(InvalidArgumentError, match="block_size '16'"):
        SimConfig(num_blocks=4, block_size="16")  # a count takes no string


def test_a_time_models_field_the_run_would_not_read_is_refused_by_name():
    """The linear coefficients under ticks (no time_model given, no model and GPU: ticks) or the roofline,
    and iteration_time_ps under the roofline, were taken and dropped: the run's clock ignored them."""
    with pytest.raises(InvalidArgumentError, match=r"^c0_ps 50 ms: only time_model 'linear'.*'ticks'"):
        SimConfig(num_blocks=100, c0_ps="50ms")
    with pytest.raises(InvalidArgumentError, match=r"^c_ctx_ps 1 ms: only .* time model is 'roofline'"):
        SimConfig(model="llama-3-8b", gpu="h100-80gb", c_ctx_ps="1ms")
    with pytest.raises(InvalidArgumentError, match=r"^iteration_time_ps 1 s: only time_model 'ticks'"):
        SimConfig(model="llama-3-8b", gpu="h100-80gb", iteration_time_ps="1s")
    ticks = SimConfig(num_blocks=100, iteration_time_ps="2ms")
    with pytest.raises(InvalidArgumentError, match=r"^iteration_time_ps 2 ms: .* time model is 'linear'"):
        ticks.replace(time_model="linear", c0_ps=1, c_tok_ps=1, c_ctx_ps=1)
    # What each reads is taken: linear's coefficients under linear, ticks' duration under ticks.
    assert (
        SimConfig(num_blocks=100, time_model="linear", c0_ps="50ms", c_tok_ps=0, c_ctx_ps=0).c0_ps
        == 5 * 10**10
    )
    assert ticks.iteration_time_ps == 2 * 10**9
    with pytest.raises(InvalidArgumentError, match="whole number of picoseconds"):
        SimConfig(num_blocks=4, iteration_time_ps="1.5ps")


# -- a generating property test per class of bad value --------------------------------------------------------
def _bad_values(kind: str, knob: Knob) -> st.SearchStrategy:
    wrong_objects = st.sampled_from([object(), [1], {"a": 1}, (1, 2), b"12", 1j])
    common = st.one_of(wrong_objects, st.just(None))
    if kind in ("int", "bytes", "duration"):
        return st.one_of(
            common,
            st.booleans(),
            st.floats(allow_nan=True, allow_infinity=True).filter(
                lambda x: not (math.isfinite(x) and x.is_integer())
            ),
            st.integers(min_value=2**61, max_value=10**500),
            st.integers(max_value=-1),
            st.text(alphabet="abcxyz!?", min_size=0, max_size=5),
        )
    if kind == "float":
        # Just outside the knob's bounds (its bound itself where the interval is open).
        below = knob.lo if knob.open_lo else knob.lo - 1.0
        above = [knob.hi if knob.open_hi else knob.hi + 1.0] if knob.hi < 1e300 else []
        return st.one_of(
            common,
            st.booleans(),
            st.sampled_from([math.nan, math.inf, -math.inf, 10**400, -(10**400), below, *above]),
            # a bandwidth takes text with its unit (`25GB/s`, or a number as text): text that is neither
            st.text(alphabet="abcxyz!?", max_size=5) if knob.unit == "B/s" else st.text(max_size=5),
        )
    if kind == "bool":
        return st.one_of(common, st.integers(), st.floats(), st.text(max_size=5))
    if kind == "choice":
        return st.one_of(common, st.booleans(), st.integers(), st.text(max_size=8))
    if kind == "seconds":
        return st.one_of(
            common,
            st.booleans(),
            st.sampled_from([math.nan, math.inf, -math.inf, -1, -0.5, 10**400, 1e-13]),
            st.text(alphabet="abcxyz!?", min_size=0, max_size=5),
        )
    if kind == "weights":
        return st.one_of(
            wrong_objects,
            st.booleans(),
            st.integers(),
            st.text(alphabet="abcxyz!?=,", max_size=6),
            st.sampled_from([{}, {"prefix": -1}, {"kv": math.nan}, {"queue": "1"}, {"prefix": True}]),
        )
    if kind in ("model", "gpu"):
        return st.one_of(
            wrong_objects, st.booleans(), st.integers(), st.text(alphabet="qwz", min_size=1, max_size=6)
        )
    return st.one_of(wrong_objects, st.booleans(), st.integers(), st.text(max_size=5))


CHECKED = [name for name in FIELDS if name != "extra"]


@pytest.mark.parametrize("name", CHECKED)
@given(data=st.data())
def test_bad_values_raise_invalid_argument_naming_the_field(name, data):
    kind = KNOBS[name].kind
    knob = KNOBS[name]
    value = data.draw(_bad_values(kind, knob))
    if value is None and (knob.optional or kind in ("model", "gpu")):
        return  # None means "derive it" for these
    if kind == "choice" and value in knob.choices:
        return
    if kind in ("int", "bytes", "duration") and isinstance(value, str):
        try:  # a valid size or duration text is a value, not a bad one
            from kvsim.model.units import parse_bytes, parse_duration_ps

            (parse_bytes if kind == "bytes" else parse_duration_ps)(name, value)
            if kind != "int":
                return
        except InvalidArgumentError:
            pass
    args: dict = {"num_blocks": 16}
    args[name] = value
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(**args)
    assert name in str(info.value), (name, value, str(info.value))


def test_knobs_table_is_every_field_and_its_default():
    assert list(KNOBS) == FIELDS
    cfg = SimConfig(num_blocks=16)
    derived = (
        "block_size",
        "num_blocks",
        "time_model",
        "swap_ps_per_block",
        "kv_offloading_ps_per_block",
        "max_num_seqs",
        "max_num_batched_tokens",
        "gpu_memory_utilization",
        "kv_cache_sizing",
    )
    for name in FIELDS:
        if name in (*derived, "extra"):
            continue
        assert getattr(cfg, name) == KNOBS[name].default, name
    # Unset, the share is vLLM 0.34.0's resolved one: 0.92 where the pool is not sized from measured memory,
    # as it is not with num_blocks given (vLLM leaves the extensible cache off under an override).
    assert (KNOBS["gpu_memory_utilization"].default, cfg.gpu_memory_utilization) == (None, 0.92)
    assert (KNOBS["kv_cache_sizing"].default, cfg.kv_cache_sizing) == (None, "profiled")
    sized = SimConfig(model="llama-3-8b", gpu="h100-80gb")
    assert (sized.kv_cache_sizing, sized.gpu_memory_utilization) == ("measured", 1.0)
    # Unset batch limits without a GPU are vLLM's defaults on a small GPU (its LLM class): 8192 and 256.
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (8192, 256)
    assert cfg.time_model == "ticks"  # auto without a model and a GPU
    assert cfg.block_size == 64  # unset: vLLM 0.34.0's default (an MLA model on some GPUs: its backend's)
    assert SimConfig(model="llama-3-8b", gpu="h100-80gb").time_model == "roofline"


# -- issue 13 part 1: sizing -----------------------------------------------------------------------------------
def test_naming_a_gpu_sizes_the_pool_vllm_s_way():
    """vLLM 0.33.0's profiled rule (`vllm-0.33`; 0.34.0's measured one, the default, is worked by hand in
    tests/test_measured_sizing.py)."""
    from kvsim.model.memory import NON_TORCH_BYTES, cudagraph_estimate
    from kvsim.model.sizing import activation_reserve_estimate

    cfg = SimConfig.preset("vllm-0.33", model="llama-3-8b", gpu="h100-80gb")
    m, g = kvsim.models.get("llama-3-8b"), kvsim.gpus.get("h100-80gb")
    # vllm serve's batch limits on an H100 (8192 tokens, 1024 sequences) size the profiling pass; vLLM also
    # keeps non-torch memory and (0.20.0 on) the CUDA graphs' estimate from the KV cache.
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (8192, 1024)
    reserve = activation_reserve_estimate(m, 8192, 1024) + NON_TORCH_BYTES + cudagraph_estimate(m, 1024, 8192)
    # The weights memory: the weights and the rotary cache (8,192 positions of 128 in bf16: 2 MiB).
    assert m.loaded_bytes == m.param_bytes + 2 * 2**20
    kv = math.floor(g.memory_bytes * 0.92) - m.loaded_bytes - reserve  # 0.92: vLLM 0.20.0 on (§Presets)
    assert cfg.num_blocks == kv // (16 * m.kv_bytes_per_token)  # (the null block one of them, as vLLM v1's)
    half = cfg.replace(gpu_memory_utilization=0.5)
    high = cfg.replace(gpu_memory_utilization=0.95)
    assert half.num_blocks < cfg.num_blocks < high.num_blocks
    assert cfg.replace(activation_reserve_bytes=0).num_blocks > cfg.num_blocks


def test_kv_cache_bytes_and_num_blocks_override_the_gpu():
    # (12 GiB in blocks of 64, 0.34.0's default: 12 × 2^30 // (64 × 819,200 B) = 245; the paper's 16: 983)
    assert SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes="12GiB").num_blocks == 245
    assert (
        SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes="12GiB", block_size=16).num_blocks == 983
    )
    assert SimConfig(model="opt-13b", gpu="a100-40gb", num_blocks=77).num_blocks == 77


def test_kv_cache_bytes_beyond_the_device_is_refused():
    """vLLM allocates `--kv-cache-memory-bytes` after the weights with no check: a cache that with the
    weights exceeds the device fails there (CUDA out of memory); one that fits is taken as it is."""
    on_gpu = SimConfig(model="llama-3-8b", gpu="h100-80gb").pool  # (its weights as vLLM loads them)
    assert on_gpu.memory_bytes is not None
    assert on_gpu.weight_bytes is not None
    room = on_gpu.memory_bytes - on_gpu.weight_bytes
    fits = SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_cache_bytes=room)
    assert fits.pool.kv_cache_bytes == room  # (no gpu_memory_utilization share: the flag ignores it)
    with pytest.raises(
        InvalidArgumentError, match=r"kv_cache_bytes .*exceeds h100-80gb's 79\.2 GiB.*out of memory"
    ):
        SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_cache_bytes=room + 1)
    # One GPU's cache (the flag is per GPU): 70 GiB fits beside a quarter of Llama-3-70B, not beside all.
    SimConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel_size=4, kv_cache_bytes="40GiB")
    with pytest.raises(InvalidArgumentError, match="llama-3-70b's weights"):
        SimConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel_size=2, kv_cache_bytes="40GiB")
    # Without a GPU nothing bounds it.
    assert SimConfig(model="llama-3-8b", kv_cache_bytes="200GiB").num_blocks > 0


def test_pool_line_says_what_memory_is_simulated():
    line = SimConfig(model="llama-3-8b", gpu="h100-80gb").pool.line()
    assert line.startswith("pool: ")
    n = SimConfig(model="llama-3-8b", gpu="h100-80gb").num_blocks
    assert f"{n:,} blocks × 64 tokens = {n * 64:,} tokens" in line  # (0.34.0's block, measured memory)
    assert "h100-80gb × 1.00 − 15.0 GiB weights − " in line
    assert (
        "h100-80gb × 0.92 − 15.0 GiB weights − "
        in SimConfig.preset("vllm-0.33", model="llama-3-8b", gpu="h100-80gb").pool.line()
    )
    assert (
        "h100-80gb × 0.90 − "
        in SimConfig.preset("vllm-0.19", model="llama-3-8b", gpu="h100-80gb").pool.line()
    )
    assert "GiB" in SimConfig(model="opt-13b", kv_cache_bytes="12GiB").pool.line()
    assert "no model" in SimConfig(num_blocks=150).pool.line()


def test_tensor_parallel_divides_weights_and_kv_heads():
    one = SimConfig(model="llama-3-8b", gpu="h100-80gb")
    two = SimConfig(model="llama-3-8b", gpu="h100-80gb", tensor_parallel_size=2)
    # Each GPU holds half the weights (and the whole rotary cache) and half the KV heads: more than twice
    # the tokens per GPU.
    assert two.pool.kv_bytes_per_token * 2 == one.pool.kv_bytes_per_token
    rope = one.pool.rope_cache_bytes
    assert rope == two.pool.rope_cache_bytes == 2 * 2**20
    assert (two.pool.weight_bytes - rope) * 2 == pytest.approx(one.pool.weight_bytes - rope, abs=2)
    assert two.num_blocks > 2 * one.num_blocks
    # The roofline prices one GPU's share: half the dense weights and FLOPs, half the KV heads read.
    r1, r2 = one.roofline, two.roofline
    assert r2.dense_mem_ps * 2 == pytest.approx(r1.dense_mem_ps, rel=1e-6)
    assert r2.dense_flop_tok_ps * 2 == pytest.approx(r1.dense_flop_tok_ps, rel=1e-6)
    assert r2.attention[0].kv_ps * 2 == pytest.approx(r1.attention[0].kv_ps, rel=1e-4)
    # ... and adds the all-reduces: 2 per layer of the hidden state, per token over NVLink, plus latency.
    assert r2.fixed_ps > r1.fixed_ps == 0
    lin1 = SimConfig(model="llama-3-8b", gpu="h100-80gb", time_model="linear")
    lin2 = SimConfig(model="llama-3-8b", gpu="h100-80gb", tensor_parallel_size=2, time_model="linear")
    assert lin2.c0_ps < lin1.c0_ps
    assert lin2.c_tok_ps < lin1.c_tok_ps
    assert "tp 2" in two.pool.line()


def test_a_70b_model_on_one_gpu_fails_with_a_clear_message():
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(model="llama-3-70b", gpu="h100-80gb")
    msg = str(info.value)
    assert "does not fit on h100-80gb" in msg
    # 131.4 GiB of weights exceed the 79.6 GiB device: vLLM fails while loading, and says what to do.
    assert "Failed to load model - not enough GPU memory" in msg
    assert "--tensor-parallel-size" in msg
    assert SimConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel_size=4).num_blocks > 1000


def test_weights_that_load_but_leave_no_kv_memory_get_vllm_s_refusal():
    """gpt-oss-120b's 61.1 GiB of weights (the Triton kernels' float32 biases and padded scales among them)
    load on an H100, but at a share of 0.77 (61.0 GiB) nothing is left for the activations and CUDA graphs,
    let alone the KV cache: vLLM's "No available memory for the cache blocks", with the numbers."""
    path = str(Path(__file__).parent / "data" / "hf" / "gpt-oss-120b.json")
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(model=path, gpu="h100-80gb", gpu_memory_utilization=0.77)
    msg = str(info.value)
    assert "No available memory for the cache blocks" in msg
    assert "61.1 GiB of weights" in msg
    # (measured sizing, the default: vLLM 0.34.0's hint with the extensible KV cache on, naming the share)
    assert (
        "within `gpu_memory_utilization`=0.77; increase it (with the extensible KV cache it defaults" in msg
    )
    assert "Try increasing" not in msg
    with pytest.raises(InvalidArgumentError, match="Try increasing `gpu_memory_utilization`; or raise"):
        SimConfig.preset("vllm-0.33", model=path, gpu="h100-80gb", gpu_memory_utilization=0.77)
    assert SimConfig(model=path, gpu="h100-80gb").num_blocks > 1000


def test_a_context_over_the_pool_gets_vllm_s_refusal_and_estimate():
    """Llama-3.1-8B's 131,072-token context needs 16 GiB of KV; an L4 leaves about 6 (the reservation of
    vLLM 0.34.0's measured sizing): vLLM refuses to start and names the longest context that fits, which
    it checks again on the blocks measured after warmup (fewer: the CUDA graphs and the margin are taken
    then), refusing it with the longest context those hold, which kvsim's --max-model-len then accepts at a
    concurrency of at least 1 (`tests/test_measured_sizing.py` works the figures by hand). The profiled pool
    (`vllm-0.33`) has the one check, whose estimate starts."""
    path = str(Path(__file__).parent / "data" / "hf" / "llama-3.1-8b.json")

    def estimate(msg: str) -> int:
        return int(msg.split("the estimated maximum model length is ")[1].split(".")[0])

    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(model=path, gpu="l4")
    msg = str(info.value)
    assert "To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache" in msg
    first = estimate(msg)
    assert 8192 < first < 131072
    with pytest.raises(InvalidArgumentError, match="in the blocks measured after warmup") as info:
        SimConfig(model=path, gpu="l4", max_model_len=first)
    fits = estimate(str(info.value))
    assert 8192 < fits < first
    cfg = SimConfig(model=path, gpu="l4", max_model_len=fits)
    assert cfg.pool.figures.max_concurrency >= 1
    with pytest.raises(InvalidArgumentError, match="max seq len"):
        SimConfig(model=path, gpu="l4", max_model_len=fits + cfg.pool.layout.block_size)
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig.preset("vllm-0.33", model=path, gpu="l4")
    old = estimate(str(info.value))
    assert (
        SimConfig.preset("vllm-0.33", model=path, gpu="l4", max_model_len=old).pool.figures.max_concurrency
        >= 1
    )
    with pytest.raises(InvalidArgumentError, match="max seq len"):
        SimConfig.preset("vllm-0.33", model=path, gpu="l4", max_model_len=old + 16)


def test_tensor_parallel_must_divide_the_heads():
    with pytest.raises(InvalidArgumentError, match="tensor_parallel_size 3"):
        SimConfig(model="llama-3-8b", gpu="h100-80gb", tensor_parallel_size=3)


def test_fp8_kv_cache_doubles_the_tokens():
    bf16 = SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB")
    fp8 = SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="fp8")
    assert fp8.num_blocks == 2 * bf16.num_blocks
    with pytest.raises(InvalidArgumentError, match="kv_cache_dtype 'int3'"):
        SimConfig(num_blocks=4, kv_cache_dtype="int3")


def test_swap_space_is_converted_to_blocks_with_the_model():
    cfg = SimConfig(model="opt-13b", kv_cache_bytes="12GiB", swap_space_bytes="4GiB", preemption="swap")
    assert cfg.cpu_blocks == 4 * 2**30 // (64 * 819_200)  # (blocks of 64, 0.34.0's default: 81)
    with pytest.raises(InvalidArgumentError, match="needs a model"):
        SimConfig(num_blocks=10, swap_space_bytes="4GiB")
    v0 = SimConfig.preset("vllm-v0", model="opt-13b", kv_cache_bytes="12GiB")
    assert v0.cpu_blocks == 327


def test_replace_derives_the_pool_again():
    cfg = SimConfig(model="opt-13b", kv_cache_bytes="12GiB")
    assert cfg.replace(block_size=32).num_blocks == 12 * 2**30 // (32 * 819_200)
    assert SimConfig(num_blocks=50).replace(block_size=32).num_blocks == 50


def test_configs_pickle_with_their_pool():
    cfg = SimConfig(model="opt-13b", kv_cache_bytes="12GiB")
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg
    assert back.pool.line() == cfg.pool.line()


def test_describe_uses_human_units():
    d = SimConfig(model="opt-13b", kv_cache_bytes="12GiB").describe()
    assert d["kv_cache_bytes"] == "12 GiB"
    assert d["iteration_time_ps"] == "1 ms"


def test_design_md_defaults_table_is_the_knobs_table():
    """DESIGN.md §Defaults documents the defaults in one table; it must say what KNOBS says."""
    from pathlib import Path

    from kvsim.cli.flags import _fmt_default

    text = (Path(__file__).parent.parent / "DESIGN.md").read_text()
    section = text.split("## Defaults and sizing", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[2].strip()
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert set(rows) == {name for name in KNOBS if name != "extra"}
    for name, shown in rows.items():
        assert shown == (_fmt_default(name) or "unset"), name


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": "llama-3-8b", "gpu": "h100-80gb"},
        {
            "model": "opt-13b",
            "kv_cache_bytes": 12_345_678_901,
            "time_model": "ticks",
            "iteration_time_ps": 1_234_567,
        },
        {"model": "llama-3-70b", "gpu": "h100-80gb", "tensor_parallel_size": 4, "swap_space_bytes": "1.5GiB"},
    ],
)
def test_describe_reproduces_the_configuration(kwargs):
    """Saved results carry `describe()`: its human units must read back to the same configuration
    (a rounded `11.5 GiB` or `1.235 us` would not), its derived fields derived again
    (tests/test_config_dict.py)."""
    cfg = SimConfig(**kwargs)
    described = cfg.describe()
    again = SimConfig.from_dict(described)
    assert again.resolved() == cfg.resolved()
    assert again.to_dict() == cfg.to_dict()
    # Every value as shown, the derived ones given, reads back to the same resolved configuration too.
    shown = {
        k: v for k, v in described.items() if v is not None and k not in ("derived", "given", "cpu_blocks")
    }
    assert SimConfig(**shown).resolved() == cfg.resolved()


def test_cpu_blocks_and_swap_space_together_name_the_field():
    with pytest.raises(InvalidArgumentError, match=r"^swap_space_bytes .* give one of them"):
        SimConfig(model="opt-13b", num_blocks=100, swap_space_bytes="4GiB", cpu_blocks=10)


def test_vllm_kv_cache_dtype_spellings():
    """vLLM's --kv-cache-dtype takes `bfloat16`; it is kvsim's `bf16`."""
    a = SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="bfloat16")
    b = SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="bf16")
    assert a.num_blocks == b.num_blocks == SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB").num_blocks
    assert a == b  # one configuration (sweeps give it one point id)
    assert a.kv_cache_dtype == "bf16"
    # vLLM 0.33.0's CacheDType also has float16 (once refused here, where fp16 was asked for) and the fp8s.
    c = SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="float16")
    assert c == SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="fp16")
    assert c.kv_cache_dtype == "fp16"
    assert c.num_blocks == a.num_blocks
    halves = {
        SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype=d).num_blocks
        for d in ("fp8", "fp8_e4m3", "fp8_e5m2")
    }
    assert halves == {2 * a.num_blocks}
    # NVFP4: 32 layers × 8 KV heads × (K + V) × (128 // 2 + 128 // 16) bytes = 36,864 a token (9/32 of bf16's)
    q = SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="nvfp4")
    assert q.num_blocks == 10 * 2**30 // (q.block_size * 32 * 8 * 2 * 72)
    with pytest.raises(InvalidArgumentError, match="kv_cache_dtype 'fp8_inc' is not one of"):
        SimConfig(model="llama-3-8b", kv_cache_bytes="10GiB", kv_cache_dtype="fp8_inc")


def test_an_unknown_field_is_kvsims_error_with_a_suggestion():
    with pytest.raises(
        InvalidArgumentError, match=r"'block_sise' is not a SimConfig field \(did you mean block_size"
    ):
        SimConfig(num_blocks=100, block_sise=32)
    with pytest.raises(InvalidArgumentError, match="'blok' is not a SimConfig field"):
        SimConfig(num_blocks=100).replace(blok=3)
    with pytest.raises(InvalidArgumentError, match="'x' is not a SimConfig field"):
        SimConfig.preset("vllm-v1", num_blocks=100, x=1)


def test_a_serve_batch_rule_without_a_gpu_is_accepted_by_the_api():
    """The CLIs refuse `--batch-rule serve-*` given without a GPU (it does nothing there); `SimConfig` takes
    it, as it must: the presets before 0.28.0 set `serve-0.9` whatever the pool (a pool in blocks, no GPU),
    the default rule is itself `serve-0.28`, and `SimConfig(**c.to_dict())` is `c`. Without a GPU the
    unset limits are 8192 tokens and 256 sequences under every serve rule."""
    old = SimConfig.preset("vllm-v1", num_blocks=300)
    assert (old.batch_rule, old.gpu) == ("serve-0.9", None)
    assert SimConfig(**old.to_dict()) == old
    assert SimConfig.from_dict(old.describe()) == old
    for rule in ("serve-0.9", "serve-0.28"):
        c = SimConfig(num_blocks=300, batch_rule=rule)
        assert (c.max_num_batched_tokens, c.max_num_seqs) == (8192, 256)
    v0 = SimConfig(num_blocks=300, batch_rule="v0", max_model_len=4096)
    assert (v0.max_num_batched_tokens, v0.max_num_seqs) == (4096, 256)


# -- data and expert parallelism where kvsim models nothing of them ------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (
            {"model": "llama-3-8b", "gpu": "h100-80gb", "data_parallel_size": 2},
            "^data_parallel_size 2: model llama-3-8b is dense.*replicas 2",
        ),
        ({"num_blocks": 64, "data_parallel_size": 2}, "^data_parallel_size 2: no model is given"),
        (
            {"model": "llama-3-8b", "gpu": "h100-80gb", "enable_expert_parallel": True},
            "^enable_expert_parallel: model llama-3-8b is dense",
        ),
        ({"num_blocks": 64, "enable_expert_parallel": True}, "^enable_expert_parallel: no model is given"),
    ],
)
def test_parallelism_kvsim_does_not_model_is_refused(kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        SimConfig(**kw)


def test_expert_parallelism_on_a_moe_model_is_taken():
    ep = SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=2, enable_expert_parallel=True)
    plain = SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb")
    assert ep.num_blocks != plain.num_blocks  # the experts spread over 2 GPUs
    SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", enable_expert_parallel=True)
    # Without expert parallelism vLLM splits each expert over the tp x dp GPUs (tests/test_shard.py).
    dp = SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=2)
    assert dp.num_blocks == ep.num_blocks


def test_a_budget_below_the_context_without_chunked_prefill_is_refused_as_vllm_refuses_it():
    """vLLM 0.33.0's `SchedulerConfig.verify_max_model_len`: with chunked prefill off a budget below
    max_model_len never starts a server; kvsim simulated it and rejected every longer prompt. A pool in
    blocks (no GPU named: kvsim's own experiments) still runs any pair, and a defaulted budget is raised to
    the context as vLLM raises it."""
    with pytest.raises(
        InvalidArgumentError, match=r"max_num_batched_tokens \(2048\) is smaller than max_model_len"
    ):
        SimConfig(
            model="llama-3.1-8b",
            gpu="h100-80gb",
            chunked_prefill=False,
            max_num_batched_tokens=2048,
            max_num_seqs=64,
            max_model_len=8192,
        )
    with pytest.raises(InvalidArgumentError, match=r"smaller than max_model_len \(131072\)"):  # (its default)
        SimConfig(model="llama-3.1-8b", gpu="h100-80gb", chunked_prefill=False, max_num_batched_tokens=8192)
    ok = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", chunked_prefill=False, max_model_len=8192)
    assert ok.max_num_batched_tokens == 8192
    assert SimConfig(num_blocks=100, chunked_prefill=False, max_num_batched_tokens=512, max_model_len=4096)


def test_an_mla_models_unset_block_size_is_its_backends():
    """vLLM 0.33.0 gives an unset --block-size the preferred size of the attention backend it picks
    (`_preferred_block_size_for_backends`): FlashInfer's MLA backend (blocks of 32 or 64) on a B200,
    FlashMLA's (64) on an H200 with an fp8 KV cache; kvsim kept 16, twice the blocks vLLM allocates. (0.33.0's
    offered 16, `default_block_size` 16; under 0.34.0's 64: tests/test_block_default.py.)"""
    base = {
        "model": "deepseek-v3",
        "tensor_parallel_size": 8,
        "max_model_len": 32768,
        "default_block_size": 16,
    }
    b200 = SimConfig(gpu="b200", **base)
    assert b200.block_size == 32
    sixteen = SimConfig(gpu="b200", block_size=16, **base)  # (given: kept)
    assert (sixteen.block_size, sixteen.num_blocks // 2) == (
        16,
        b200.num_blocks,
    )  # (whole blocks of the bytes, the null block one of them)
    assert SimConfig(gpu="h200", **base).block_size == 16
    assert SimConfig(gpu="h200", kv_cache_dtype="fp8", **base).block_size == 64
    assert SimConfig(gpu="mi300x", **base).block_size == 16
    assert b200.replace(gpu="h200").block_size == 16  # (derived again, as num_blocks)
    assert SimConfig(model="llama-3.1-8b", gpu="b200", default_block_size=16).block_size == 16  # (not MLA)
    with pytest.raises(InvalidArgumentError, match="fp8_e5m2 on an MLA model"):
        SimConfig(gpu="b200", kv_cache_dtype="fp8_e5m2", **base)
    with pytest.raises(InvalidArgumentError, match="qk_nope_head_dim 1 is not one"):
        SimConfig(
            gpu="b200",
            model=kvsim.models.get("deepseek-v3").__class__(
                **{**vars(kvsim.models.get("deepseek-v3")), "qk_nope_head_dim": 0}
            ),
            tensor_parallel_size=8,
            max_model_len=32768,
        )
