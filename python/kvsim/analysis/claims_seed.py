"""The seed simulators' claims (fragmentation, block size, prefix sharing, memory budget) and the real
traces' (Mooncake's prefix-cache ceiling, Azure's policies; DESIGN.md §Claims): their experiments and the
claims they check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from kvsim.analysis.claims_model import (
    CONFIRMED,
    DIFFERS,
    PAPER,
    SEED_BASE,
    SEED_WORKLOAD,
    TOKEN_SHARE,
    Claim,
    Experiment,
    Results,
    monotone,
    not_testable,
    order_note,
    order_verdict,
    pct,
    slack_pairs,
    ticks_of,
)
from kvsim.analysis.sweep import make_workload
from kvsim.model.units import fmt_duration_ps


def seed_experiments() -> list[Experiment]:
    """The seed simulators' and the traces' experiments (request counts before `scale`), in claims.md's order."""
    return [
        Experiment(
            "seed-fragmentation",
            [SEED_WORKLOAD + ",arrivals=all-at-once,max_tokens=512"],
            {"policy": ["static", "orca-max", "orca-pow2", "orca-oracle", "vllm"]},
            {**SEED_BASE, "block_size": 16, "max_model_len": 512, "enable_prefix_caching": False},
            requests=100,
            seeds=5,
            scalable=False,
            why="8,192 tokens (512 blocks of 16), 100 sequences queued at t=0, max_seq_len 512, prompt and "
            "output uniform in [16, 256], one iteration per ms",
        ),
        Experiment(
            "seed-block-size",
            [SEED_WORKLOAD + ",arrivals=all-at-once"],
            {"block_size": [4, 8, 16, 32, 64, 128]},
            {**SEED_BASE, "max_model_len": 512, "enable_prefix_caching": False},
            requests=1_000,
            why="8,192 tokens at every block size, 1,000 sequences queued at t=0, vLLM recompute preemption",
        ),
        Experiment(
            "seed-prefix-sharing",
            [SEED_WORKLOAD + ",system_prompt_len=256,arrivals=all-at-once"],
            {"workload.sharing_ratio": [0.0, 0.25, 0.5, 0.75, 1.0], "enable_prefix_caching": [False, True]},
            {**SEED_BASE, "block_size": 16},
            requests=1_000,
            why="8,192 tokens, block 16; a share of the requests (0-100 %) starts with one 256-token system "
            "prompt; 1,000 requests queued at t=0; prefix caching off and on",
        ),
        Experiment(
            "seed-memory-budget",
            [SEED_WORKLOAD + ",arrivals=all-at-once"],
            {"num_blocks": [257, 513, 1025, 2049, 4097]},
            {"time_model": "ticks", "block_size": 16, "max_model_len": 512, "enable_prefix_caching": False},
            requests=3_000,
            why="256-4,096 usable blocks of 16 tokens, 3,000 requests queued at t=0 (a load that memory "
            "limits: the batch is what the pool holds), one iteration per ms",
        ),
        Experiment(
            "trace-mooncake",
            ["mooncake-conversation", "mooncake-synthetic"],
            {"num_blocks": [2**14 + 1, 2**16 + 1, 2**18 + 1, 2**20 + 1, 2**22 + 1, 2**23 + 1]},
            {
                "model": "llama-3.1-8b",
                "gpu": "h100-80gb",
                "kv_cache_bytes": None,
                "enable_prefix_caching": True,
            },
            requests=20_000,
            seeds=1,
            why="whole traces replayed by timestamp; Llama-3.1-8B (a 131,072-token context: about half of these prompts exceed Llama-3-8B's 8,192) roofline time on an H100; prefix cache of "
            "2^18-2^27 tokens (blocks of 16); the largest holds every distinct block of both traces",
        ),
        Experiment(
            "trace-azure",
            ["azure-code", "azure-conv"],
            {"policy": ["orca-oracle", "vllm"]},
            {
                "model": "llama-3-8b",
                "gpu": "a100-80gb",
                "kv_cache_bytes": None,
                "enable_prefix_caching": False,
            },
            requests=20_000,
            seeds=1,
            why="whole traces replayed by timestamp; Llama-3-8B on an A100-80GB (its pool sized from the memory "
            "measured after warmup, vLLM 0.34.0's default; blocks of 16 tokens)",
        ),
    ]


def seed_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    """The seed simulators' claims."""
    out: list[Claim] = []
    src = "seed simulators' benchmarks (DESIGN.md §Claims)"
    res = r["seed-fragmentation"]
    cmd = res.experiment.command(scale)
    claim = (
        "Fragmentation: contiguous reservation wastes 40 % or more of the memory it holds, paged allocation "
        "almost none"
    )
    tol = "paged token share ≥ 90 % and every contiguous share ≤ 60 %"
    if res.error:
        out.append(not_testable("S-fragmentation", claim, src, "qualitative", tol, cmd, res.error))
    else:
        shares = {
            p: res.get(TOKEN_SHARE, policy=p)[0]
            for p in ("static", "orca-max", "orca-pow2", "orca-oracle", "vllm")
        }
        ok = shares["vllm"] >= 0.90 and all(v <= 0.60 for k, v in shares.items() if k != "vllm")
        ours = ", ".join(f"{k} {pct(v)}" for k, v in shares.items())
        util = res.get("kv_utilization", policy="vllm")[0]
        out.append(
            Claim("S-fragmentation", claim, src, "setup only (paper: 20.4-38.2 % vs 96.3 %)", ours, tol,
                  CONFIRMED if ok else DIFFERS, cmd, f"token share of used memory; paged pool utilisation {pct(util)}")
        )  # fmt: skip
    res = r["seed-block-size"]
    cmd = res.experiment.command(scale)
    claim = (
        "Block size sweep: a trade-off, larger blocks raise internal fragmentation and admit fewer "
        "requests, so they preempt less"
    )
    tol = "fragmentation non-decreasing, preemptions non-increasing in block size (5 % slack)"
    if res.error:
        out.append(not_testable("S-block-size", claim, src, "qualitative", tol, cmd, res.error))
    else:
        sizes, frag = res.series("internal_fragmentation", "block_size")
        _, pre = res.series("preemptions", "block_size")
        ok = monotone(frag, True) and monotone(pre, False, slack=0.05)
        against = [order_note(slack_pairs(frag, True, sizes), "fragmentation"),
                   order_note(slack_pairs(pre, False, sizes), "preemptions")]  # fmt: skip
        ours = "; ".join(
            f"{b}: {pct(f)} int. frag, {p:.0f} preemptions" for b, f, p in zip(sizes, frag, pre, strict=True)
        )
        verdict = order_verdict(ok and not any(against), ok)
        out.append(
            Claim(
                "S-block-size",
                claim,
                src,
                "qualitative",
                ours,
                tol,
                verdict,
                cmd,
                "; ".join(a for a in against if a),
            )
        )
    res = r["seed-prefix-sharing"]
    cmd = res.experiment.command(scale)
    claim = (
        "Prefix sharing sweep 0-100 %: hit rate, blocks saved and the throughput gain of prefix caching "
        "rise with the sharing ratio"
    )
    tol = "all three non-decreasing (2 % slack)"
    if res.error:
        out.append(not_testable("S-prefix-sharing", claim, src, "qualitative", tol, cmd, res.error))
    else:
        ratios, hit = res.series("prefix_hit_rate", "workload.sharing_ratio", enable_prefix_caching=True)
        _, saved = res.series("blocks_saved_by_sharing", "workload.sharing_ratio", enable_prefix_caching=True)
        _, on = res.series("throughput_rps", "workload.sharing_ratio", enable_prefix_caching=True)
        _, off = res.series("throughput_rps", "workload.sharing_ratio", enable_prefix_caching=False)
        gain = [a / b for a, b in zip(on, off, strict=True)]
        ok = monotone(hit, True) and monotone(saved, True) and monotone(gain, True)
        against = [order_note(slack_pairs(v, True, ratios), name)
                   for v, name in ((hit, "hit rate"), (saved, "blocks saved"), (gain, "throughput gain"))]  # fmt: skip
        against = [a for a in against if a]
        ours = "; ".join(
            f"{100 * s:.0f} %: hit {pct(h)}, saved {b:.0f} blocks, {g:.2f}x throughput"
            for s, h, b, g in zip(ratios, hit, saved, gain, strict=True)
        )
        note = (
            "throughput gain = caching on / off on the same workload (a system prompt lengthens the prompts, "
            "so raw req/s across ratios compares different work); at 0 % the hits are preempted requests "
            "finding their own blocks"
        ) + "".join(f"; {a}" for a in against)
        out.append(
            Claim(
                "S-prefix-sharing",
                claim,
                src,
                "qualitative",
                ours,
                tol,
                order_verdict(ok and not against, ok),
                cmd,
                note,
            )
        )
    res = r["seed-memory-budget"]
    cmd = res.experiment.command(scale)
    claim = (
        "Memory budget sweep 256-4,096 blocks, a queue that memory limits: throughput rises and P99 latency "
        "falls with memory"
    )
    tol = "throughput non-decreasing, P99 E2E non-increasing (2 % slack)"
    if res.error:
        out.append(not_testable("S-memory-budget", claim, src, "qualitative", tol, cmd, res.error))
    else:
        blocks, thr = res.series("throughput_rps", "num_blocks")
        _, p99 = res.series("e2e_s_p99", "num_blocks")
        ok = monotone(thr, True) and monotone(p99, False)
        against = [order_note(slack_pairs(thr, True, [b - 1 for b in blocks]), "throughput"),
                   order_note(slack_pairs(p99, False, [b - 1 for b in blocks]), "P99 E2E")]  # fmt: skip
        ours = "; ".join(
            f"{b - 1}: {t:.1f} req/s, P99 {p:.2f} s" for b, t, p in zip(blocks, thr, p99, strict=True)
        ) + (f" ({fmt_duration_ps(tick)} ticks: times count steps)" if (tick := ticks_of(res)) else "")
        out.append(
            Claim(
                "S-memory-budget",
                claim,
                src,
                "qualitative",
                ours,
                tol,
                order_verdict(ok and not any(against), ok),
                cmd,
                "; ".join(a for a in against if a),
            )
        )
    return out


def admitted(
    workload: Any, capacity_blocks: int | None, block_size: int = 16, max_model_len: int | None = None
) -> list[bool]:
    """Which requests a pool of `capacity_blocks` blocks (the null block not counted; None: any) admits: a
    prompt that reaches `max_model_len` (None: no limit) is rejected at arrival, and so is a request whose
    peak, `ceil((prompt_len + output_len - 1) / block_size)` blocks (its output cut at `max_model_len`),
    exceeds the pool (DESIGN.md §Engine, step 1). A claim that uses it checks the count against the run's
    `rejected`, so that the rule here cannot drift from the engine's unnoticed."""
    prompt = np.asarray(workload.prompt_len, dtype=np.int64)
    output = np.asarray(workload.output_len, dtype=np.int64)
    keep = np.ones(len(prompt), dtype=bool)
    if max_model_len is not None:
        keep &= prompt < max_model_len
        output = np.minimum(output, np.maximum(max_model_len - prompt, 0))
    if capacity_blocks is not None:
        keep &= -(-(prompt + output - 1) // block_size) <= capacity_blocks
    return keep.tolist()


def experiment_max_model_len(res: Results) -> int | None:
    """The `max_model_len` an experiment's runs had: its base's, else its model's context (the config's
    default, `SimConfig._default_context`), else none."""
    from kvsim.model.config import resolve_model_len

    base = res.experiment.spec().base
    if base.get("max_model_len") is not None:
        return int(base["max_model_len"])
    return resolve_model_len(base["model"]) if base.get("model") is not None else None


def mooncake_ceiling(
    workload: Any,
    block_size: int = 16,
    *,
    capacity_blocks: int | None = None,
    whole_prompt: bool = False,
    max_model_len: int | None = None,
    keep: Any = None,
) -> float:
    """Prefix hit rate of an infinite cache, from the trace's hash ids alone (no engine).

    Mooncake hash ids are chained, so segment k of request r is reusable iff an earlier request had the
    same id at position k; a segment seen before only shorter (a partial last block) reuses that many
    tokens and ends the prefix. Hits are whole `block_size` blocks, at most `prompt_len - 1` tokens: a
    block short of the prompt's end on the GPU, or (`whole_prompt`, a CPU tier's load: DESIGN.md §CPU tier,
    "Metrics") the whole prompt but its last token, which is computed again. Divided by the prompt tokens
    of the requests counted: with `capacity_blocks` or `max_model_len`, those such a pool admits (`admitted`);
    a request it rejects computes nothing, so it neither counts nor leaves a prefix for later ones, as in
    the engine, whose hit rates are over the requests it admitted. `keep` (a bool a request) gives those
    requests instead (`kvsim run`'s CPU tier table: the ones its run did not reject).
    """
    seen: dict[tuple[int, int], int] = {}
    offsets = np.asarray(workload.seg_offsets).tolist()
    ids = np.asarray(workload.segment_id).tolist()
    lens = np.asarray(workload.segment_len).tolist()
    prompt = np.asarray(workload.prompt_len).tolist()
    if keep is None:
        keep = admitted(workload, capacity_blocks, block_size, max_model_len)
    hit_total = prompt_total = 0
    for i in range(len(prompt)):
        if not keep[i]:
            continue
        hit, prefix = 0, True
        for k, j in enumerate(range(offsets[i], offsets[i + 1])):
            key = (k, ids[j])
            before = seen.get(key, 0)
            if prefix:
                hit += min(before, lens[j])
                prefix = before >= lens[j]
            seen[key] = max(before, lens[j])
        cap = prompt[i] - 1 if whole_prompt else (prompt[i] - 1) // block_size * block_size
        hit_total += min(hit // block_size * block_size, cap)
        prompt_total += prompt[i]
    return hit_total / prompt_total if prompt_total else 0.0


def checked_ceiling(
    res: Results, requests: Any, num_blocks: int, /, *, whole_prompt: bool = False, **where: Any
) -> tuple[float, str | None]:
    """`mooncake_ceiling` of the workload `requests` over those a pool of `num_blocks` (the null block
    counted) admits, and why it does not bound the rows of `res` matching `where` (None if it does): the
    requests it counts are not those the runs admitted (`admitted`'s count against the rows' `rejected`)."""
    mml = experiment_max_model_len(res)
    mine = admitted(requests, num_blocks - 1, max_model_len=mml).count(False)
    rows = res.agg
    for k, v in where.items():
        rows = rows.filter(pl.col(k) == v)
    theirs = sorted({round(v) for v in rows["rejected_mean"]})
    why = (
        None if theirs == [mine] else f"the ceiling leaves out {mine:,} requests, the runs rejected {theirs}"
    )
    top = mooncake_ceiling(
        requests, capacity_blocks=num_blocks - 1, whole_prompt=whole_prompt, max_model_len=mml
    )
    return top, why


def trace_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    """The real traces' claims."""
    out: list[Claim] = []
    res = r["trace-mooncake"]
    cmd = res.experiment.command(scale)
    for trace in ("mooncake-conversation", "mooncake-synthetic"):
        claim = f"Prefix-cache hit rate rises with cache size and reaches the trace's reuse ceiling, {trace}"
        tol = "non-decreasing in cache size (1 % relative slack); never above the ceiling; largest cache within 5 pp of it"
        if res.error:
            out.append(not_testable(f"T-{trace}", claim, "trace hash ids", "-", tol, cmd, res.error))
            continue
        w = make_workload(trace, {}, res.experiment.spec(scale).requests, 0)
        blocks, hit = res.series("prefix_hit_rate_first_admission", "num_blocks", workload=trace)
        # Each size bounded by the ceiling over the requests it admits (all of them here: the least cache
        # holds the longest request), the largest's the claim's.
        tops = [checked_ceiling(res, w, b, workload=trace, num_blocks=b) for b in blocks]
        ceiling = tops[-1][0]
        why = next((why for _, why in tops if why), None)
        ok = (
            why is None
            and monotone(hit, True, slack=0.01)
            and all(h <= top + 1e-9 for h, (top, _) in zip(hit, tops, strict=True))
            and ceiling - hit[-1] <= 0.05
        )
        against = order_note(
            slack_pairs(hit, True, [(b - 1) * 16 // 1024 for b in blocks]), "hit rate (K tokens)"
        )
        ours = "; ".join(
            f"{(b - 1) * 16 // 1024}K tokens: {pct(h)}" for b, h in zip(blocks, hit, strict=True)
        )
        _, pre = res.series("preemptions", "num_blocks", workload=trace)
        note = (
            (
                "hit rate over the prompt tokens of first admissions (a resumed request re-finding its own "
                "blocks is not counted); preemptions per size: " + ", ".join(f"{p:.0f}" for p in pre)
            )
            + (f"; NOT COMPARABLE: {why}" if why else "")
            + (f"; {against}" if against else "")
        )
        out.append(
            Claim(f"T-{trace}", claim, "infinite-cache ceiling from the trace's hash_ids (computed, not the engine)",
                  pct(ceiling), ours, tol, order_verdict(ok and not against, ok), cmd, note)
        )  # fmt: skip
    res = r["trace-azure"]
    cmd = res.experiment.command(scale)
    for trace in ("azure-code", "azure-conv"):
        claim = f"Paged KV memory holds token states ≥ 96 % of what it allocates on a real trace, {trace}"
        tol = "≥ 93.3 % (96.3 % − 3 pp; one-sided: less waste agrees with the claim)"
        if res.error:
            out.append(
                not_testable(f"T-{trace}", claim, f"{PAPER} Fig. 2 (vLLM)", "96.3 %", tol, cmd, res.error)
            )
            continue
        share = res.get(TOKEN_SHARE, workload=trace, policy="vllm")[0]
        oracle = res.get(TOKEN_SHARE, workload=trace, policy="orca-oracle")[0]
        util = res.get("kv_utilization", workload=trace, policy="vllm")[0]
        out.append(
            Claim(f"T-{trace}", claim, f"{PAPER} Fig. 2 (vLLM)", "96.3 %", pct(share), tol,
                  CONFIRMED if share >= 0.963 - 0.03 else DIFFERS, cmd,
                  f"pool utilisation (stored / capacity) {pct(util)}; Orca (Oracle) token share {pct(oracle)}")
        )  # fmt: skip
    return out
