"""The roofline's collectives under tp and dp (DESIGN.md §Time model, "Under expert parallelism"): what vLLM
0.33.0 moves over which group, per MoE layer and per other layer, priced by hand.

Every figure below is the default efficiencies' (link 1.0, a ring step 3 µs) on an HGX board (NVSwitch,
450 GB/s each way a GPU, 8 GPUs a host, 400 Gb/s = 50 GB/s a GPU between hosts), bf16 activations (2 bytes).
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.model.collectives import collective_link, moe_collectives
from kvsim.model.timing import roofline_time_model
from kvsim.workloads import synthetic

PS = 1e12
HOP = 3e6  # ps, a ring step (`Efficiencies.collective_hop_ps`)
NVLINK = 450e9


def _terms(model: str, gpu: str, tp: int, dp: int, ep: bool) -> dict[str, float]:
    rt = roofline_time_model(
        kvsim.models.get(model),
        kvsim.gpus.get(gpu),
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        expert_parallel=ep,
    )
    return {t.name: t.ps for t in rt.terms}


def test_deepseek_v3_tp2_dp4_ep_is_sequence_parallel():
    """DeepSeek-V3 (61 layers, the first 3 dense, 58 MoE; hidden 7,168) on H200 at tp 2, dp 4, expert
    parallelism: vLLM's sequence-parallel MoE. Tensor parallelism: the 3 dense layers' 2 all-reduces each
    (4 passes of (tp−1)/tp hidden states each), each MoE layer's attention output reduce-scattered (1) and
    the next MoE layer's input all-gathered (1, 57 of them), the model's end gathering hidden state and
    residual (2): 12 + 58 + 57 + 2 = 129 passes of half a hidden state, 128 ring collectives of 1 step.
    The EP gather and scatter: each of the 8 GPUs holds half its rank's tokens, so per own token each ring
    moves 7/2 hidden states, twice a MoE layer, over the one-host EP group's NVLink."""
    t = _terms("deepseek-v3", "h200", 2, 4, True)
    h = 7168 * 2
    assert t["tp_allreduce_tok"] == pytest.approx(129 * h / 2 / NVLINK * PS)  # 2,054,826.7 ps
    assert t["tp_allreduce_tok"] == pytest.approx(2_054_826.67, abs=0.01)
    assert t["tp_allreduce"] == 128 * 1 * HOP  # 384 µs
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 58 * 7 / 2 * h / NVLINK * PS)
    assert t["ep_gather_scatter_tok"] == pytest.approx(12_934_257.78, abs=0.01)
    assert t["ep_gather_scatter"] == 2 * 58 * 7 * HOP  # (the ring still runs over 8 GPUs: 7 steps)
    # Before (kvsim's earlier charge): 2 all-reduces a layer (244 passes) and 7 hidden states per own token.
    assert 244 * h / 2 / NVLINK * PS + 2 * 58 * 7 * h / NVLINK * PS == pytest.approx(29_755_164.44, abs=0.01)
    assert t["tp_allreduce_tok"] + t["ep_gather_scatter_tok"] == pytest.approx(14_989_084.44, abs=0.01)


def test_qwen3_moe_tp2_dp4_ep_keeps_the_attention_all_reduce():
    """Qwen3-30B-A3B (48 MoE layers, hidden 2,048) on H100 at tp 2, dp 4, EP: its MoE block chunks the
    tokens over TP and all-gathers its output (1 pass) after the attention's all-reduce (2): 3 passes a
    layer, 144 in all, 144 ring collectives; the EP ring moves 7/2 hidden states per own token."""
    t = _terms("qwen3-30b-a3b", "h100-80gb", 2, 4, True)
    h = 2048 * 2
    assert t["tp_allreduce_tok"] == pytest.approx(144 * h / 2 / NVLINK * PS)
    assert t["tp_allreduce_tok"] == pytest.approx(655_360.0)
    assert t["tp_allreduce"] == 144 * HOP
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 48 * 3.5 * h / NVLINK * PS)
    assert t["ep_gather_scatter_tok"] == pytest.approx(3_058_346.67, abs=0.01)
    assert t["ep_gather_scatter"] == 2 * 48 * 7 * HOP


@pytest.mark.parametrize("ep", [False, True])
def test_tp4_dp1_is_two_all_reduces_a_layer_expert_parallel_or_not(ep):
    """At dp 1 nothing is gathered, with expert parallelism or without: the attention's and the MoE layer's
    all-reduces, 2 a layer: 48 × 2 × 2·3/4 hidden states of Qwen3-30B-A3B per token, 48 × 2 × 6 ring steps."""
    t = _terms("qwen3-30b-a3b", "h100-80gb", 4, 1, ep)
    assert t["tp_allreduce_tok"] == pytest.approx(48 * 2 * 1.5 * 2048 * 2 / NVLINK * PS)
    assert t["tp_allreduce_tok"] == pytest.approx(1_310_720.0)
    assert t["tp_allreduce"] == 48 * 2 * 6 * HOP
    assert "ep_gather_scatter_tok" not in t
    assert "ep_gather_scatter" not in t


def test_tp1_dp_ep_unchanged():
    """tp 1, dp 2, EP: the DP group is the EP group; one other rank's hidden states per own token."""
    t = _terms("qwen3-30b-a3b", "h100-80gb", 1, 2, True)
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 48 * 1 * 4096 / NVLINK * PS)
    assert t["ep_gather_scatter"] == 2 * 48 * 1 * HOP
    assert "tp_allreduce_tok" not in t


def test_tp_dp_without_ep_gathers_over_the_dp_group():
    """Without expert parallelism the naive dispatch gathers over the DP group (dp GPUs, tp apart): at tp 2,
    dp 2 one other rank's hidden states per own token (not tp·dp − 1 = 3), the TP all-reduces 2 a layer."""
    t = _terms("qwen3-30b-a3b", "h100-80gb", 2, 2, False)
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 48 * 1 * 4096 / NVLINK * PS)
    assert t["ep_gather_scatter"] == 2 * 48 * 1 * HOP
    assert t["tp_allreduce_tok"] == pytest.approx(48 * 2 * 1 * 4096 / NVLINK * PS)
    assert t["tp_allreduce"] == 48 * 2 * 2 * HOP


def test_deepseek_v3_tp8_dp2_without_ep_crosses_one_nic():
    """DeepSeek-V3 on two H200 hosts at tp 8, dp 2, no EP: the DP group is 2 GPUs 8 apart, one a host, so
    its ring goes through one 50 GB/s NIC: 2 × 58 × 1 hidden state per own token at 50 GB/s."""
    h200 = kvsim.gpus.get("h200")
    assert collective_link(h200, 2, stride=8).bandwidth == 50e9
    t = _terms("deepseek-v3", "h200", 8, 2, False)
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 58 * 7168 * 2 / 50e9 * PS)
    assert t["ep_gather_scatter_tok"] == pytest.approx(33_259_520.0)
    assert t["ep_gather_scatter"] == 2 * 58 * 1 * HOP


def test_a_strided_group_holds_a_domains_share():
    """`collective_link(gpu, group, stride)`: a group of GPUs `stride` apart spans group × stride GPUs and
    holds a stride-th of each host's: 4 GPUs 2 apart in one HGX host ride NVSwitch; 4 GPUs 4 apart span two
    hosts with 2 in each (2 NICs: 100 GB/s); on an MI355X mesh 2 GPUs 4 apart use one link each."""
    h200 = kvsim.gpus.get("h200")
    assert collective_link(h200, 4, stride=2).bandwidth == NVLINK
    assert collective_link(h200, 4, stride=4).bandwidth == 100e9
    assert collective_link(h200, 16).bandwidth == collective_link(h200, 16, stride=1).bandwidth == 400e9
    assert collective_link(kvsim.gpus.get("mi355x"), 2, stride=4).bandwidth == pytest.approx(76.8e9)


def test_the_plan_names_the_group():
    """`moe_collectives`: the group, its stride, the share per own token and the TP passes, by case."""
    ds = kvsim.models.get("deepseek-v3")
    flags = (False,) * 3 + (True,) * 58
    sp = moe_collectives(ds, 2, 4, True, flags)
    assert (sp.gather, sp.stride, sp.gather_share, sp.tp_units, sp.tp_rings) == (8, 1, (7, 2), 129, 128)
    assert sp.sequence_parallel
    assert sp.decoder_layer_sp
    dp = moe_collectives(ds, 2, 4, False, flags)
    assert (dp.gather, dp.stride, dp.gather_share, dp.tp_units) == (4, 2, (3, 1), 4 * 61)
    assert not dp.sequence_parallel
    assert moe_collectives(ds, 8, 1, True, flags).gather == 1


def test_the_time_line_names_the_ep_group_when_sequence_parallel():
    line = kvsim.SimConfig(
        model="qwen3-30b-a3b",
        gpu="h100-80gb",
        tensor_parallel_size=2,
        data_parallel_size=4,
        enable_expert_parallel=True,
    ).time_line()
    assert "all-gather and reduce-scatter over the EP group's tp·dp = 8 GPUs (sequence-parallel)" in line
    line = kvsim.SimConfig(
        model="qwen3-30b-a3b", gpu="h100-80gb", tensor_parallel_size=2, data_parallel_size=4
    ).time_line()
    assert "all-gather and reduce-scatter over the DP group's 4 GPUs, 2 apart" in line


def test_both_engines_agree_on_a_sequence_parallel_group():
    """The collectives are coefficients (`tok_ps`, `fixed_ps`) both engines read: a DP group of Qwen3-30B-A3B
    at tp 2, dp 2, EP steps alike in Rust and the reference (every column and counter)."""
    from tests.test_dp_groups import fleet_run

    cfg = kvsim.SimConfig(
        model="qwen3-30b-a3b",
        gpu="h100-80gb",
        tensor_parallel_size=2,
        data_parallel_size=2,
        enable_expert_parallel=True,
    )
    w = synthetic(24, arrival_rate=40.0, lengths="sharegpt-paper", seed=3)
    ref = fleet_run(w, cfg, 2, 2, "reference")
    rust = fleet_run(w, cfg, 2, 2, "rust")
    assert not isinstance(ref[0], str)
    assert ref[0].keys() == rust[0].keys()
    for k in ref[0]:
        np.testing.assert_array_equal(ref[0][k], rust[0][k], err_msg=k)
    assert ref[1] == rust[1]


def test_nemotron_h_counts_only_its_e_blocks_as_moe_layers():
    """Nemotron-3-Nano's 52 blocks are one mixer each by their letter (vLLM 0.33.0's `nemotron_h.py`
    ALL_DECODER_LAYER_TYPES): 23 `E` (MoE), 23 `M` (Mamba), 6 `*` (attention). At tp 2, dp 2, EP on H200
    (hidden 2,688) the EP gather and scatter run over the 23 MoE layers, 3/2 hidden states each way per own
    token, 3 ring steps each; the elementwise values: 52 layers' 6·h norms and residuals, the 29 layers
    with projections (Mamba and attention, 2·(q + kv) + 2·kv at q = 32·128/2, kv = 1·128), 2·h, and the 23
    MoE layers' 3 · 6 experts × 1,856 × dp / (tp·dp) activations; no dense MLP block (`-`)."""
    from kvsim.model.timing import _moe_layer_flags

    m = kvsim.models.get("nemotron-3-nano-30b-a3b")
    pattern = m.config_fields["hybrid_override_pattern"]
    assert _moe_layer_flags(m) == tuple(c == "E" for c in pattern)
    assert sum(_moe_layer_flags(m)) == 23
    t = _terms("nemotron-3-nano-30b-a3b", "h200", 2, 2, True)
    h = 2688 * 2
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 23 * 3 / 2 * h / NVLINK * PS)  # 824,320 ps
    assert t["ep_gather_scatter"] == 2 * 23 * 3 * HOP
    elem = 52 * 6 * 2688 + 29 * (2 * (2048 + 128) + 2 * 128) + 2 * 2688 + 23 * 3 * (6 * 1856 * 2 // 4)
    assert elem == 1_361_856
    assert t["elementwise_tok"] == pytest.approx(elem * 2 / 4.8e12 * PS)  # (H200's 4.8 TB/s)


def test_nemotron_h_dense_mlp_is_its_dash_blocks_only():
    """Nemotron-H-8B (dense; 52 blocks, 24 of them `-` MLPs of 21,504, 24 Mamba, 4 attention): only the `-`
    blocks carry an MLP's elementwise values (3 · its width, at tp 1), not all 52; the 24 Mamba and 4
    attention blocks carry their projections' (2·(q + kv) + 2·kv), every block its 6·h."""
    from pathlib import Path

    from kvsim.model.timing import _dense_mlp_layer_count

    m = kvsim.models.resolve(str(Path(__file__).parent / "data" / "hf" / "nemotron-h-8b.json"))
    assert _dense_mlp_layer_count(m) == 24
    one = _terms_of(m, "h100-80gb")
    h, L, ffn = m.hidden_size, 52, 21504
    attn_L = L - sum(lay.kind == "none" for lay in m.layer_list())
    assert attn_L == 28  # (24 Mamba + 4 attention blocks carry projections)
    q, kv = m.num_attention_heads * m.head_dim, m.num_kv_heads * m.head_dim
    elem = L * 6 * h + attn_L * (2 * (q + kv) + 2 * kv) + 24 * 3 * ffn + 2 * h
    assert one["elementwise_tok"] == pytest.approx(elem * 2 / kvsim.gpus.get("h100-80gb").hbm_bandwidth * PS)


def _terms_of(model: object, gpu: str) -> dict[str, float]:
    rt = roofline_time_model(model, kvsim.gpus.get(gpu))  # type: ignore[arg-type]
    return {t.name: t.ps for t in rt.terms}


def _coll(model_type: str, layers: int, moe: tuple[bool, ...] | None = None, **fields: object):
    """`moe_collectives` of a stand-in model (its `model_type` and config fields) at tp 2, dp 2, EP."""
    from types import SimpleNamespace

    m = SimpleNamespace(num_experts=8, model_type=model_type, config_fields=fields)
    return moe_collectives(m, 2, 2, True, moe if moe is not None else (True,) * layers)


def test_a_model_that_does_not_opt_in_keeps_the_dp_group():
    """MiniMax-M2 (62 MoE layers, hidden 3,072) at tp 2, dp 2, EP on H200: vLLM 0.33.0's minimax_m2.py builds
    its FusedMoE without is_sequence_parallel, so the gather runs over the DP group (2 GPUs, 2 apart: one
    other rank's hidden states per own token, 1 ring step) and every layer all-reduces twice over TP
    (2 × 62 × 2·1/2 hidden states, 2 × 62 × 2 ring steps)."""
    t = _terms("minimax-m2", "h200", 2, 2, True)
    h = 3072 * 2
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 62 * 1 * h / NVLINK * PS)
    assert t["ep_gather_scatter"] == 2 * 62 * 1 * HOP
    assert t["tp_allreduce_tok"] == pytest.approx(2 * 62 * 1 * h / NVLINK * PS)
    assert t["tp_allreduce"] == (2 * 62 + 62) * 2 * HOP  # (+ its q / k norms' 62 small all-reduces)
    line = kvsim.SimConfig(
        model="minimax-m2",
        gpu="h200",
        tensor_parallel_size=2,
        data_parallel_size=2,
        enable_expert_parallel=True,
    ).time_line()
    assert "over the DP group's 2 GPUs, 2 apart" in line
    assert _coll("qwen3_vl_moe_text", 4).pattern == "block"  # (Qwen3-VL-MoE reuses Qwen3-MoE's layer)
    c = _coll("mixtral", 4)  # (Mixtral's file does not opt in either)
    assert (c.sequence_parallel, c.gather, c.stride, c.gather_share, c.tp_units) == (False, 2, 2, (1, 1), 16)


@pytest.mark.parametrize(
    ("model", "layers", "hidden", "per_layer"),
    [
        ("gemma-4-26b-a4b", 30, 2816, 3),
        ("granite-4.0-h-tiny", 40, 1536, 3),
        ("nemotron-3-nano-30b-a3b", 52, 2688, 1),
    ],
)
def test_tp_all_reduces_a_layer_by_model(model, layers, hidden, per_layer):
    """At tp 2, dp 1: Gemma 4's MoE layers all-reduce the attention, the dense MLP beside the experts and the
    MoE runner (3); Granite-4.0-H's the mixer, the MoE runner and the shared MLP (3); Nemotron-H's blocks are
    one mixer each (1). Each all-reduce moves 2·(tp−1)/tp = 1 hidden state and runs 2 ring steps."""
    t = _terms(model, "h200", 2, 1, True)
    assert t["tp_allreduce_tok"] == pytest.approx(per_layer * layers * hidden * 2 / NVLINK * PS)
    small = 36 if model.startswith("granite") else 0  # (its Mamba gated norms': below)
    assert t["tp_allreduce"] == (per_layer * layers + small) * 2 * HOP


def test_granite_without_a_shared_mlp_is_two_all_reduces():
    assert _coll("granitemoehybrid", 3, shared_intermediate_size=0).tp_units == 2 * 2 * 3
    assert _coll("granitemoehybrid", 3, shared_intermediate_size=1024).tp_units == 2 * 3 * 3


def test_nemotron_h_block_pattern_on_its_e_blocks():
    """Nemotron-3-Nano at tp 2, dp 2, EP: its 23 `E` blocks chunk and all-gather (1 pass each), its 29 Mamba
    and attention blocks keep their one all-reduce (2): 23 + 58 = 81 passes and ring collectives."""
    t = _terms("nemotron-3-nano-30b-a3b", "h200", 2, 2, True)
    assert t["tp_allreduce_tok"] == pytest.approx(81 * 2688 * 2 / 2 / NVLINK * PS)
    assert t["tp_allreduce"] == 81 * 1 * HOP


@pytest.mark.parametrize(
    ("model", "tp", "dp", "layers", "end", "hidden"),
    [
        ("qwen3-next-80b-a3b", 2, 2, 48, 1, 2048),
        ("qwen3.6-35b-a3b", 2, 2, 40, 1, 2048),
        ("kimi-linear-48b-a3b", 2, 2, 27, 1, 2304),
        ("deepseek-v4-flash", 2, 2, 43, 4, 4096),
        ("deepseek-v3.2", 8, 2, 61, 1, 7168),
        ("glm-5", 8, 2, 78, 1, 6144),
        ("kimi-k3", 8, 2, 93, 1, 7168),
    ],
)
def test_every_layer_sequence_parallel(model, tp, dp, layers, end, hidden):
    """vLLM 0.33.0's decoder-level sequence parallelism on every layer (qwen3_next.py, qwen3_5.py,
    models/kimi_k3/nvidia, models/deepseek_v4/nvidia, models/deepseek_v32/nvidia): each layer all-gathers its
    input after the norm and reduce-scatters the attention's output (2 passes of (tp−1)/tp hidden states, 2
    rings), the end all-gathers the final stream (DeepSeek-V4's 4 hyper-connection streams: 4 passes, 1 ring):
    2L + end passes, 2L + 1 rings of tp − 1 steps."""
    t = _terms(model, "h200", tp, dp, True)
    passes, rings = 2 * layers + end, 2 * layers + 1
    assert t["tp_allreduce_tok"] == pytest.approx(passes * (tp - 1) / tp * hidden * 2 / NVLINK * PS)
    assert t["tp_allreduce"] == rings * (tp - 1) * HOP


def test_qwen3_next_without_every_layer_moe_falls_back_to_the_block():
    """Qwen3-Next's decoder-level path needs every layer MoE (`_should_use_sequence_parallel`: no
    `mlp_only_layers`, `decoder_sparse_step` 1); otherwise its MoE block chunks and gathers: a MoE layer 3
    passes, a dense one 4."""
    c = _coll("qwen3_next", 4, (False, True, True, True), mlp_only_layers=[0])
    assert (c.pattern, c.tp_units, c.tp_rings) == ("block", 4 + 3 * 3, 4 + 3 * 3)
    assert _coll("qwen3_next", 4).tp_units == 2 * 4 + 1


def test_latent_experts_dispatch_at_their_latent_width():
    """Kimi-K3's routed experts work in `routed_expert_hidden_size` 3,584 (hidden 7,168), down-projected
    before the dispatch and up-projected after the combine (vLLM 0.33.0 models/kimi_k3/nvidia/model.py): at
    tp 8, dp 2, EP on H200 the EP group's 16 GPUs span two hosts (8 NICs of 50 GB/s: 400 GB/s), each ring
    moves 15/8 latents per own token, twice a MoE layer (92 of 93): half the hidden width's bytes."""
    from kvsim.model.collectives import dispatch_width

    assert dispatch_width(kvsim.models.get("kimi-k3")) == 3584
    assert dispatch_width(kvsim.models.get("kimi-linear-48b-a3b")) == 2304  # (no latent: its hidden size)
    t = _terms("kimi-k3", "h200", 8, 2, True)
    assert t["ep_gather_scatter_tok"] == pytest.approx(2 * 92 * 15 / 8 * 3584 * 2 / 400e9 * PS)
    assert t["ep_gather_scatter_tok"] == pytest.approx(6_182_400.0)
    assert t["ep_gather_scatter"] == 2 * 92 * 15 * HOP  # (the ring steps do not depend on the width)


def test_nemotron_h_latent_moe_dispatches_its_latent():
    """Nemotron-H with `moe_latent_size` (`fc1_latent_proj` before the runner's dispatch, `fc2_latent_proj`
    after its combine): the gather moves the latent's width; without it, the hidden size."""
    from types import SimpleNamespace

    from kvsim.model.collectives import dispatch_width

    def m(**f: object) -> object:
        return SimpleNamespace(model_type="nemotron_h", hidden_size=2688, config_fields=f)

    assert dispatch_width(m(moe_latent_size=1024)) == 1024
    assert dispatch_width(m()) == 2688
    assert dispatch_width(SimpleNamespace(model_type="qwen3_moe", hidden_size=2048, config_fields={})) == 2048


@pytest.mark.parametrize(
    ("model", "layers", "hidden", "per_layer", "small"),
    [("minimax-m2", 62, 3072, 2, 62), ("granite-4.0-h-tiny", 40, 1536, 3, 36)],
)
def test_small_all_reduces_cost_ring_steps_only(model, layers, hidden, per_layer, small):
    """At tp 2, dp 1: MiniMax-M2's q / k norm all-reduces each attention layer's per-token variances (62),
    Granite-4.0-H's Mamba gated norm (`mamba_n_groups` 1) each Mamba layer's per-token sums (36 of 40): 2
    ring steps each beside the layers' hidden-state all-reduces (2 steps each at tp 2), no bytes."""
    t = _terms(model, "h200", 2, 1, False)
    assert t["tp_allreduce_tok"] == pytest.approx(per_layer * layers * hidden * 2 / NVLINK * PS)
    assert t["tp_allreduce"] == (per_layer * layers + small) * 2 * HOP
    from types import SimpleNamespace

    from kvsim.model.collectives import small_all_reduces

    def granite(groups: int) -> object:
        mamba, attention = SimpleNamespace(kind="mamba"), SimpleNamespace(kind="full")
        return SimpleNamespace(
            model_type="granitemoehybrid",
            config_fields={"mamba_n_groups": groups},
            layer_list=lambda: (mamba, mamba, attention),
        )

    assert small_all_reduces(granite(1)) == 2
    assert small_all_reduces(granite(8)) == 0  # (tp dividing the groups: each rank's own, no collective)


def test_rocm_files_that_do_not_opt_in():
    """On ROCm vLLM 0.33.0 serves DeepSeek-V4 and Kimi-Linear / K3 with its amd/ files, whose FusedMoE takes
    no is_sequence_parallel: at tp 2, dp 2, EP on an MI355X (gfx950) DeepSeek-V4-Flash keeps its 2
    all-reduces a layer (43 layers, 2 ring steps each) and gathers over the DP group (1 ring step); on an
    H200 it is sequence-parallel (87 rings). Qwen3-MoE's file is the same on both."""
    t = _terms("deepseek-v4-flash", "mi355x", 2, 2, True)
    assert t["tp_allreduce"] == 2 * 43 * 2 * HOP
    assert t["ep_gather_scatter"] == 2 * 43 * 1 * HOP
    assert _terms("deepseek-v4-flash", "h200", 2, 2, True)["tp_allreduce"] == 87 * HOP
    kimi = moe_collectives(kvsim.models.get("kimi-linear-48b-a3b"), 2, 2, True, (False,) + (True,) * 26, True)
    assert (kimi.sequence_parallel, kimi.gather, kimi.stride) == (False, 2, 2)
    assert _terms("qwen3-30b-a3b", "mi355x", 2, 2, True)["tp_allreduce"] == 144 * HOP
