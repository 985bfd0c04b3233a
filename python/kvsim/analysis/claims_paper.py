"""The paper's claims (PagedAttention, Kwon et al., SOSP 2023; DESIGN.md §Claims): the experiments behind
Fig. 2, 13, 14-16 (sharing), 17 (shared prefix), 18a (block size) and the sizing claim, and the claims
they check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import polars as pl

from kvsim.analysis.claims_model import (
    CONFIRMED,
    DIFFERS,
    GIB,
    OPT13B_PAGED,
    OPT13B_PAPER,
    PAPER,
    PAPER_FIG2,
    PAPER_FIG13,
    POLICY_LABEL,
    TOKEN_SHARE,
    Claim,
    Experiment,
    Results,
    mean_ci,
    not_testable,
    pct,
    with_ci,
    within_abs,
    within_rel,
)


def paper_experiments() -> list[Experiment]:
    """The paper's experiments (request counts before `scale`), in claims.md's order."""
    policies = ["orca-max", "orca-pow2", "orca-oracle", "vllm"]
    return [
        Experiment(
            "fig13a-sharegpt",
            ["sharegpt:max_tokens=2048"],
            {"policy": policies},
            OPT13B_PAPER,
            requests=20_000,
            why="OPT-13B, 12 GiB KV (15,728 slots), A100-40GB roofline time, ShareGPT-like lengths, "
            "Poisson 2 req/s, max_tokens 2048 (Orca Max reserves up to max_model_len 2048)",
        ),
        Experiment(
            "fig13b-alpaca",
            ["alpaca:max_tokens=2048"],
            {"policy": policies},
            OPT13B_PAPER,
            requests=30_000,
            why="as above with Alpaca-like lengths at Poisson 30 req/s",
        ),
        Experiment(
            "sharing-parallel-cow",
            ["alpaca:arrival_rate=10", "sharegpt:arrival_rate=1"],
            {"workload.num_samples": [2, 4, 6]},
            {**OPT13B_PAGED, "sampling": "fork-cow", "preemption": "auto", "cpu_blocks": 327},
            requests=5_000,
            why="parallel sampling n = 2, 4, 6 with copy-on-write forks (paper §4.4) in sequence groups, "
            "vLLM v0's preemption (a group is swapped whole, a lone sequence recomputed; 4 GiB of CPU "
            "swap = 327 blocks); Alpaca 10 req/s, ShareGPT 1 req/s (the paper does not give the rate of "
            "Fig. 15)",
        ),
        Experiment(
            "sharing-parallel-v1",
            ["alpaca:arrival_rate=10", "sharegpt:arrival_rate=1"],
            {"workload.num_samples": [2, 4, 6]},
            {"max_model_len": 2048, "enable_prefix_caching": True, "sampling": "independent"},
            requests=5_000,
            why="the same with vLLM v1's mechanism: n independent sequences sharing full prompt blocks "
            "through the prefix cache",
        ),
        Experiment(
            "shared-prefix",
            [
                "synthetic:lengths=lognormal,prompt_mean=30,prompt_sigma=0.5,output_mean=30,"
                "output_sigma=0.5,arrivals=all-at-once"
            ],
            {"policy": ["orca-oracle", "vllm"], "workload.system_prompt_len": [80, 341]},
            {
                "model": "llama-2-13b",
                "gpu": "a100-40gb",
                "kv_cache_bytes": None,
                "gpu_memory_utilization": 0.9,  # the paper's vLLM (v0) default, not 0.20.0 and later's 0.92
                "kv_cache_sizing": "profiled",  # v0 profiled the memory (0.34.0 measures it after warmup)
                "cudagraph_memory_bytes": 0,  # v0 kept no CUDA-graph memory from the KV cache (before 0.20.0)
                "enable_prefix_caching": True,
            },
            requests=5_000,
            why="LLaMA-13B on an A100-40GB (utilisation 0.9, the paper's vLLM v0 default), every request = the shared 1-shot (80 tokens) "
            "or 5-shot (341 tokens) prefix + a sentence; WMT16 lengths are not in the traces folder, so "
            "sentence and translation lengths are assumed lognormal with mean 30 tokens; all requests "
            "queued at t=0 (saturation throughput)",
        ),
        Experiment(
            "block-size-paper",
            ["sharegpt:arrivals=all-at-once", "alpaca:arrivals=all-at-once"],
            {"block_size": [8, 16, 32, 64, 128, 256]},
            OPT13B_PAGED,
            requests=5_000,
            seeds=5,
            why="vLLM on OPT-13B, 12 GiB KV at every block size, requests queued at t=0 so memory is the "
            "bottleneck (the paper does not give Fig. 18a's rates)",
        ),
    ]


def paper_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    """The claims on the paper's figures (Fig. 2, 13, sharing, shared prefix, block size)."""
    out: list[Claim] = []
    fig2, fig13, names = PAPER_FIG2, PAPER_FIG13, POLICY_LABEL
    fig2_tol = {"orca-max": 0.08, "orca-pow2": 0.08, "orca-oracle": 0.08, "vllm": 0.03}
    res = r["fig13a-sharegpt"]
    cmd = res.experiment.command(scale)
    for pol, src in fig2.items():
        claim = f"Fig. 2: share of KV memory holding token states, {names[pol]} (ShareGPT, OPT-13B)"
        tol = f"± {100 * fig2_tol[pol]:.0f} pp"
        if res.error:
            out.append(not_testable(f"P-fig2-{pol}", claim, f"{PAPER} Fig. 2", pct(src), tol, cmd, res.error))
            continue
        m, ci = res.get(TOKEN_SHARE, policy=pol)
        parts = {
            k: res.get(k, policy=pol)[0]
            for k in ("reservation_waste", "internal_fragmentation", "external_fragmentation")
        }
        denom = res.get("kv_allocated_fraction", policy=pol)[0] + parts["external_fragmentation"]
        note = "of allocated + externally fragmented memory; rest: " + ", ".join(
            f"{k.split('_')[0]} {pct(v / denom) if denom else '-'}" for k, v in parts.items()
        )
        if pol != "vllm":
            note += "; regions placed by a buddy allocator, as the paper's Orca"
        out.append(
            Claim(f"P-fig2-{pol}", claim, f"{PAPER} Fig. 2", pct(src), with_ci(m, ci, pct), tol,
                  within_abs(m, src, fig2_tol[pol]), cmd, note)
        )  # fmt: skip
    for exp, table in fig13.items():
        res = r[exp]
        cmd = res.experiment.command(scale)
        ds = "ShareGPT 2 req/s" if "sharegpt" in exp else "Alpaca 30 req/s"
        fig = "Fig. 13a" if "sharegpt" in exp else "Fig. 13b"
        for pol, src in table.items():
            claim = f"{fig}: mean batched requests, {names[pol]}, OPT-13B, {ds}"
            if res.error:
                out.append(
                    not_testable(
                        f"P-{exp}-{pol}", claim, f"{PAPER} {fig}", f"{src:.2f}", "± 15 %", cmd, res.error
                    )
                )
                continue
            m, ci = res.get("mean_batch", policy=pol)
            note = "bar labels of Fig. 13b (not restated in the text)" if "alpaca" in exp else ""
            queue = res.get("queueing_s_p90", policy=pol)[0]
            if queue < 0.1:
                note += (
                    f"{'; ' if note else ''}queueing p90 {queue * 1e3:.0f} ms: at this rate our server is "
                    "not memory-bound (the roofline iteration is an optimistic lower bound of the paper's), "
                    "so the batch is arrival rate x latency, not what memory allows"
                )
            out.append(
                Claim(f"P-{exp}-{pol}", claim, f"{PAPER} {fig}", f"{src:.2f}",
                      with_ci(m, ci, lambda x: f"{x:.2f}"), "± 15 %", within_rel(m, src, 0.15), cmd, note)
            )  # fmt: skip
    res = r["fig13a-sharegpt"]
    for base, src in (("orca-oracle", 2.2), ("orca-max", 4.3)):
        claim = f"§6.2: vLLM batches {src}x more requests than {names[base]} (OPT-13B, ShareGPT)"
        if res.error:
            out.append(
                not_testable(f"P-ratio-{base}", claim, f"{PAPER} §6.2", f"{src}x", "± 15 %", cmd, res.error)
            )
            continue
        ratio = res.get("mean_batch", policy="vllm")[0] / res.get("mean_batch", policy=base)[0]
        out.append(
            Claim(f"P-ratio-{base}", claim, f"{PAPER} §6.2", f"{src}x", f"{ratio:.2f}x", "± 15 %",
                  within_rel(ratio, src, 0.15), res.experiment.command(scale))
        )  # fmt: skip
    out += _sharing_claims(r, scale)
    out += _prefix_claims(r["shared-prefix"], scale)
    out += _block_size_paper(r["block-size-paper"], scale)
    return out


def _sharing_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    out: list[Claim] = []
    src = {"alpaca": (0.061, 0.098), "sharegpt": (0.162, 0.305)}
    beam = {"alpaca": (0.376, 0.552), "sharegpt": (0.443, 0.663)}
    tol = "each n within the range ± 5 pp"
    for exp, mech in (
        ("sharing-parallel-cow", "copy-on-write forks"),
        ("sharing-parallel-v1", "v1 prefix cache"),
    ):
        res = r[exp]
        cmd = res.experiment.command(scale)
        for ds, (lo, hi) in src.items():
            claim = f"§6.3 Fig. 15: memory saved by sharing, parallel sampling n = 2-6, {ds} ({mech})"
            value = f"{pct(lo)} - {pct(hi)}"
            cid = f"P-sharing-{ds}-{'cow' if 'cow' in exp else 'v1'}"
            if res.error:
                out.append(not_testable(cid, claim, f"{PAPER} §6.3", value, tol, cmd, res.error))
                continue
            sel = res.frame.filter(pl.col("workload").str.starts_with(ds))
            if "cow" in exp and int(sel["cow_copies"].sum()) == 0:
                why = (
                    "the engine reports 0 copy-on-write copies under sampling='fork-cow': not implemented yet"
                )
                out.append(not_testable(cid, claim, f"{PAPER} §6.3", value, tol, cmd, why))
                continue
            ns, saves = [], []
            for n in (2, 4, 6):
                part = sel.filter(pl.col("workload.num_samples") == n)
                ns.append(n)
                saves.append(float(part["sharing_saving"].mean()))  # type: ignore[arg-type]
            ok = all(lo - 0.05 <= s <= hi + 0.05 for s in saves)
            ours = ", ".join(f"n={n}: {pct(s)}" for n, s in zip(ns, saves, strict=True))
            note = "saving = blocks saved by sharing / blocks needed without sharing (time-averaged)"

            # An n whose runs are overloaded (median E2E over 10x the least n's): the pool is full of
            # preempted work and the saving is measured over a queue, not the paper's steady state.
            def mean_at(n: int, col: str, sel: pl.DataFrame = sel) -> float:
                return float(sel.filter(pl.col("workload.num_samples") == n)[col].mean())  # type: ignore[arg-type]

            e2e = {n: mean_at(n, "e2e_s_p50") for n in ns}
            over = [n for n in ns if e2e[n] > 10 * e2e[ns[0]]]
            if over:
                pre = {n: mean_at(n, "preemptions") for n in over}
                note += "; " + ", ".join(
                    f"n={n} is overloaded at this rate (median E2E {e2e[n]:.0f} s against {e2e[ns[0]]:.1f} s at "
                    f"n={ns[0]}, {pre[n]:,.0f} preemptions)"
                    for n in over
                )
            if "v1" in exp:
                note += "; v1 shares only full prompt blocks, so the paper's v0 figure is not its target"
            out.append(
                Claim(cid, claim, f"{PAPER} §6.3", value, ours, tol, CONFIRMED if ok else DIFFERS, cmd, note)
            )
    from kvsim.engine.engine_input import EngineInput

    has_beam = "beam" in {f.name for f in dataclasses.fields(EngineInput)}
    for ds, (lo, hi) in beam.items():
        claim = f"§6.3 Fig. 15: memory saved by sharing, beam search width 2-6, {ds}"
        why = (
            "the engine has no beam-search model (pruning and forking beams): EngineInput carries no beam "
            "column, so a workload's beam flag would run as independent samples"
            if not has_beam
            else "beam search experiment not yet wired into the claims suite"
        )
        out.append(
            not_testable(f"P-beam-{ds}", claim, f"{PAPER} §6.3", f"{pct(lo)} - {pct(hi)}", tol, "-", why)
        )
    return out


def _prefix_claims(res: Results, scale: float) -> list[Claim]:
    out: list[Claim] = []
    cmd = res.experiment.command(scale)
    for shots, plen, src in (("1-shot", 80, 1.67), ("5-shot", 341, 3.58)):
        claim = f"§6.4: shared {shots} prefix ({plen} tokens), vLLM throughput vs Orca (Oracle), LLaMA-13B"
        if res.error:
            out.append(
                not_testable(f"P-prefix-{shots}", claim, f"{PAPER} §6.4", f"{src}x", "± 25 %", cmd, res.error)
            )
            continue
        v = res.get("throughput_rps", policy="vllm", **{"workload.system_prompt_len": plen})[0]
        o = res.get("throughput_rps", policy="orca-oracle", **{"workload.system_prompt_len": plen})[0]
        ratio = v / o
        note = (
            "proxy: saturation throughput of a queue of requests, not the paper's highest rate at equal "
            "latency; assumed WMT16 lengths (see setup)"
        )
        out.append(
            Claim(f"P-prefix-{shots}", claim, f"{PAPER} §6.4", f"{src}x", f"{ratio:.2f}x", "± 25 %",
                  within_rel(ratio, src, 0.25), cmd, note)
        )  # fmt: skip
    return out


def _block_size_paper(res: Results, scale: float) -> list[Claim]:
    cmd = res.experiment.command(scale)
    claim_s = "§7.1 Fig. 18a: ShareGPT is insensitive to block sizes 16-128"
    claim_a = (
        "§7.1 Fig. 18a: on Alpaca, blocks larger than 32 degrade performance (the paper: 16 and 32 work well, "
        "larger sizes degrade it)"
    )
    tol_s = "paired per-seed saturation throughput at 64 and 128 within 10 % of block 16 (mean of the ratios)"
    tol_a = (
        "paired per-seed saturation throughput at every block above 32 (64, 128, 256) at least 10 % below "
        "block 16 (mean of the ratios)"
    )
    small = (
        "ratios are each seed's throughput over its own block-16 run (the same requests), mean ± 95 % "
        "t-interval over the seeds; the lower end (block 8 slower on the GPU because the kernel cannot use "
        "its parallelism) is a kernel effect outside the memory model: NOT TESTABLE"
    )
    if res.error:
        return [
            not_testable("P-block-sharegpt", claim_s, f"{PAPER} §7.1", "16-128 flat", tol_s, cmd, res.error),
            not_testable("P-block-alpaca", claim_a, f"{PAPER} §7.1", ">32 worse", tol_a, cmd, res.error),
        ]
    metric = "throughput_rps"
    out = []
    for ds, claim, tol, src in (
        ("sharegpt", claim_s, tol_s, "16-128 flat"),
        ("alpaca", claim_a, tol_a, ">32 worse"),
    ):
        label = f"{ds}:arrivals=all-at-once"
        ratios = {
            b: mean_ci(v) for b, v in res.paired_ratios(metric, "block_size", 16, workload=label).items()
        }
        base = res.get(metric, workload=label, block_size=16)[0]
        ours = (
            ", ".join(f"{b}: {m:.3f}x ± {c:.3f}" for b, (m, c) in ratios.items() if b != 16)
            + f" of block 16 ({base:.2f} req/s)"
        )
        r = {b: m for b, (m, _) in ratios.items()}
        note = small
        if ds == "sharegpt":
            ok = all(r[b] >= 0.9 for b in (64, 128))
        else:
            # (every size the paper's "larger than 32" covers: the verdict once tested 128 alone and read
            # CONFIRMED beside 64's 0.993x, block 16's throughput: user audit 54 #2)
            larger = [b for b in r if b > 32]
            held = [b for b in larger if r[b] <= 0.9]
            ok = bool(larger) and len(held) == len(larger)
            if not ok:
                missed = [b for b in larger if b not in held]
                at = _sizes(ratios, held, False) if held else "no block above 32"
                note = f"larger blocks degrade throughput at {at} but not at {_sizes(ratios, missed, True)}; {small}"
        out.append(
            Claim(
                f"P-block-{ds}",
                claim,
                f"{PAPER} §7.1",
                src,
                ours,
                tol,
                CONFIRMED if ok else DIFFERS,
                cmd,
                note,
            )
        )
    return out


def _sizes(ratios: Mapping[int, tuple[float, float]], blocks: Sequence[int], ci: bool) -> str:
    """`blocks` with their mean ratios (and 95 % half-widths with `ci`): "128 (0.824x) and 256 (0.508x)"."""
    each = [f"{b} ({ratios[b][0]:.3f}x" + (f" ± {ratios[b][1]:.3f})" if ci else ")") for b in blocks]
    return " and ".join([", ".join(each[:-1]), each[-1]] if len(each) > 1 else each)


def sizing_claim() -> Claim:
    from kvsim.model.sizing import pool_blocks

    slots = (pool_blocks("opt-13b", None, 16, kv_cache_bytes=12 * GIB, null_block="extra") - 1) * 16
    exact = 12 * GIB // 819_200
    return Claim(
        "P-table1",
        "Table 1: 12 GB of KV cache for OPT-13B holds 15.7K tokens",
        f"{PAPER} Table 1",
        "15.7K",
        f"{exact:,} token slots ({slots:,} in whole blocks of 16)",
        "± 1 %",
        within_rel(exact, 15_700, 0.01),
        "python -c \"import kvsim; print(kvsim.pool_blocks('opt-13b', None, 16, kv_cache_bytes=12 * 2**30, null_block='extra'))\"",
    )
