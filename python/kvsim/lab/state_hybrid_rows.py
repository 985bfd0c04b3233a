"""A hybrid model's replay as the lab's columns (DESIGN.md §Lab, "A hybrid model"): the rows the
manager-driven pass gives (`kvsim.lab.state_hybrid`: `HybridRows`) turned into the columns `kvsim.lab.state`
keeps for every track, and the token measure the pass has no rows for.

- `block_rows`: `BlockRows` with each row's KV-cache group, a key's label named after the content of the
  block it was registered for, at its group's block size;
- `seq_rows`: `SeqRows` with one block table per group (`keep` and `tail` over (row, group)), the tokens
  from the sequences' pass (`state_seqs._SeqPass`), the tables from the manager's;
- `internal_tokens`: the token slots left empty in each attention group's partly filled last block, per
  state and during each step, from the sequence rows alone (the engine's `internal`).

Nothing here reads the event log: the pass has checked it against the manager already.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.errors import InternalError
from kvsim.lab.state_blocks import BlockRows, SeqRows, _key_labels
from kvsim.lab.state_hybrid import FREE_S, NULL_S, HybridRows
from kvsim.model.config import SimConfig


def internal_tokens(
    step: np.ndarray,
    seq: np.ndarray,
    status: np.ndarray,
    computed: np.ndarray,
    rate: np.ndarray,
    running: int,
    finished: int,
    block_sizes: list[int],
    num_steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Token slots left empty in partly filled blocks (the engine's `internal`: per running sequence and
    attention group, −computed mod the group's block size), per state 0..S and during each step j (after
    its allocation, before its finishes: the sequences running at state j + 1 and those that finished
    then), from sequence rows sorted by (step, seq)."""
    s_total = num_steps + 1
    state_out = np.zeros(s_total, np.int64)
    during = np.zeros(num_steps, np.int64)
    if len(step) == 0 or not block_sizes:
        return state_out, during
    order = np.lexsort((step, seq))  # by sequence, then step
    q, k0 = seq[order], step[order]
    end = np.r_[k0[1:], 0]
    last = np.r_[q[1:] != q[:-1], True]
    end = np.where(last, s_total, end)
    st, c0, r = status[order], computed[order], rate[order]
    run = st == running
    lengths = np.where(run, end - k0, 0)
    total = int(lengths.sum())
    if total:
        idx = np.repeat(np.arange(len(order)), lengths)
        offs = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        ks = k0[idx] + offs
        cs = c0[idx] + r[idx] * offs
        slack = np.zeros(total, np.int64)
        for b in block_sizes:
            slack += -cs % b
        state_out += np.bincount(ks, slack, minlength=s_total).astype(np.int64)
    during[:] = state_out[1:]
    # A finish: a sequence's first finished row (a CPU tier's rows about a finished request, its last
    # stores, give it more rows, finished still).
    first_fin = np.r_[True, (q[1:] != q[:-1]) | (st[:-1] != finished)]
    fin = (st == finished) & first_fin & (k0 >= 1) & (k0 <= num_steps)
    if fin.any():
        extra = np.zeros(int(fin.sum()), np.int64)
        for b in block_sizes:
            extra += -c0[fin] % b
        np.add.at(during, k0[fin] - 1, extra)
    return state_out, during


def block_rows(
    hr: HybridRows,
    inp: EngineInput,
    config: SimConfig,
    names: dict[int, str],
    request_names: list[str],
) -> BlockRows:
    """`BlockRows` (with each row's group) from the pass's rows: every block's initial row at state 0
    (block 0 vLLM's null block, the others free), then the pass's, in step order. A key's label and index
    name the content of the block it was registered for (`state_blocks._key_labels`, at its group's block
    size)."""
    nb = config.num_blocks or 0
    groups = list(config.kv_groups)
    recs = np.array(hr.key_records, np.int64).reshape(-1, 3)
    label = np.full(len(recs), -1, np.int64)
    for g, spec in enumerate(groups):
        m = recs[:, 2] == g
        if m.any():
            label[m] = _key_labels(inp, names, request_names, spec.block_size, recs[m, 0], recs[m, 1])
    rows = hr.block_rows
    n = len(rows)
    step = np.fromiter((r[0] for r in rows), np.int64, n)
    blk = np.fromiter((r[1] for r in rows), np.int64, n)
    state = np.fromiter((r[2] for r in rows), np.int64, n)
    ref = np.fromiter((r[3] for r in rows), np.int64, n)
    key = np.fromiter((r[4] for r in rows), np.int64, n)
    group = np.fromiter((r[6] for r in rows), np.int64, n)
    counts = np.fromiter((len(r[5]) for r in rows), np.int64, n)
    flat = np.fromiter((h for r in rows for h in r[5]), np.int64, int(counts.sum()))
    keyed = key >= 0
    k_label = np.where(keyed, label[np.maximum(key, 0)] if len(recs) else -1, -1)
    k_index = np.where(keyed, recs[np.maximum(key, 0), 1] if len(recs) else -1, -1)
    init = np.arange(nb, dtype=np.int64)
    none = np.full(nb, -1, np.int64)
    offsets = np.zeros(nb + n + 1, np.int64)
    np.cumsum(counts, out=offsets[nb + 1 :])
    return BlockRows(
        step=np.concatenate((np.zeros(nb, np.int64), step)),
        block=np.concatenate((init, blk)),
        state=np.concatenate((np.where(init == 0, NULL_S, FREE_S), state)),
        ref=np.concatenate((np.zeros(nb, np.int64), ref)),
        key_label=np.concatenate((none, k_label)),
        key_index=np.concatenate((none, k_index)),
        holders_offsets=offsets,
        holders=flat,
        group=np.concatenate((none, group)),
    )


def seq_rows(hr: HybridRows, inp: EngineInput, sp: Any, num_steps: int, num_groups: int) -> SeqRows:
    """`SeqRows` with one table per group: a row at each state where a sequence's tokens change rate, it
    arrives, or one of its tables changes (tokens from the sequences' pass, tables from the manager's);
    row i's table in group g is `keep[i·G + g]` blocks of the sequence's previous row's table in g, then
    `tail[tail_offsets[i·G + g] : tail_offsets[i·G + g + 1]]`."""
    tok: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
    for k, q in sp.arrivals:
        tok.setdefault(q, []).append((k, 0, 0, 0, 0, 0))
    for k, q, status, c, rc, g, rg in sp.rows:
        tok.setdefault(q, []).append((k, status, c, rc, g, rg))
    tab: dict[int, list[tuple[int, tuple[int, ...], tuple[tuple[int, ...], ...]]]] = {}
    for k, q, keeps, tails in hr.table_rows:
        tab.setdefault(q, []).append((k, keeps, tails))
    out: list[tuple[int, int, int, int, int, int, int, tuple[int, ...], tuple[tuple[int, ...], ...]]] = []
    none: tuple[tuple[int, ...], ...] = tuple(() for _ in range(num_groups))
    for q, rows in tok.items():
        rows.sort(key=lambda r: r[0])  # stable: a later row of one state wins
        changes = tab.get(q, [])
        if changes and changes[0][0] < rows[0][0]:
            raise InternalError(f"the hybrid replay: seq {q} has blocks before it arrives")
        # Table changes carry their diff against the table before; a state with a token row only keeps
        # the whole table (a table's length is tracked to say so).
        at_change = {k: (keeps, tails) for k, keeps, tails in changes}
        steps = sorted({r[0] for r in rows} | set(at_change))
        lengths = [0] * num_groups
        ti = 0
        cur_tok = rows[0]
        for k in steps:
            while ti < len(rows) and rows[ti][0] <= k:
                cur_tok = rows[ti]
                ti += 1
            if k in at_change:
                keeps, tails = at_change[k]
                lengths = [m + len(t) for m, t in zip(keeps, tails, strict=True)]
            else:
                keeps, tails = tuple(lengths), none
            d = k - cur_tok[0]
            status, c, rc, gen, rg = cur_tok[1:]
            out.append((k, q, status, c + rc * d, rc, gen + rg * d, rg, keeps, tails))
    out.sort(key=lambda r: (r[0], r[1]))
    keep_col = np.array([m for r in out for m in r[7]], np.int64).reshape(-1)
    flat_tails = [r[8][g] for r in out for g in range(num_groups)]
    t_count = np.fromiter((len(t) for t in flat_tails), np.int64, len(flat_tails))
    tail = np.fromiter((b for t in flat_tails for b in t), np.int64, int(t_count.sum()))
    rid, sample = inp.request_id.astype(np.int64), np.broadcast_to(inp.sample, (len(inp),)).astype(np.int64)
    col = np.array([r[:7] for r in out], np.int64).reshape(-1, 7)
    q = col[:, 1]
    return SeqRows(
        step=col[:, 0],
        seq=q,
        request_id=rid[q],
        sample=sample[q],
        status=col[:, 2],
        computed=col[:, 3],
        computed_rate=col[:, 4],
        generated=col[:, 5],
        generated_rate=col[:, 6],
        keep=keep_col,
        tail_offsets=np.r_[0, np.cumsum(t_count)].astype(np.int64),
        tail=tail,
        num_groups=num_groups,
    )


__all__ = ["block_rows", "internal_tokens", "seq_rows"]
