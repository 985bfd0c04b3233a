"""Paged attention numerics: a run's event log replayed into a real KV pool, decode attention checked.

`sample_run` simulates a small workload with shared system prompts (prefix hits) and fork-cow samples
(copy-on-write) on the Rust engine with `record_events=True`. `replay` rebuilds every sequence's block
table from that log alone (admit, prefix-hit, allocate, cow-copy, fork, free, finish) and drives a real
pool tensor `[num_blocks, block_size, kv_heads, head_dim]` per layer:

- a sequence writes its tokens' K/V (`kvsim.gpu.content`) into the slots its table gives, once each; a
  block it received by a prefix hit or a fork is not written again (the first holder wrote it);
- a cow-copy is a real block copy (`pool[new] = pool[old]`), after which the copy's writer must leave the
  old block's values intact (checked after its first write);
- every slot is written at most once per allocation of its block, and never while another table holds
  the block (counted: `double_writes`, `shared_writes`); freshly allocated blocks are filled with NaN, so
  a read of a slot nobody wrote poisons the result;
- when a sequence finishes (its KV length is then exactly `prompt_len + target - 1`), its decode
  attention for one random query per layer is computed by gathering its blocks and compared with the same
  attention over a contiguous copy of its true K/V, with `torch.nn.functional.scaled_dot_product_attention`
  on that copy, and with a float64 reference.

Faults (`FAULTS`) make the replay wrong on purpose so that the tests can show the checks catch them.
Writes are lazy but ordered: a position is written once the log proves it computed (a later block
allocated, the fork after the prompt, a prefix hit on its full block, the finish), which is always before
anything reads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import kvsim
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.errors import InvalidArgumentError
from kvsim.gpu.content import kv_values, sequence_tokens, token_tags
from kvsim.model.models import Model
from kvsim.model.models import get as get_model
from kvsim.workloads import Workload, synthetic

FAULTS = ("gather-order", "write-twice", "off-by-one", "cow-alias")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Max |paged - reference| allowed, per dtype, for attention outputs of magnitude <= 1: paged vs float64 is
# the dtype's rounding (inputs exact in the dtype, softmax and sums in float32); paged vs SDPA adds the
# other kernel's rounding. Paged vs contiguous (same kernel, same values) must be exactly 0.
THRESHOLDS = {
    "fp32": {"vs_fp64": 1e-5, "vs_sdpa": 1e-5},
    "fp16": {"vs_fp64": 4e-3, "vs_sdpa": 4e-3},
    "bf16": {"vs_fp64": 3e-2, "vs_sdpa": 3e-2},
}


def sample_run(num_requests: int = 24, *, num_blocks: int = 32, block_size: int = 16, seed: int = 0) -> Any:
    """A small run with prefix sharing and fork-cow samples: (workload, config, SimResult with events).

    Half of the requests share one of two system prompts (prefix hits); the other half ask for three
    samples each (forked copy-on-write after the prompt). The pool is small enough that blocks are
    evicted and reused and sequences preempted (recomputed), groups split.
    """
    half = max(1, num_requests // 2)
    lengths = {"prompt_len": (8, 40), "output_len": (2, 30)}
    shared = synthetic(
        half,
        arrival_rate=400.0,
        lengths="uniform",
        length_params=lengths,
        num_system_prompts=2,
        system_prompt_len=2 * block_size + 3,
        seed=seed,
    )
    forked = synthetic(
        max(1, num_requests - half),
        arrival_rate=400.0,
        lengths="uniform",
        length_params=lengths,
        num_samples=3,
        first_request_id=1_000_000,
        seed=seed + 1,
    )
    workload = Workload.concat([shared, forked])
    config = kvsim.SimConfig(
        num_blocks=num_blocks,
        block_size=block_size,
        sampling="fork-cow",
        max_num_seqs=32,
        max_num_batched_tokens=512,
    )
    return workload, config, kvsim.simulate(workload, config, record_events=True)


@dataclass
class DtypeResult:
    """What one replay found for one dtype (all counts over the whole run)."""

    dtype: str
    sequences_checked: int = 0
    layers: int = 0
    kv_mismatches: int = 0  # sequences whose gathered K or V differs from their true K/V in any bit
    max_abs_vs_contiguous: float = 0.0
    max_abs_vs_sdpa: float = 0.0
    max_rel_vs_sdpa: float = 0.0
    max_abs_vs_fp64: float = 0.0
    max_rel_vs_fp64: float = 0.0
    double_writes: int = 0
    shared_writes: int = 0
    table_mismatches: int = 0
    cow_copies: int = 0
    cow_parent_changed: int = 0
    prefix_hits: int = 0
    forks: int = 0
    cross_reads: int = 0  # sequences that read at least one slot another sequence wrote
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)

    def passed(self) -> bool:
        if self.skipped is not None:
            return True
        t = THRESHOLDS[self.dtype]
        return (
            self.sequences_checked > 0
            and self.kv_mismatches == 0
            and self.max_abs_vs_contiguous == 0.0
            and self.max_abs_vs_sdpa <= t["vs_sdpa"]
            and self.max_abs_vs_fp64 <= t["vs_fp64"]
            and self.double_writes == 0
            and self.shared_writes == 0
            and self.table_mismatches == 0
            and self.cow_parent_changed == 0
        )

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["passed"] = self.passed()
        out["thresholds"] = THRESHOLDS[self.dtype]
        return out


def _finite_max(x: torch.Tensor) -> float:
    """max |x|, with NaN (a slot nobody wrote) counted as infinite."""
    x = x.abs()
    if torch.isnan(x).any():
        return math.inf
    return float(x.max()) if x.numel() else 0.0


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode attention of one query `[heads, d]` over `[n, kv_heads, d]` keys/values (grouped-query:
    query head `h` reads KV head `h // (heads / kv_heads)`); scores and softmax in float32, the result in
    `q`'s dtype (float64 stays float64)."""
    heads, d = q.shape
    groups = k.shape[1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    qq = q.to(acc).reshape(groups, heads // groups, d)
    scores = torch.einsum("grd,ngd->grn", qq, k.to(acc)) / math.sqrt(d)
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("grn,ngd->grd", probs, v.to(acc)).reshape(heads, d).to(q.dtype)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same attention through `torch.nn.functional.scaled_dot_product_attention` (its own kernel)."""
    qq = q[None, :, None, :]  # [1, heads, 1, d]
    kk = k.permute(1, 0, 2)[None]  # [1, kv_heads, n, d]
    vv = v.permute(1, 0, 2)[None]
    out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True)
    return out[0, :, 0, :]


class Replay:
    """Replays an event log into real pool tensors; see the module docstring."""

    def __init__(
        self,
        inp: EngineInput,
        num_blocks: int,
        block_size: int,
        model: Model,
        num_layers: int,
        dtype: str,
        device: str,
        faults: Iterable[str] = (),
        seed: int = 0,
    ) -> None:
        self.faults = set(faults)
        unknown = self.faults - set(FAULTS)
        if unknown:
            raise InvalidArgumentError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
        if model.is_mla:
            raise InvalidArgumentError(f"{model.name} caches an MLA latent; pick a model with K/V heads")
        self.inp, self.bs, self.device = inp, block_size, device
        self.kvh, self.hd, self.heads = model.num_kv_heads, model.head_dim, model.num_attention_heads
        self.num_layers = num_layers
        self.dtype = DTYPES[dtype]
        self.result = DtypeResult(dtype=dtype, layers=num_layers)
        shape = (num_blocks, block_size, self.kvh, self.hd)
        self.k = [torch.full(shape, math.nan, dtype=self.dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.full(shape, math.nan, dtype=self.dtype, device=device) for _ in range(num_layers)]
        self.written = np.zeros((num_blocks, block_size), dtype=bool)
        self.writer = np.full((num_blocks, block_size), -1, dtype=np.int64)
        self.holders = np.zeros(num_blocks, dtype=np.int64)
        self.owner = np.full((num_blocks, 2), -1, dtype=np.int64)  # (sequence, index in its table)
        self.alias: dict[int, int] = {}  # cow-alias fault: a "copy" that is the old block itself
        self.tables: dict[int, list[int]] = {}
        self.pending: dict[int, int] = {}  # positions below are in the sequence's blocks
        # new block -> (old block, its copier, the old block's K of layer 0 and its writers at the copy)
        self.cow_watch: dict[int, tuple[int, int, list[torch.Tensor], np.ndarray]] = {}
        self._tags: dict[int, np.ndarray] = {}
        self.gen = torch.Generator().manual_seed(seed)

    # -- content ------------------------------------------------------------------------------------
    def tags(self, seq: int) -> np.ndarray:
        if seq not in self._tags:
            self._tags[seq] = token_tags(sequence_tokens(self.inp, seq))
        return self._tags[seq]

    def truth(self, seq: int, positions: np.ndarray, layer: int, which: int) -> torch.Tensor:
        vals = kv_values(self.tags(seq)[positions], layer, which, self.kvh * self.hd)
        t = torch.from_numpy(vals).reshape(len(positions), self.kvh, self.hd)
        return t.to(device=self.device, dtype=self.dtype)

    def phys(self, block: int) -> int:
        return self.alias.get(block, block)

    # -- writes -------------------------------------------------------------------------------------
    def _write(self, seq: int, positions: np.ndarray, blocks: np.ndarray, slots: np.ndarray) -> None:
        """Writes `seq`'s K/V of `positions` into (block, slot) pairs, counting forbidden writes."""
        if not len(positions):
            return
        if "off-by-one" in self.faults:  # the slot mapping shifted by one slot
            flat = (blocks * self.bs + slots + 1) % (len(self.holders) * self.bs)
            blocks, slots = flat // self.bs, flat % self.bs
        r = self.result
        r.double_writes += int(self.written[blocks, slots].sum())
        r.shared_writes += int((self.holders[blocks] > 1).sum())
        self.written[blocks, slots] = True
        self.writer[blocks, slots] = seq
        phys = torch.as_tensor([self.phys(int(b)) for b in blocks], device=self.device)
        sl = torch.as_tensor(slots, device=self.device)
        for layer in range(self.num_layers):
            self.k[layer][phys, sl] = self.truth(seq, positions, layer, 0)
            self.v[layer][phys, sl] = self.truth(seq, positions, layer, 1)
        for b in set(int(x) for x in blocks):
            watched = self.cow_watch.get(b)
            if watched is not None and watched[1] == seq:
                del self.cow_watch[b]
                old, _, snapshot, writers = watched
                keep = torch.as_tensor(self.writer[old] == writers, device=self.device)  # not written since
                now = self.k[0][self.phys(old)]
                same = torch.equal(torch.nan_to_num(now[keep], 7.0), torch.nan_to_num(snapshot[0][keep], 7.0))
                r.cow_parent_changed += 0 if same else 1

    def flush(self, seq: int, upto: int) -> None:
        """Writes `seq`'s positions from its pending mark up to `upto` through its table."""
        start = self.pending.get(seq, 0)
        if upto <= start:
            return
        table = np.asarray(self.tables[seq], dtype=np.int64)
        pos = np.arange(start, upto, dtype=np.int64)
        if int(pos[-1]) // self.bs >= len(table):
            self.result.table_mismatches += 1
            pos = pos[pos // self.bs < len(table)]
        self._write(seq, pos, table[pos // self.bs], pos % self.bs)
        self.pending[seq] = upto

    def ensure_full(self, block: int) -> None:
        """A prefix hit reads a full block: its owner has computed all of it, so write what is missing."""
        if self.written[block].all():
            return
        seq, j = (int(x) for x in self.owner[block])
        table = self.tables.get(seq)
        if table is not None and len(table) > j and table[j] == block:
            self.flush(seq, (j + 1) * self.bs)
            return
        missing = np.flatnonzero(~self.written[block])  # the owner left (preempted): its tokens stand
        self._write(seq, j * self.bs + missing, np.full(len(missing), block), missing)

    def released(self, block: int) -> None:
        """One holder less. A partial block left with one holder (after the others copied it or left) is
        written on by that holder in place: its slots still empty hold that holder's tokens."""
        self.holders[block] -= 1
        if self.holders[block] != 1 or self.written[block].all():
            return
        j = int(self.owner[block][1])
        for seq, table in self.tables.items():
            if len(table) > j and table[j] == block:
                self.owner[block] = (seq, j)
                return

    def new_block(self, block: int, seq: int, index: int) -> None:
        self.written[block] = False
        self.writer[block] = -1
        self.owner[block] = (seq, index)
        self.alias.pop(block, None)
        for layer in range(self.num_layers):
            self.k[layer][block] = math.nan
            self.v[layer][block] = math.nan

    # -- events -------------------------------------------------------------------------------------
    def event(self, kind: str, seq: int, block: int) -> None:
        r, bs = self.result, self.bs
        if kind == "admit":
            self.tables[seq] = []
            self.pending[seq] = 0
        elif kind == "prefix-hit":
            r.prefix_hits += 1
            self.ensure_full(block)
            table = self.tables[seq]
            if "write-twice" in self.faults:  # recomputes the shared block instead of reusing it
                pos = np.arange(len(table) * bs, (len(table) + 1) * bs)
                self._write(seq, pos, np.full(bs, block), pos % bs)
            table.append(block)
            self.holders[block] += 1
            self.pending[seq] = len(table) * bs
        elif kind == "allocate":
            table = self.tables[seq]
            self.new_block(block, seq, len(table))
            table.append(block)
            self.holders[block] += 1
            self.flush(seq, (len(table) - 1) * bs)  # every block but the last is full
        elif kind == "cow-copy":
            r.cow_copies += 1
            table = self.tables[seq]
            old = table[-1]
            self.new_block(block, seq, len(table) - 1)
            self.written[block] = self.written[old]
            self.writer[block] = self.writer[old]
            if "cow-alias" in self.faults:
                self.alias[block] = self.phys(old)
            else:
                for layer in range(self.num_layers):
                    self.k[layer][block].copy_(self.k[layer][self.phys(old)])
                    self.v[layer][block].copy_(self.v[layer][self.phys(old)])
            self.cow_watch[block] = (old, seq, [self.k[0][self.phys(old)].clone()], self.writer[old].copy())
            table[-1] = block
            self.holders[block] += 1
            self.released(old)
        elif kind == "fork":
            r.forks += 1
            parent = int(self.inp.fork_parent[seq])
            self.flush(parent, int(self.inp.prompt_len[parent]))  # the parent's prompt is computed
            self.tables[seq] = list(self.tables[parent])
            for b in self.tables[seq]:
                self.holders[b] += 1
            self.pending[seq] = self.pending[parent]
        elif kind == "free":
            table = self.tables.get(seq, [])
            if not table or table[-1] != block:  # frees come in reverse table order
                r.table_mismatches += 1
                if block in table:
                    table.remove(block)
            else:
                table.pop()
            self.released(block)
            if not table:
                self.tables.pop(seq, None)
                self.pending.pop(seq, None)
        elif kind == "finish":
            n = int(self.inp.prompt_len[seq] + self.inp.target[seq] - 1)  # the last token is never stored
            if len(self.tables.get(seq, [])) != -(-n // bs):
                r.table_mismatches += 1
                return
            self.flush(seq, n)
            self.check(seq, n)
        elif kind in ("swap-out", "swap-in"):
            raise InvalidArgumentError(f"event {kind!r}: the replay models recompute preemption only")
        # preempt (its frees follow), evict (an allocate follows), reject: no table change

    # -- reads --------------------------------------------------------------------------------------
    def check(self, seq: int, n: int) -> None:
        """Decode attention of `seq` over its `n` stored tokens: paged gather vs contiguous truth."""
        r = self.result
        table = list(self.tables[seq])
        if "gather-order" in self.faults:
            table = table[::-1]
        phys = torch.as_tensor([self.phys(b) for b in table], device=self.device)
        pos = np.arange(n)
        r.sequences_checked += 1
        blocks = np.asarray(self.tables[seq])[pos // self.bs]
        if (self.writer[blocks, pos % self.bs] != seq).any():
            r.cross_reads += 1
        mismatch = False
        for layer in range(self.num_layers):
            k = self.k[layer][phys].reshape(-1, self.kvh, self.hd)[:n]
            v = self.v[layer][phys].reshape(-1, self.kvh, self.hd)[:n]
            kt, vt = self.truth(seq, pos, layer, 0), self.truth(seq, pos, layer, 1)
            mismatch |= not (torch.equal(k, kt) and torch.equal(v, vt))
            q = torch.randn(self.heads, self.hd, generator=self.gen).to(device=self.device, dtype=self.dtype)
            paged = attention(q, k, v)
            contiguous = attention(q, kt, vt)
            ref = sdpa(q, kt, vt)
            exact = attention(q.double(), kt.double(), vt.double())
            r.max_abs_vs_contiguous = max(r.max_abs_vs_contiguous, _finite_max(paged - contiguous))
            d_sdpa = _finite_max(paged.double() - ref.double())
            d_exact = _finite_max(paged.double() - exact)
            r.max_abs_vs_sdpa = max(r.max_abs_vs_sdpa, d_sdpa)
            r.max_abs_vs_fp64 = max(r.max_abs_vs_fp64, d_exact)
            r.max_rel_vs_sdpa = max(r.max_rel_vs_sdpa, d_sdpa / max(_finite_max(ref.double()), 1e-30))
            r.max_rel_vs_fp64 = max(r.max_rel_vs_fp64, d_exact / max(_finite_max(exact), 1e-30))
        r.kv_mismatches += int(mismatch)


def dtype_support(dtype: str, device: str) -> str | None:
    """None if `device` runs `dtype`, else the reason it is skipped."""
    if dtype == "bf16" and device.startswith("cuda"):
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        if major < 8:
            return f"bf16 needs compute capability 8.0 (Ampere) or newer; this device is sm_{major}{minor}"
    return None


def replay(
    run: Any,
    model: Model | str,
    *,
    num_layers: int = 2,
    dtype: str = "fp32",
    device: str = "cpu",
    faults: Iterable[str] = (),
    seed: int = 0,
) -> DtypeResult:
    """Replays `run` = (workload, config, result with events) for one dtype; see the module docstring."""
    workload, config, result = run
    m = get_model(model) if isinstance(model, str) else model
    if result.events is None:
        raise InvalidArgumentError("the run has no event log: simulate with record_events=True")
    skip = dtype_support(dtype, device)
    if skip is not None:
        return DtypeResult(dtype=dtype, layers=num_layers, skipped=skip)
    inp = prepare(workload, config)
    seq_of = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(inp.request_id, inp.sample, strict=True))}
    rp = Replay(inp, config.num_blocks, config.block_size, m, num_layers, dtype, device, faults, seed)
    ev = result.events
    for kind, rid, sample, block in zip(
        ev["kind"].cast(str).to_list(),
        ev["request_id"].to_list(),
        ev["sample"].to_list(),
        ev["block"].to_list(),
        strict=True,
    ):
        rp.event(kind, seq_of[(rid, sample)], int(block))
    return rp.result


def run_numerics(
    model: Model | str, *, device: str = "cpu", num_layers: int = 2, quick: bool = True, seed: int = 0
) -> dict[str, Any]:
    """The numerics section of the report: one run, replayed for fp32, fp16 and bf16."""
    run = sample_run(24 if quick else 96, num_blocks=32 if quick else 64, seed=seed)
    out: dict[str, Any] = {
        "model": get_model(model).name if isinstance(model, str) else model.name,
        "layers": num_layers,
        "block_size": run[1].block_size,
        "num_blocks": run[1].num_blocks,
        "requests": len(run[0]),
        "events": run[2].events.height,
        "summary": {
            k: run[2].summary[k] for k in ("cow_copies", "evictions", "preemptions", "prefix_hit_tokens")
        },
        "dtypes": {},
    }
    for dtype in DTYPES:
        out["dtypes"][dtype] = replay(
            run, model, num_layers=num_layers, dtype=dtype, device=device, seed=seed
        ).as_dict()
    out["passed"] = all(d["passed"] for d in out["dtypes"].values())
    return out


__all__ = ["DTYPES", "FAULTS", "THRESHOLDS", "DtypeResult", "Replay", "replay", "run_numerics", "sample_run"]
