"""`kvsim run`'s CPU tier table and a fleet's per-replica hit rates with tiers (audit54 #6-#9): the rows
tagged with vLLM's counter names measure what those counters count (first admissions: vLLM 0.34.0's
`PrefixCacheStats.record` puts a resumed request's lookup in `preempted_*`), the shares sum as they say,
the tags are vLLM's metric names, a Mooncake trace's run shows its own reuse ceiling, and a fleet's
per-replica hit rate says it is the GPU's, the tier's share beside it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from kvsim.cli import main
from kvsim.workloads.registry import make_workload

# The audit's command (#6): a pool small enough to preempt, so that resumes and first admissions differ.
PREEMPTING = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--num-gpu-blocks-override", "1200"]
PREEMPTING += ["--workload", "mooncake-conversation:time_scale=2", "--requests", "1000"]
PREEMPTING += ["--kv-offloading-size", "128"]


def tier_rows(out: str) -> dict[str, str]:
    """The CPU tier table's rows, label -> value (labels and values are split by two or more spaces, or by
    the one space after the longest label)."""
    lines = out.splitlines()
    head = lines.index("== CPU tier ==")
    rows = {}
    for line in lines[head + 1 :]:
        if not line.startswith("  ") or line.startswith("  ("):
            break
        label, value = re.split(r"\s{2,}|(?<=\]) (?=\d)", line.strip(), maxsplit=1)
        rows[label] = value
    return rows


def pct(text: str) -> float:
    return float(text.split(" %")[0])


@pytest.fixture(scope="module")
def preempting() -> tuple[str, dict]:
    """The audit's run: its text and its --json record."""
    import contextlib
    import io

    text, record = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(PREEMPTING) == 0
    with contextlib.redirect_stdout(record):
        assert main([*PREEMPTING, "--json"]) == 0
    return text.getvalue(), json.loads(record.getvalue())


def test_the_tagged_rows_count_first_admissions_as_vllm_does(preempting):
    text, record = preempting
    s = record["summary"]
    # (the run preempts, so every admission and first admissions differ: the test can tell them apart)
    assert s["preemptions"] > 0
    assert abs(s["prefix_hit_rate"] - s["prefix_hit_rate_first_admission"]) > 0.01
    rows = tier_rows(text)
    first = " of first admissions' prompt tokens"
    gpu = rows["GPU prefix hits [prefix_cache_hits]"]
    cpu = rows["CPU tier hits [external_prefix_cache_hits]"]
    computed = rows["computed (misses)"]
    for value, key in (
        (gpu, "prefix_hit_rate_first_admission"),
        (cpu, "cpu_hit_rate_first_admission"),
        (computed, "miss_rate_first_admission"),
    ):
        assert value == f"{100 * s[key]:.1f} %{first}", (value, key)
    # The three tagged shares are of one whole; the unrounded rates sum to 1.
    assert s["prefix_hit_rate_first_admission"] + s["cpu_hit_rate_first_admission"] + s[
        "miss_rate_first_admission"
    ] == pytest.approx(1.0)
    assert abs(pct(gpu) + pct(cpu) + pct(computed) - 100) <= 0.15
    both = rows["hits, first admissions (GPU + CPU)"]
    assert pct(both) == pytest.approx(100 * s["hit_rate_first_admission"], abs=0.05)
    # Every admission, resumes included: the shares that were under vLLM's names before, on a row of their
    # own, summing to 1 as well.
    every = rows["all admissions, resumes included: GPU / CPU / computed"]
    shares = [float(x) for x in re.findall(r"([\d.]+) %", every)]
    assert shares == [round(100 * s[k], 1) for k in ("prefix_hit_rate", "cpu_hit_rate", "miss_rate")]
    assert s["prefix_hit_rate"] + s["cpu_hit_rate"] + s["miss_rate"] == pytest.approx(1.0)
    # vLLM's external_prefix_cache hit rate (--json): the tier's hits over what first admissions asked of it,
    # their prompt tokens less their GPU hits (scheduler.py: queries = num_tokens - local hits).
    asked = 1 - s["prefix_hit_rate_first_admission"]
    assert s["external_prefix_cache_hit_rate"] == pytest.approx(s["cpu_hit_rate_first_admission"] / asked)


def test_the_tier_counters_are_tagged_with_vllms_names(preempting):
    """vLLM 0.34.0: `vllm:kv_offload_allocation_failure` (offloading/metrics.py) and
    `vllm:kv_offload_stores_skipped` (kv_offload/cpu/common.py); the rows had `[allocation_failure]` and no tag."""
    text, _ = preempting
    rows = tier_rows(text)
    assert "store attempts, no room [kv_offload_allocation_failure]" in rows
    assert "stores skipped [kv_offload_stores_skipped]" in rows
    assert "[allocation_failure]" not in text


def independent_ceiling(w, block: int, keep: list[bool]) -> float:
    """An infinite cache's GPU + tier hit rate over the kept requests, from whole hash-id prefixes (a
    prefix of `k` ids hit if an earlier kept request had the same `k` ids, its last one at least as long),
    up to the prompt less one token, whole blocks."""
    seen: dict[tuple[int, ...], int] = {}
    hits = total = 0
    for i in range(len(w.prompt_len)):
        if not keep[i]:
            continue
        lo, hi = int(w.seg_offsets[i]), int(w.seg_offsets[i + 1])
        ids, lens = w.segment_id[lo:hi].tolist(), w.segment_len[lo:hi].tolist()
        hit, going = 0, True
        for k in range(len(ids)):
            prefix = tuple(ids[: k + 1])
            before = seen.get(prefix, 0)
            if going:
                hit += min(before, lens[k])
                going = before >= lens[k]
            seen[prefix] = max(before, lens[k])
        p = int(w.prompt_len[i])
        hits += min(hit // block * block, p - 1)
        total += p
    return hits / total


def test_a_mooncake_runs_tier_table_shows_its_own_reuse_ceiling(capsys):
    """audit54 #8: README set its example beside the whole trace's 37-38 % ceiling; the run's own (its
    2,000 rows: 29.4 %) is in the table and --json."""
    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "600"]
    argv += ["--workload", "mooncake-conversation:time_scale=4", "--kv-offloading-size", "64"]
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    s, ceiling = record["summary"], record["reuse_ceiling"]
    w = make_workload("mooncake-conversation", {"time_scale": 4}, 600, 0)
    assert s["rejected"] == 0
    assert ceiling == pytest.approx(independent_ceiling(w, 64, [True] * 600))
    assert s["hit_rate_first_admission"] <= ceiling < 1
    assert main(argv) == 0
    row = tier_rows(capsys.readouterr().out)["hits, first admissions (GPU + CPU)"]
    assert row.endswith(
        f"of a reuse ceiling of {100 * ceiling:.1f} % (an infinite cache's over the requests admitted)"
    )
    # Rejected requests neither count nor leave a prefix: Llama-3-8B's 8,192 tokens reject most of them.
    short = ["--model", "llama-3-8b", *argv[3:]]
    assert main(["run", *short, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["summary"]["rejected"] > 0
    keep = (np.asarray(w.prompt_len) < 8192).tolist()
    assert record["reuse_ceiling"] == pytest.approx(independent_ceiling(w, 64, keep))
    # Another workload's segment ids need not be chained: no ceiling; nor without a tier.
    assert main([*argv[:-4], "--workload", "sharegpt", "--kv-offloading-size", "64", "--json"]) == 0
    assert "reuse_ceiling" not in json.loads(capsys.readouterr().out)
    assert main([*argv[:-2], "--json"]) == 0
    assert "reuse_ceiling" not in json.loads(capsys.readouterr().out)


def test_a_fleet_with_tiers_says_its_hit_rate_is_the_gpus(capsys):
    """audit54 #9: the per-replica hit rate is the GPU's alone; with tiers the column says so and the
    tier's share (over the same prompt tokens) stands beside it. Without tiers the column is as it was."""
    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "600", "--replicas", "2"]
    argv += ["--router", "prefix-affinity", "--workload", "mooncake-conversation:time_scale=4"]
    tier = [*argv, "--kv-offloading-size", "64"]
    assert main([*tier, "--json"]) == 0
    per = json.loads(capsys.readouterr().out)["fleet"]["per_replica"]
    assert main(tier) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, x in enumerate(out) if x.startswith("== fleet: 2 replicas"))
    assert out[head + 1].split() == ["replica", "routed", "finished", "req/s", "GPU", "hit", "rate", "CPU", "tier",
                                     "hits", "TTFT", "p99", "ms", "preemptions"]  # fmt: skip
    for i, x in enumerate(per):
        cells = out[head + 2 + i].split()
        assert (cells[4], cells[6]) == (f"{100 * x['prefix_hit_rate']:.1f}", f"{100 * x['cpu_hit_rate']:.1f}")
    assert any(x["cpu_hit_rate"] > 0 for x in per)
    assert out[head + 4].startswith("  (GPU hit rate, CPU tier hits: the replica's hit tokens on its GPU and")
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, x in enumerate(out) if x.startswith("== fleet: 2 replicas"))
    assert out[head + 1].split()[4:6] == ["hit", "rate"]
    assert not any("CPU tier hits" in x for x in out)
