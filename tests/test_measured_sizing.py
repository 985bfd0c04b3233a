"""`kv_cache_sizing` "measured": vLLM 0.34.0's KV cache sized from the memory measured after warmup
(`measure_kv_cache_bytes`, `vllm/v1/worker/extensible_kv_cache.py`), from kvsim's memory terms (DESIGN.md
§Defaults and sizing, "Measured sizing")."""

from __future__ import annotations

import math
import pickle

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus
from kvsim.model.config import KNOBS, SimConfig
from kvsim.model.measured import measure_kv_cache_bytes

GIB = 1 << 30


def test_the_formula_is_vllms():
    """80 GiB free at start, 20 GiB in use after warmup (none of it KV), a 2 GiB transient peak: the margin is
    max(1 GiB, 0.75 × 2 GiB) = 1.5 GiB; min(80 − 20, 60 − 1.5) − 2 = 56.5 GiB. With 4 GiB of blocks committed
    the same memory is the same cache (they count as headroom, not as in use); a budget of 70 GiB binds
    first: 70 − 20 − 2 = 48; a peak of 0.5 GiB keeps the 1 GiB floor: 60 − 1 − 0.5 = 58.5; never negative."""
    base = {"init_free_memory": 80 * GIB, "requested_memory": 80 * GIB}
    assert measure_kv_cache_bytes(
        free_memory=60 * GIB, committed_bytes=0, transient_peak_bytes=2 * GIB, **base
    ) == (113 * GIB // 2)
    assert measure_kv_cache_bytes(
        free_memory=56 * GIB, committed_bytes=4 * GIB, transient_peak_bytes=2 * GIB, **base
    ) == (113 * GIB // 2)
    capped = {**base, "requested_memory": 70 * GIB}
    assert measure_kv_cache_bytes(
        free_memory=60 * GIB, committed_bytes=0, transient_peak_bytes=2 * GIB, **capped
    ) == (48 * GIB)
    assert measure_kv_cache_bytes(
        free_memory=60 * GIB, committed_bytes=0, transient_peak_bytes=GIB // 2, **base
    ) == (117 * GIB // 2)
    assert (
        measure_kv_cache_bytes(free_memory=GIB, committed_bytes=0, transient_peak_bytes=2 * GIB, **base) == 0
    )
    # the torch reserve growth is kept free where it is the larger (kvsim takes none)
    assert measure_kv_cache_bytes(
        free_memory=60 * GIB,
        committed_bytes=0,
        transient_peak_bytes=2 * GIB,
        torch_reserve_growth_bytes=3 * GIB,
        **base,
    ) == (111 * GIB // 2)


def test_the_default_is_measured_as_vllm_0_34_settles_it_and_0_33_is_profiled():
    """Unset, as vLLM 0.34.0's `enable_extensible_kv_cache`: on for a pool sized from a CUDA GPU, its share
    1.0; `vllm-0.33` sizes as 0.33.0 did (three start-up lines, no measurement, 0.92)."""
    assert KNOBS["kv_cache_sizing"].default is None
    c = SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    assert (c.kv_cache_sizing, c.gpu_memory_utilization) == ("measured", 1.0)
    assert c.pool.measured is not None
    assert c == SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_cache_sizing="measured")
    assert "kv_cache_sizing" in c.derived
    assert c.to_dict()["kv_cache_sizing"] is None
    old = SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb")
    assert (old.kv_cache_sizing, old.gpu_memory_utilization, old.pool.measured) == ("profiled", 0.92, None)
    assert len(old.pool.figures.lines()) == 3
    # vLLM leaves it off, unset, for a disaggregated fleet on CUDA (no IMEX channel) and with a size given
    pd = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", replicas=2, prefill_replicas=1)
    assert (pd.kv_cache_sizing, pd.gpu_memory_utilization) == ("profiled", 0.92)
    assert SimConfig(model="llama-3.1-8b", gpu="h100-80gb", num_blocks=900).kv_cache_sizing == "profiled"


def test_llama_3_1_8b_on_an_h100_by_hand():
    """Llama-3.1-8B on an H100 (T = 79.19 GiB): after warmup the weights W, non-torch memory N and the CUDA
    graphs G stay in use, and the activation peak A is kept free (kvsim's estimates, the profiled terms).
    An unset utilization is 1.0, so the budget T − (W + N + G) is above the device's headroom less the
    margin, max(1 GiB, 0.75 A) = 0.75 × 1.9 GiB: KV = T − (W + N + G) − 0.75 A − A, cut into blocks of
    16 × 131,072 B; the reservation ("Available KV cache memory") is 0.33.0's rule at 1.0 without the CUDA
    graphs (vLLM 0.34.0 estimates none under it: the capture is measured after warmup), T − W − A − N. The
    profiled pool, at 0.92, has 0.08 T − 0.75 A less memory."""
    prof = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_cache_sizing="profiled", default_block_size=16)
    meas = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_cache_sizing="measured", default_block_size=16)
    p = meas.pool
    t = gpus.get("h100-80gb").memory_bytes
    w, n, g, a = p.weight_bytes, p.non_torch_bytes, p.cudagraph_bytes, p.activation_reserve_bytes
    assert (w, n, g, a) == (
        prof.pool.weight_bytes,
        prof.pool.non_torch_bytes,
        prof.pool.cudagraph_bytes,
        prof.pool.activation_reserve_bytes,
    )
    margin = max(GIB, int(0.75 * a))
    assert margin == int(0.75 * a)  # (A is 1.9 GiB)
    kv = t - (w + n + g) - margin - a
    assert meas.gpu_memory_utilization == 1.0
    assert p.measured is not None
    assert p.measured.kv_bytes == kv
    assert p.figures.available_kv_bytes == t - w - a - n  # the reservation
    assert p.kv_cache_bytes == kv
    assert meas.num_blocks == kv // (16 * 131_072)
    assert prof.num_blocks == (math.floor(t * 0.92) - w - a - n - g) // (16 * 131_072)
    assert meas.num_blocks > prof.num_blocks
    assert (meas.num_blocks - prof.num_blocks) * 16 * 131_072 == pytest.approx(
        0.08 * t - margin, abs=2 * 2**21
    )
    lines = p.figures.lines()
    assert lines[1] == f"Available KV cache memory: {round((t - w - a - n) / GIB, 2)} GiB"
    assert lines[2].startswith(f"Memory after warmup: {round((t - w - n - g) / GIB, 2)} GiB free")
    assert f"; {meas.num_blocks} KV cache blocks" in lines[2]
    assert lines[3].startswith(f"GPU KV cache size: {meas.num_blocks * 16:,} tokens")
    assert (
        lines[4] == f"Extended KV cache to {meas.num_blocks} blocks ({meas.num_blocks * 2 / 1024:.2f} GiB)."
    )
    assert "1.00 − " in p.line()
    assert "margin (measured after warmup, vLLM 0.34.0)" in p.line()
    # the defaults, 0.34.0's, with its block of 64 too: the same bytes, blocks of 8 MiB (7,663)
    both = SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    assert both.num_blocks == kv // (64 * 131_072)


def test_a_utilization_given_caps_the_budget_and_vllm_warns():
    """Given 0.9, the budget 0.9 T − (W + N + G) binds before the headroom less the margin: KV = ceil(0.9 T) −
    (W + N + G) − A, 0.33.0's profiled bytes at 0.9 (kvsim's floor of 0.9 T against vLLM's ceil: at most a
    byte apart) and G below the reservation, which counts no CUDA graphs; vLLM warns that 0.9 keeps memory out of the cache. 0.92 given caps it the same
    way (vLLM's `resolved_gpu_memory_utilization` reads only an unset one as 1.0): ceil(0.92 T) − (W + N + G) − A."""
    c = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", gpu_memory_utilization=0.9, default_block_size=16)
    p = c.pool
    t = gpus.get("h100-80gb").memory_bytes
    assert p.measured is not None
    kv = (
        math.ceil(t * 0.9)
        - (p.weight_bytes + p.non_torch_bytes + p.cudagraph_bytes)
        - p.activation_reserve_bytes
    )
    assert p.measured.kv_bytes == kv
    assert c.num_blocks == min(kv, p.figures.available_kv_bytes) // (16 * 131_072)
    lines = p.figures.lines()
    assert lines[2].startswith("gpu_memory_utilization=0.9 caps this instance at ")
    withheld = (t - p.measured.non_kv_bytes - p.measured.margin_bytes - p.activation_reserve_bytes) - kv
    assert f"keeping {round(withheld / GIB, 2)} GiB of free device memory out" in lines[2]
    assert "margin" not in p.line()
    given = SimConfig(
        model="llama-3.1-8b", gpu="h100-80gb", gpu_memory_utilization=0.92, default_block_size=16
    )
    assert given.gpu_memory_utilization == 0.92
    q = given.pool
    assert q.measured is not None
    kv92 = (
        math.ceil(t * 0.92)
        - (q.weight_bytes + q.non_torch_bytes + q.cudagraph_bytes)
        - q.activation_reserve_bytes
    )
    assert q.measured.kv_bytes == kv92
    assert given.num_blocks == min(kv92, q.figures.available_kv_bytes) // (16 * 131_072)
    unset = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", default_block_size=16)
    assert (unset.gpu_memory_utilization, unset.to_dict()["gpu_memory_utilization"]) == (1.0, None)
    assert given.num_blocks < unset.num_blocks


def test_an_mla_model_keeps_three_quarters_of_its_peak_as_margin():
    """DeepSeek-V3 at tp 8 on H200s: a 3.7 GiB activation peak, so a margin of 0.75 × A (above the 1 GiB
    floor); the blocks are 64 × 61 × 576 × 2 = 4,497,408 B (FlashAttention MLA takes 0.34.0's 64)."""
    c = SimConfig(
        model="deepseek-v3",
        gpu="h200",
        tensor_parallel_size=8,
        max_model_len=32768,
        kv_cache_sizing="measured",
    )
    p = c.pool
    m = p.measured
    assert m is not None
    t = gpus.get("h200").memory_bytes
    a = p.activation_reserve_bytes
    assert m.margin_bytes == int(0.75 * a) > GIB
    assert m.kv_bytes == t - (p.weight_bytes + p.non_torch_bytes + p.cudagraph_bytes) - int(0.75 * a) - a
    assert c.block_size == 64
    assert c.num_blocks == m.kv_bytes // (64 * 61 * 576 * 2)


def test_a_mamba_hybrids_blocks_are_its_layouts():
    """Qwen3-Next-80B-A3B at tp 4 on H100s: four groups of 12 layers (12 full-attention, 36 gated-delta-net
    states padded to the attention page) share the block ids, and a block takes one 320-token page of
    1,024 B a token in each of a group's 12 layers: 12 × 320 × 1,024 B = 3.75 MiB (`layout.bytes_per_block`,
    vLLM's `bytes_per_block`, the sum of the segments' strides); the measured bytes are cut into those."""
    c = SimConfig(
        model="qwen3-next-80b-a3b",
        gpu="h100-80gb",
        tensor_parallel_size=4,
        max_model_len=32768,
        kv_cache_sizing="measured",
    )
    p = c.pool
    assert p.measured is not None
    assert p.layout is not None
    assert p.layout.bytes_per_block == 12 * 320 * 1024
    assert c.num_blocks == p.measured.kv_bytes // p.layout.bytes_per_block
    assert p.measured.bytes_per_block == p.layout.bytes_per_block


def test_rocm_keeps_a_3_gib_margin():
    """On ROCm the margin's floor is 3 GiB (`KV_CACHE_MARGIN_FLOOR_BYTES`), above Llama-3.1-8B's 0.75 × 1.9."""
    c = SimConfig(model="llama-3.1-8b", gpu="mi300x", kv_cache_sizing="measured")
    p = c.pool
    assert p.measured is not None
    assert p.measured.margin_bytes == 3 * GIB
    t = gpus.get("mi300x").memory_bytes
    assert p.measured.kv_bytes == t - p.measured.non_kv_bytes - 3 * GIB - p.activation_reserve_bytes


def test_vllm_turns_it_off_where_the_size_is_given():
    """`_resolve_extensible_kv_cache`: `--kv-cache-memory-bytes` or `--num-gpu-blocks-override` given, or on
    ROCm NIXL's connector (a disaggregated fleet): the profiled rule, an unset utilization 0.92; on CUDA a
    disaggregated fleet given it keeps it on (vLLM warns of the missing IMEX channel: tests/test_pd_imex.py)."""
    base = {"model": "llama-3.1-8b", "kv_cache_sizing": "measured"}
    kv = SimConfig(gpu="h100-80gb", kv_cache_bytes="20GiB", **base)
    assert (kv.measured_sizing_on, kv.pool.measured, kv.gpu_memory_utilization) == (
        False,
        None,
        0.92,
    )
    blocks = SimConfig(gpu="h100-80gb", num_blocks=5000, **base)
    assert (blocks.measured_sizing_on, blocks.num_blocks) == (False, 5000)
    assert SimConfig(num_blocks=100, kv_cache_sizing="measured").pool.measured is None
    rocm_pd = SimConfig(gpu="mi300x", prefill_replicas=1, replicas=2, **base)
    assert not rocm_pd.measured_sizing_on
    # on CUDA vLLM keeps it on beside NIXL when asked, with or without an IMEX channel (it warns without one)
    assert SimConfig(gpu="h100-80gb", prefill_replicas=1, replicas=2, **base).measured_sizing_on
    assert (
        SimConfig(gpu="h100-80gb", prefill_replicas=1, replicas=2, num_blocks=5000, **base).num_blocks == 5000
    )


def test_what_it_cannot_measure_is_refused():
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "kv_cache_sizing": "measured"}
    with pytest.raises(InvalidArgumentError, match="activation_reserve_bytes lumps"):
        SimConfig(activation_reserve_bytes="2GiB", **base)
    with pytest.raises(InvalidArgumentError, match="pool_null_block 'extra'"):
        SimConfig(pool_null_block="extra", **base)
    with pytest.raises(InvalidArgumentError, match="kv_cache_sizing"):
        SimConfig(kv_cache_sizing="guessed", num_blocks=100)
    # without graphs (enforce_eager) the formula holds with G = 0
    eager = SimConfig(enforce_eager=True, **base).pool
    assert eager.measured is not None
    assert eager.measured.non_kv_bytes == eager.weight_bytes + eager.non_torch_bytes


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--num-gpu-blocks-override", "1000"], "num_blocks (vLLM's --num-gpu-blocks-override) overrides"),
        (["--kv-cache-memory-bytes", "4GiB"], "kv_cache_bytes (vLLM's --kv-cache-memory-bytes) overrides"),
    ],
)
def test_a_measured_sizing_that_vllm_turns_off_is_refused_by_name(capsys, extra, why):
    """`--kv-cache-sizing measured` beside a size given ran, silently sized as given (the reason
    `measured.measured_off` wrote was shown to no one): one line, exit 2, naming the knob and vLLM's reason;
    without a model and a GPU too. The preset's "measured" is no flag given: a run under it with a pool in
    blocks runs."""
    from kvsim.cli import main

    base = ["run", "--requests", "5", "--kv-cache-sizing", "measured"]
    assert main([*base, "--model", "llama-3-8b", "--gpu", "h100-80gb", *extra]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kvsim run: error: argument --kv-cache-sizing: 'measured' does nothing here")
    assert why in line
    assert main([*base, "--num-gpu-blocks-override", "100"]) == 2
    assert "this run sizes no pool from a GPU" in capsys.readouterr().err
    assert main(["run", "--requests", "5", "--preset", "vllm-0.34", "--num-gpu-blocks-override", "100"]) == 0


@pytest.mark.parametrize(
    ("extra", "which", "words"),
    [
        (["--pool-null-block", "extra"], "pool_null_block", "--pool-null-block extra (vLLM v0's count)"),
        (
            ["--activation-reserve-bytes", "2GiB"],
            "activation_reserve_bytes",
            "which --activation-reserve-bytes lumps",
        ),
    ],
)
def test_measured_sizings_refusals_spell_the_flags_on_the_cli(capsys, extra, which, words):
    """The knobs measured sizing cannot run with under `--kv-cache-sizing measured` (a CUDA P/D fleet was one
    until user52 #7: vLLM keeps it on when asked, tests/test_pd_imex.py): `MeasuredSizingError` naming the knob, which `kvsim run` writes as its flags
    (`--kv-cache-sizing profiled`, not SimConfig's `kv_cache_sizing 'profiled'`), on the flag given;
    SimConfig's own words stay its fields'. The defaults (`--preset vllm-0.34` the same) leave the sizing
    unset, which settles to profiled there: they run."""
    from kvsim.cli import main
    from kvsim.errors import MeasuredSizingError

    model = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    for unset in ([], ["--preset", "vllm-0.34"]):
        assert main(["run", "--requests", "5", *model, *unset, *extra]) == 0
        assert "measured after warmup" not in capsys.readouterr().out
    for sizing, source, flag in ((["--kv-cache-sizing", "measured"], "", "--kv-cache-sizing"),):
        assert main(["run", "--requests", "5", *model, *sizing, *extra]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"kvsim run: error: argument {flag}: --kv-cache-sizing measured{source} "), (
            line
        )
        assert words in line
        assert "--kv-cache-sizing profiled" in line
        assert "kv_cache_sizing" not in line
    fields = {
        "prefill_replicas": {"prefill_replicas": 1, "replicas": 2},
        "pool_null_block": {"pool_null_block": "extra"},
    }
    knobs = fields.get(which, {"activation_reserve_bytes": "2GiB"})
    with pytest.raises(
        MeasuredSizingError, match=r"^kv_cache_sizing 'measured'.*kv_cache_sizing 'profiled'"
    ) as info:
        SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_cache_sizing="measured", **knobs)
    assert info.value.which == which
    again = pickle.loads(pickle.dumps(info.value))  # (a sweep's worker sends it back whole)
    assert (str(again), again.which) == (str(info.value), which)


def test_the_one_request_check_reads_the_measured_blocks_after_warmup_llama_3_1_8b_on_an_l4_by_hand(capsys):
    """vLLM 0.34.0 checks one request of `max_model_len` twice under the extensible KV cache: on the
    reservation in `get_kv_cache_configs` (its memory less one block) and on the measured blocks after warmup
    in `shrink_kv_cache_configs` (`(n − 1)` blocks: the null block held back), raising either time.
    Llama-3.1-8B on an L4 (T = 22.05 GiB) at the defaults (blocks of 64 × 131,072 B = 8 MiB = B): the
    reservation C = T − W − A − N holds floor((C − B) / B) = 810 blocks beside the null block, 51,840 tokens,
    the estimate of the first refusal (131,072 asked); the activation peak A (0.47 GiB) keeps the 1 GiB
    margin floor, so the measured bytes are T − (W + N + G) − 1 GiB − A, n = 600 blocks, and 51,840 tokens
    (810 blocks) are refused after warmup with the estimate (n − 1) × 64 = 38,336, which starts: its
    "Maximum concurrency" is n over the request's 599 blocks, 1.00x (kvsim logged 0.74x at 51,840 before)."""
    from kvsim.cli import main

    t = gpus.get("l4").memory_bytes
    ok = SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=8192)
    p = ok.pool
    assert p.measured is not None
    w, n_, g, a = p.weight_bytes, p.non_torch_bytes, p.cudagraph_bytes, p.activation_reserve_bytes
    b = 64 * 131_072
    assert p.layout.bytes_per_block == b
    assert 0.75 * a < GIB  # the margin is its floor
    c = t - w - a - n_
    assert p.figures.available_kv_bytes == c
    assert (c - b) // b == 810
    n = (t - (w + n_ + g) - GIB - a) // b
    assert n == 600 == ok.num_blocks
    with pytest.raises(InvalidArgumentError) as before:
        SimConfig(model="llama-3.1-8b", gpu="l4")
    msg = str(before.value)
    assert msg.startswith("gpu_memory_utilization: model llama-3.1-8b does not fit one request: To serve")
    assert "the estimated maximum model length is 51840." in msg
    # (vLLM 0.34.0's hint with the extensible KV cache on at 1.0: no utilization to raise)
    assert (
        "The extensible KV cache already takes all device memory left after the model and its activations;"
        in msg
    )
    assert "Try increasing `gpu_memory_utilization`" not in msg
    # (kvsim's addition, user52 #2: 51,840 is refused after warmup; the measured blocks hold 38,336)
    assert "(600 − 1) × 8.0 MiB, hold one request of 38,336 tokens at most, the length that runs" in msg
    with pytest.raises(InvalidArgumentError) as after:
        SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=51840)
    msg = str(after.value)
    assert "does not fit one request in the blocks measured after warmup" in msg
    assert f"({810 * b / GIB:.2f} GiB KV cache is needed" in msg
    assert f"available KV cache memory ({599 * b / GIB:.2f} GiB)" in msg
    assert "the estimated maximum model length is 38336." in msg
    assert "left after the model, its activations, CUDA graphs and warmup" in msg
    assert "(600 − 1) × 8.0 MiB" in msg
    fits = SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=38336)
    f = fits.pool.figures
    assert (fits.num_blocks, f.max_concurrency) == (600, 600 / 599)
    assert f"Maximum concurrency for 38,336 tokens per request: {600 / 599:.2f}x" in "\n".join(f.lines())
    with pytest.raises(InvalidArgumentError, match="measured after warmup"):
        SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=38337)
    # the profiled pool (vLLM 0.33.0's rule, 0.92) has no second check: its one check is its blocks'
    old = SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="l4", max_model_len=32128)
    assert old.pool.figures.max_concurrency >= 1
    # kvsim run: one line, exit 2, no run
    assert (
        main(["run", "--model", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "51840", "--requests", "5"])
        == 2
    )
    out = capsys.readouterr()
    (line,) = out.err.strip().splitlines()
    assert line.startswith(
        "kvsim run: error: argument --max-model-len: model llama-3.1-8b does not fit one request in"
    )
    assert "Maximum concurrency" not in out.out


def test_a_utilization_given_is_named_in_the_hint_and_no_block_after_warmup_is_vllms_no_memory():
    """At a given share u the reservation is floor(u T) − W − A − N while the measured bytes are ceil(u T) −
    (W + N + G) − A (the requested share binds): G, the CUDA graphs (663 MiB on an L4), apart. A share whose
    reservation holds 300 MiB passes the first check for a 1,024-token request (16 blocks and the null block,
    136 MiB) but leaves no block after warmup: vLLM's "No available memory for the cache blocks", with its
    hint naming the share; a share whose reservation holds one request of 16,384 tokens but whose measured
    blocks do not is refused after warmup, the hint naming it too."""
    ok = SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=1024).pool
    t = gpus.get("l4").memory_bytes
    w, n_, g, a = ok.weight_bytes, ok.non_torch_bytes, ok.cudagraph_bytes, ok.activation_reserve_bytes
    assert g > 300 * 2**20
    u = round((w + a + n_ + 300 * 2**20) / t, 4)
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=1024, gpu_memory_utilization=u)
    msg = str(info.value)
    assert "leaves no KV cache block after warmup: No available memory for the cache blocks." in msg
    assert (
        f"within `gpu_memory_utilization`={u}; increase it (with the extensible KV cache it defaults to 1.0)"
        in msg
    )
    # a reservation of 2.3 GiB holds the 256 blocks of 16,384 tokens and the null block; 663 MiB fewer do not
    u = round((w + a + n_ + 2 * GIB + 300 * 2**20) / t, 4)
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(model="llama-3.1-8b", gpu="l4", max_model_len=16384, gpu_memory_utilization=u)
    msg = str(info.value)
    assert "in the blocks measured after warmup" in msg
    assert f"`gpu_memory_utilization`={u}; increase it" in msg
    assert "CUDA graphs take less with fewer or smaller capture sizes" in msg
