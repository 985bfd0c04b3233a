"""Collectives over PCIe with and without GPU peer-to-peer (`SimConfig.pcie_p2p`, `Gpu.pcie_p2p`; DESIGN.md
§Time model, "The collectives' link"): the host-staged transport's bandwidth and latency computed by hand, the
GeForce default, a GPU with NVLink untouched by the knob, the CLI switch and the time line's words."""

from __future__ import annotations

import json

import pytest

import kvsim
from kvsim.cli import main
from kvsim.model.collectives import (
    HOST_STAGED_LATENCY_PS,
    HOST_STAGED_SHARE,
    collective_link,
    moe_collectives,
)
from kvsim.model.gpus import get
from kvsim.model.models import resolve
from kvsim.model.timing import _moe_layer_flags, roofline_time_model
from tests.p2p_common import GEFORCE_TP2_SWEEP
from tests.table_common import printed_table

QWEN = dict(model="qwen3-32b", gpu="rtx-pro-6000", tensor_parallel_size=2, max_model_len=8192)


def _roofline(p2p: bool | None, gpu: str = "rtx-pro-6000", model: str = "qwen3-32b", **kw):
    return roofline_time_model(resolve(model), get(gpu), tensor_parallel_size=2, pcie_p2p=p2p, **kw)


def test_the_sourced_figures():
    """A quarter of the host link (NVIDIA/nccl#384: 3.9 GB/s of PCIe 3.0's ~16) and 14 µs a collective
    (rtx6kpro's "P2P Disabled ~14 us"): the figures the comments cite, not fitted ones."""
    assert HOST_STAGED_SHARE == 4
    assert HOST_STAGED_LATENCY_PS == 14_000_000


def test_tp2_collectives_by_hand_with_and_without_p2p():
    """Qwen3-32B at TP 2 on PCIe 5.0 (64 GB/s each way): 64 layers × 2 all-reduces × 2(tp−1)/tp × 5,120 × 2 B
    = 1,310,720 B a token. With P2P at 64 GB/s: 20.48 µs a token and 256 ring steps × 3 µs = 0.768 ms a step;
    staged through host memory at 16 GB/s: 81.92 µs a token and 0.768 ms + 128 all-reduces × 14 µs = 2.56 ms a
    step. The logits' gather (4 B × 151,936 × (tp−1)/tp a sequence) moves to the slower link too."""
    p2p, host = _roofline(True), _roofline(False)
    terms = {rt: {t.name: t.ps for t in rt.terms} for rt in (p2p, host)}
    per_token = 2 * 64 * 2 * (2 - 1) / 2 * 5120 * 2
    assert per_token == 1_310_720
    assert terms[p2p]["tp_allreduce_tok"] == pytest.approx(per_token / 64e9 * 1e12)
    assert terms[p2p]["tp_allreduce_tok"] == pytest.approx(20_480_000)
    assert terms[host]["tp_allreduce_tok"] == pytest.approx(per_token / 16e9 * 1e12)
    assert terms[host]["tp_allreduce_tok"] == pytest.approx(81_920_000)
    assert terms[p2p]["tp_allreduce"] == 256 * 3_000_000
    assert terms[host]["tp_allreduce"] == 256 * 3_000_000 + 128 * 14_000_000 == 2_560_000_000
    # The coefficients the engines see: the step's fixed part, per token and per sequence.
    assert host.fixed_ps - p2p.fixed_ps == 128 * 14_000_000
    gather = 4 * 151_936 * (2 - 1) / 2
    assert host.tok_ps - p2p.tok_ps == pytest.approx(81_920_000 - 20_480_000, abs=1)
    assert host.seq_ps - p2p.seq_ps == pytest.approx((gather / 16e9 - gather / 64e9) * 1e12, abs=1)
    # A step of 128 decodes at 1,194 tokens: the difference is the collectives' alone.
    step = [(1194, 1)] * 128
    extra = 128 * 14e6 + 128 * (61_440_000 + (gather / 16e9 - gather / 64e9) * 1e12)
    assert host.step_ps(step) - p2p.step_ps(step) == pytest.approx(extra, abs=300)


def test_ep_gather_scatter_staged_by_hand():
    """Qwen3-30B-A3B at DP 2 with expert parallelism (tp 1): 48 MoE layers × an all-gather and a
    reduce-scatter × (dp−1) × 2,048 × 2 B = 393,216 B a token, at 64 GB/s (6.144 µs) or 16 GB/s (24.576 µs);
    96 collectives × (1 ring step × 3 µs, + 14 µs staged)."""
    model, gpu = resolve("qwen3-30b-a3b"), get("rtx-pro-6000")
    rts = {
        p: roofline_time_model(model, gpu, data_parallel_size=2, expert_parallel=True, pcie_p2p=p)
        for p in (True, False)
    }
    terms = {p: {t.name: t.ps for t in rt.terms} for p, rt in rts.items()}
    assert terms[True]["ep_gather_scatter_tok"] == pytest.approx(393_216 / 64e9 * 1e12)
    assert terms[False]["ep_gather_scatter_tok"] == pytest.approx(393_216 / 16e9 * 1e12)
    assert terms[True]["ep_gather_scatter"] == 96 * 3_000_000
    assert terms[False]["ep_gather_scatter"] == 96 * (3_000_000 + 14_000_000)
    assert rts[False].fixed_ps - rts[True].fixed_ps == 96 * 14_000_000


def test_tp_collectives_count_each_all_reduce_gather_and_scatter_once():
    """Host staging's latency multiplies the collectives, an all-reduce one (not its two ring passes)."""
    qwen = resolve("qwen3-32b")
    c = moe_collectives(qwen, 2, 1, False, _moe_layer_flags(qwen))
    assert (c.tp_collectives, c.tp_rings) == (128, 256)
    moe = resolve("qwen3-30b-a3b")
    # Sequence-parallel (BLOCK): a MoE layer's attention all-reduce and the block's all-gather, 2 a layer.
    c = moe_collectives(moe, 2, 2, True, _moe_layer_flags(moe))
    assert c.sequence_parallel
    assert (c.tp_collectives, c.tp_rings) == (96, 144)


def test_geforce_defaults_to_host_staging_and_datacenter_cards_to_p2p():
    """NVIDIA disables P2P on GeForce cards (gpu_tables.NO_PCIE_P2P): their default is the staged path."""
    for name in ("rtx-2070", "rtx-3090", "rtx-4090", "rtx-5090"):
        assert get(name).pcie_p2p is False
    for name in ("rtx-pro-6000", "l40s", "l4", "a10", "rtx-6000-ada", "h100-pcie", "h100-80gb"):
        assert get(name).pcie_p2p is True
    default = _roofline(None, "rtx-4090", "llama-3.1-8b")
    assert default == _roofline(False, "rtx-4090", "llama-3.1-8b")
    assert default != _roofline(True, "rtx-4090", "llama-3.1-8b")
    assert collective_link(get("rtx-4090"), 2).bandwidth == 8e9  # (PCIe 4.0's 32 GB/s / 4)
    assert _roofline(None) == _roofline(True)


def test_a_gpu_with_nvlink_is_untouched_and_the_time_line_says_so():
    """Over NVLink the knob changes nothing; the time line says so rather than staying silent."""
    rts = [_roofline(p, "h100-80gb") for p in (None, True, False)]
    assert rts[0] == rts[1] == rts[2]
    line = kvsim.SimConfig(**{**QWEN, "gpu": "h100-80gb", "pcie_p2p": False}).time_line()
    assert "over the GPU-to-GPU link at 450 GB/s each way" in line
    assert "pcie_p2p off changes nothing here (no collective crosses PCIe between GPUs)" in line
    line = kvsim.SimConfig(**{**QWEN, "tensor_parallel_size": 1, "pcie_p2p": False}).time_line()
    assert "pcie_p2p off changes nothing here (no collective between GPUs)" in line
    assert "changes nothing" not in kvsim.SimConfig(**{**QWEN, "gpu": "h100-80gb"}).time_line()


def test_between_nvlink_domains_the_pcie_crossing_is_staged():
    """H200 NVL's bridges of 4 joined by PCIe within a host of 8: at tp 8 without P2P the crossing runs at a
    quarter of PCIe a GPU × 4 GPUs, and pays the staging latency."""
    p2p = collective_link(get("h200-nvl"), 8, pcie_p2p=True)
    host = collective_link(get("h200-nvl"), 8, pcie_p2p=False)
    assert (p2p.bandwidth, p2p.latency_ps, p2p.pcie) == (4 * 64e9, 0, True)
    assert (host.bandwidth, host.latency_ps, host.pcie) == (4 * 16e9, 14_000_000, True)
    inside = collective_link(get("h200-nvl"), 4, pcie_p2p=False)
    assert (inside.latency_ps, inside.pcie) == (0, False)


def test_the_time_line_names_the_transport():
    line = kvsim.SimConfig(**QWEN).time_line()
    assert "tp 2's all-reduces over PCIe peer-to-peer at 64 GB/s each way" in line
    line = kvsim.SimConfig(**QWEN, pcie_p2p=False).time_line()
    assert (
        "tp 2's all-reduces staged through host memory over PCIe, no peer-to-peer (pcie_p2p off): a quarter of "
        "PCIe's 64 GB/s each way, 16 GB/s, and 14 µs a collective"
    ) in line
    line = kvsim.SimConfig(model="llama-3.1-8b", gpu="rtx-4090", tensor_parallel_size=2).time_line()
    assert "no peer-to-peer (NVIDIA disables it on GeForce cards): a quarter of PCIe's 32 GB/s" in line
    line = kvsim.SimConfig(
        model="qwen3-30b-a3b",
        gpu="rtx-pro-6000",
        data_parallel_size=2,
        enable_expert_parallel=True,
        pcie_p2p=False,
    ).time_line()
    assert (
        "the MoE layers' all-gather and reduce-scatter over the DP group's 2 GPUs staged through host" in line
    )


def test_the_cli_switch(capsys):
    base = ["run", "--model", "qwen3-32b", "--gpu", "rtx-pro-6000", "-tp", "2", "--max-model-len", "8192"]
    base += ["--requests", "5"]
    for flag, want in (
        ([], None),
        (["--no-pcie-p2p"], False),
        (["--pcie-p2p"], True),
        (["--pcie-p2p", "false"], False),
    ):
        assert main([*base, *flag, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["config"]["pcie_p2p"] is want
    assert main([*base, "--no-pcie-p2p"]) == 0
    assert "staged through host memory" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("time_model", "why"),
    [("linear", "time_model 'linear' prices no collectives"), ("ticks", "ticks are no GPU's time")],
)
def test_a_pcie_p2p_the_time_model_cannot_apply_is_refused_by_name(capsys, time_model, why):
    """adv46 #2: under linear and ticks (no collectives priced) it was silently ignored, two identical rows."""
    base = ["run", "--model", "llama-3-8b", "--gpu", "rtx-4090", "-tp", "2", "--requests", "5"]
    for flag in (["--pcie-p2p"], ["--no-pcie-p2p"]):
        assert main([*base, "--time-model", time_model, *flag]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert "pcie_p2p" in err[0]
        assert why in err[0]
    with pytest.raises(kvsim.InvalidArgumentError, match="pcie_p2p False needs time_model 'roofline'"):
        kvsim.SimConfig(model="llama-3-8b", gpu="rtx-4090", time_model=time_model, pcie_p2p=False)
    # unset (the GPU's own) stays accepted, and the roofline takes it
    assert main([*base, "--time-model", time_model, "--pcie-p2p", "none"]) == 0
    capsys.readouterr()
    kvsim.SimConfig(model="llama-3-8b", gpu="rtx-4090", time_model="roofline", pcie_p2p=False)


def test_a_sweep_over_time_models_skips_the_point_pcie_p2p_cannot_apply_to(capsys, tmp_path):
    out = tmp_path / "s.parquet"
    argv = [
        *GEFORCE_TP2_SWEEP,
        "--base",
        "pcie_p2p=false",
        "--grid",
        "time_model=roofline,linear",
        "--requests",
        "5",
    ]
    assert main([*argv, "--output", str(out)]) == 2
    assert "time_model 'linear' prices no collectives" in capsys.readouterr().err
    assert main([*argv, "--skip-invalid", "--output", str(out)]) == 0
    capsys.readouterr()


def test_a_described_gpus_unknown_p2p_is_a_field_the_time_line_reads():
    """A GPU described without a preset and without `pcie_p2p` holds None (not known), taken as P2P; the
    time line's "assumed" comes from that field, not from its `source` text (which until 2026-12-06 ended
    "; pcie_p2p assumed", and collectives read the suffix back)."""
    import dataclasses
    import pickle

    from kvsim.model.collectives import pcie_p2p_of
    from kvsim.model.gpus import from_spec

    spec = {"memory": "24GiB", "bandwidth": "1008GB/s", "tflops": 165, "name": "card"}
    unknown, said = from_spec(spec), from_spec({**spec, "pcie_p2p": True})
    assert (unknown.pcie_p2p, said.pcie_p2p) == (None, True)
    assert unknown.source == said.source == "described by gpu"
    assert unknown != said
    assert len({unknown, said, from_spec(spec)}) == 2
    assert pickle.loads(pickle.dumps(unknown)) == unknown  # (a sweep's processes executor pickles points)
    assert pcie_p2p_of(unknown)
    assert pcie_p2p_of(said)
    assert not pcie_p2p_of(unknown, False)
    assert not pcie_p2p_of(from_spec({**spec, "pcie_p2p": False}))
    assert from_spec({"memory": "48GiB"}, base=get("rtx-4090")).pcie_p2p is False  # (the base preset's)
    assumed = "peer-to-peer assumed for a described GPU"
    link = collective_link(unknown, 2)
    assert (link.bandwidth, link.latency_ps) == (collective_link(said, 2).bandwidth, 0) == (32e9, 0)
    assert assumed in link.how
    assert assumed not in collective_link(said, 2).how
    assert assumed not in collective_link(unknown, 2, pcie_p2p=True).how  # (a host's P2P given)
    # The field, not the text: an old-style source with the field set says nothing assumed.
    relabelled = dataclasses.replace(said, source="described by gpu; pcie_p2p assumed")
    assert assumed not in collective_link(relabelled, 2).how
    assert assumed in collective_link(dataclasses.replace(unknown, source="anything"), 2).how
    # Between peer domains over PCIe the crossing is assumed P2P too, and said so.
    bridged = from_spec({**spec, "peer_link": "50GB/s", "peer_domain": 2})
    assert assumed in collective_link(bridged, 4).how
    assert assumed not in collective_link(bridged, 2).how  # (within the bridge: no PCIe)
    cfg = kvsim.SimConfig(model="llama-3-8b", gpu=unknown, tensor_parallel_size=2)
    assert cfg.collective_transport == "pcie-p2p"
    assert assumed in cfg.time_line()


def _sweep(capsys, tmp_path, argv: list[str]) -> tuple[list[str], list[list[str]], list[str]]:
    """`kvsim sweep`'s printed table (its header and rows, cells as printed) and its notes."""
    out = tmp_path / f"s{len(list(tmp_path.iterdir()))}.parquet"
    assert main([*argv, "--requests", "3", "--no-progress", "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = printed_table(lines)
    return header, rows, [ln for ln in lines if ln.startswith("note: ")]


def test_a_sweeps_table_shows_the_transport_where_its_multi_gpu_points_differ(capsys, tmp_path):
    """The rows carried `collective_transport`, the printed table did not: a grid over pcie_p2p showed
    three rows whose difference it did not name. Where the multi-GPU points' transports differ the table
    has the column, each point's value its rows'."""
    header, rows, notes = _sweep(capsys, tmp_path, [*GEFORCE_TP2_SWEEP, "--grid", "pcie_p2p=true,false,none"])
    assert header[:3] == ["pcie_p2p", "collective_transport", "n_seeds"]
    # (an unset or yes-or-no axis value as the notes name it: None, True, False)
    assert [r[:2] for r in rows] == [["True", "pcie-p2p"], ["False", "host-staged"], ["None", "host-staged"]]
    assert not [n for n in notes if "host memory" in n]  # (the column says it)
    # A GPU with NVLink beside one without, at tp 2: peer-link and pcie-p2p.
    argv = ["sweep", "--base", "model=llama-3-8b", "--base", "tensor_parallel_size=2"]
    header, rows, _ = _sweep(capsys, tmp_path, [*argv, "--grid", "gpu=h100-80gb,rtx-pro-6000"])
    at = header.index("collective_transport")
    assert [(r[header.index("gpu")], r[at]) for r in rows] == [
        ("h100-80gb", "peer-link"),
        ("rtx-pro-6000", "pcie-p2p"),
    ]


def test_a_sweep_staged_at_every_multi_gpu_point_says_so_under_the_table(capsys, tmp_path):
    """One transport at every multi-GPU point is no column (it would repeat one value); host-staged, a line
    under the table says it, with the staged path's figures. A tp 1 point (no collective) is not counted,
    and a sweep over GPUs with NVLink (or P2P) says nothing."""
    staged = "note: every multi-GPU point stages its collectives through host memory (collective_transport "
    header, _, notes = _sweep(capsys, tmp_path, [*GEFORCE_TP2_SWEEP, "--grid", "max_num_seqs=8,16"])
    assert "collective_transport" not in header
    assert [n for n in notes if n.startswith(staged)] == [
        f"{staged}host-staged: PCIe without peer-to-peer, 1/{HOST_STAGED_SHARE} of the host link's rate and "
        f"{HOST_STAGED_LATENCY_PS / 1e6:g} µs more a collective); pcie_p2p=true prices GPUs that do peer-to-peer"
    ]
    argv = ["sweep", "--base", "model=llama-3-8b", "--base", "gpu=rtx-4090"]
    header, rows, notes = _sweep(capsys, tmp_path, [*argv, "--grid", "tensor_parallel_size=1,2"])
    assert "collective_transport" not in header
    assert len(rows) == 2
    assert [n for n in notes if n.startswith(staged)]
    argv = ["sweep", "--base", "model=llama-3-8b", "--base", "gpu=h100-80gb"]
    header, _, notes = _sweep(capsys, tmp_path, [*argv, "--grid", "tensor_parallel_size=1,2"])
    assert "collective_transport" not in header
    assert not [n for n in notes if "host memory" in n]
    header, _, notes = _sweep(
        capsys, tmp_path, [*GEFORCE_TP2_SWEEP, "--base", "pcie_p2p=true", "--grid", "max_num_seqs=8,16"]
    )
    assert "collective_transport" not in header
    assert not [n for n in notes if "host memory" in n]
