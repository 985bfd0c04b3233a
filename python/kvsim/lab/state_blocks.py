"""The blocks' side of the replay in `kvsim.lab.state` (DESIGN.md §Lab), on whole columns: the slot
changes of the block tables (allocate and prefix-hit append a block, copy-on-write replaces the last, free
removes the last, a fork or a group member's swap-in copies another table's leading blocks), the reference
counts, holders and keys they imply, the block rows, and the sequence rows' tables. `state.replay` runs it
after the sequences' pass (`state_seqs._SeqPass`), whose tokens it reads; the rows live only here and there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.errors import InternalError
from kvsim.model.config import SimConfig
from kvsim.reference.engine import EVENT

if TYPE_CHECKING:
    from kvsim.lab.state_seqs import _SeqPass

ALLOCATE, PREFIX_HIT, COW_COPY, FREE = (
    EVENT["allocate"],
    EVENT["prefix-hit"],
    EVENT["cow-copy"],
    EVENT["free"],
)
EVICT, SWAP_IN, FORK = EVENT["evict"], EVENT["swap-in"], EVENT["fork"]
BLOCK_STATES = ("free", "private", "shared", "cached", "null")


@dataclass
class BlockRows:
    """Block rows as columns (row i: from state `step[i]` on, block `block[i]` is `BLOCK_STATES[state[i]]`
    with `ref[i]` references, key `(key_label[i], key_index[i])` (-1: none) and the request ids
    `holders[holders_offsets[i]:holders_offsets[i + 1]]`), sorted by step."""

    step: np.ndarray
    block: np.ndarray
    state: np.ndarray
    ref: np.ndarray
    key_label: np.ndarray
    key_index: np.ndarray
    holders_offsets: np.ndarray
    holders: np.ndarray
    # A hybrid model's (`kvsim.lab.state_hybrid`): the KV-cache group of the block while held or cached,
    # -1 when free; None for one table per sequence.
    group: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.step)


@dataclass
class SeqRows:
    """Sequence rows as columns, sorted by step: status (`STATUSES` index), computed and generated tokens
    and their rates from `step` on, and the block table as `keep` blocks of the same sequence's previous
    row's table followed by `tail[tail_offsets[i]:tail_offsets[i + 1]]`. A hybrid model's sequences have
    one table per KV-cache group (`num_groups`): `keep` and `tail_offsets` then run over (row, group),
    entry `i * num_groups + g` for group g of row i, and block 0 stands where a window's tokens left."""

    step: np.ndarray
    seq: np.ndarray
    request_id: np.ndarray
    sample: np.ndarray
    status: np.ndarray
    computed: np.ndarray
    computed_rate: np.ndarray
    generated: np.ndarray
    generated_rate: np.ndarray
    keep: np.ndarray
    tail_offsets: np.ndarray
    tail: np.ndarray
    num_groups: int = 1

    def __len__(self) -> int:
        return len(self.step)


def _order(*keys: np.ndarray) -> np.ndarray:
    """Indices that sort by several non-negative integer keys, the first the most significant: stable
    sorts from the least significant key up (a radix sort for keys below 2**16; the logs' columns are
    mostly runs already in order, which a merge sort takes in linear time)."""
    order: np.ndarray | None = None
    for k in reversed(keys):
        k = k if order is None else k[order]
        small = len(k) == 0 or int(k.max()) < 2**16
        o = np.argsort(k.astype(np.uint16) if small else k, kind="stable")
        order = o if order is None else order[o]
    assert order is not None
    return order


def _unique(keys: np.ndarray) -> np.ndarray:
    """The sorted distinct values of `keys`, by a stable sort (linear on a few sorted runs, as here):
    numpy 2's `np.unique` hashes, which takes a hundred times longer on these columns."""
    a = np.sort(keys, kind="stable")
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a


def _group_starts(keys: np.ndarray) -> np.ndarray:
    """Start index of each run of equal values in `keys`."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])


def _grouped_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sums restarting at each index of `starts` (sorted, starts[0] == 0)."""
    c = np.cumsum(values)
    if len(c) == 0:
        return c
    lengths = np.diff(np.r_[starts, len(values)])
    base = np.repeat(c[starts] - values[starts], lengths)
    return c - base


def sample_labels(inp: EngineInput, request_names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Per sequence, its sample's label among the labels after the requests' and the named segments' (-1
    for a request of one sample), and those labels (`req-1·s0`, as the page names a sample)."""
    rows = inp.request_row.astype(np.int64)
    per_row = np.bincount(rows, minlength=len(request_names)) if len(rows) else np.zeros(0, np.int64)
    multi = per_row[rows] > 1 if len(rows) else np.zeros(0, bool)
    out = np.full(len(rows), -1, np.int64)
    out[multi] = np.arange(int(multi.sum()))
    names = [f"{request_names[r]}·s{int(k)}" for r, k in zip(rows[multi], inp.sample[multi], strict=True)]
    return out, names


def _key_labels(
    inp: EngineInput,
    names: dict[int, str],
    request_names: list[str],
    bs: int,
    seq: np.ndarray,
    pos: np.ndarray,
) -> np.ndarray:
    """Readable prefix keys as label ids (into `request_names + list(names.values()) +
    sample_labels(...)[1]`): block `pos` of `seq` is named after the named segment its last token lies in
    (`sys-coding-agent-v1:block-1`), else after its request (`req-2:block-2`), or, past the prompt, of a
    request with several samples, after its sample (`req-1·s0:block-3`: the samples' outputs differ)."""
    label = inp.request_row[seq].astype(np.int64)
    if len(seq) == 0:
        return label
    sid = inp.segment_id
    cumlen = np.r_[0, np.cumsum(inp.segment_len)]
    lo, hi = inp.seg_offsets[seq], inp.seg_offsets[seq + 1]
    end = cumlen[lo] + (pos + 1) * bs - 1  # the block's last token, in the flat segment arrays' tokens
    per_sample, _ = sample_labels(inp, request_names)
    own = per_sample[seq]
    label = np.where((own >= 0) & (end >= cumlen[hi]), len(request_names) + len(names) + own, label)
    if not names:
        return label
    j = np.searchsorted(cumlen[1:], end, "right")  # the segment holding it
    inside = j < hi
    label_of = {s: len(request_names) + k for k, s in enumerate(names)}
    uniq, inv = np.unique(sid[np.minimum(j, len(sid) - 1)], return_inverse=True)
    named = np.array([label_of.get(int(s), -1) for s in uniq], np.int64)[inv.reshape(-1)]
    return np.where(inside & (named >= 0), named, label)


class _BlockPass:
    """The blocks' side of the replay, on whole columns: every event that puts a block into a table or
    takes one out is a *slot* change (sequence, table index) and a reference change of the block
    (allocate and prefix-hit append, copy-on-write replaces the last slot, free removes the last, a fork
    or a group member's swap-in copies the leading slots of another table); reference counts, holders,
    keys and block rows follow by sorting and cumulative sums. Only blocks that are ever shared go
    through a Python loop (their holders and the tokens their sharing saves)."""

    def __init__(
        self,
        inp: EngineInput,
        config: SimConfig,
        kind: np.ndarray,
        seq: np.ndarray,
        block: np.ndarray,
        count: np.ndarray,
        st: np.ndarray,
        last_rel: np.ndarray,
        sp: _SeqPass,
        upto: np.ndarray,
        during_at: np.ndarray,
    ) -> None:
        self.inp, self.config = inp, config
        self.kind, self.seq, self.block, self.count = kind, seq, block, count
        self.st, self.last_rel, self.sp = st, last_rel, sp
        self.upto, self.during_at = upto, during_at

    def _sample_keys_to_writers(
        self,
        key_label: np.ndarray,
        life: np.ndarray,
        life_starts: np.ndarray,
        shared_life: np.ndarray,
        delta: np.ndarray,
        ref_after: np.ndarray,
        seq_sorted: np.ndarray,
    ) -> None:
        """A block past the prompt that samples shared (fork-cow: the prompt's last partial block) holds
        the output of the sample that writes it in place, the last left holding it alone, while the
        others copy theirs out: its life's key names that sample (it named the one that took the block
        before the fork), in place in `key_label` (ops in block order, a life's ops together)."""
        base = len(self.names) + len(self.request_names)
        sh = np.flatnonzero(shared_life & (key_label >= base))
        if not len(sh):
            return
        per_sample, _ = sample_labels(self.inp, self.request_names)
        holders: dict[int, list[int]] = {}
        sole: dict[int, int] = {}
        for lf, d, ra, q in zip(
            life[sh].tolist(),
            delta[sh].tolist(),
            ref_after[sh].tolist(),
            seq_sorted[sh].tolist(),
            strict=True,
        ):
            hs = holders.setdefault(lf, [])
            if d > 0:
                hs.append(q)
            else:
                hs.remove(q)
                if ra == 1:
                    sole[lf] = hs[0]
        ends = np.r_[life_starts[1:], len(life)]
        for lf, q in sole.items():
            if per_sample[q] >= 0:
                key_label[life_starts[lf] : ends[lf]] = base + per_sample[q]

    def _depths(self) -> None:
        """Per event: its sequence's table length before it (`depth`) and the change (`delta`)."""
        kind, seq, count, sp = self.kind, self.seq, self.count, self.sp
        n = len(kind)
        delta = np.zeros(n, np.int64)
        delta[(kind == ALLOCATE) | (kind == PREFIX_HIT)] = 1
        delta[kind == FREE] = -1
        self.swap_from = np.flatnonzero((kind == SWAP_IN) & (count > 0))
        delta[self.swap_from] = count[self.swap_from]
        order = _order(seq)  # events by (sequence, position)
        starts = _group_starts(seq[order])
        self.forks = np.flatnonzero(kind == FORK)
        if len(self.forks):
            # A fork copies its parent's whole table (a parent is never forked itself).
            incl = _grouped_cumsum(delta[order], starts)
            skey = seq[order] * (n + 1) + order
            parent = np.array([sp.src[e] for e in self.forks.tolist()], np.int64)
            at = np.searchsorted(skey, parent * (n + 1) + self.forks, "left")
            first = np.searchsorted(skey, parent * (n + 1), "left")
            delta[self.forks] = np.where(at > first, incl[np.maximum(at - 1, 0)], 0)
        incl = _grouped_cumsum(delta[order], starts)
        depth = np.empty(n, np.int64)
        depth[order] = incl - delta[order]
        self.delta, self.depth, self.order, self.starts = delta, depth, order, starts

    def run(self, names: dict[int, str], request_names: list[str]) -> None:
        self.names, self.request_names = names, request_names
        self._depths()
        kind, seq, block = self.kind, self.seq, self.block
        depth, delta, sp = self.depth, self.delta, self.sp
        n = len(kind)
        bs = self.config.block_size
        # Slot starts: (seq, index, event, sub-order, block, tokens it holds for a take).
        direct = np.flatnonzero((kind == ALLOCATE) | (kind == PREFIX_HIT) | (kind == COW_COPY))
        cow = kind[direct] == COW_COPY
        multi = np.sort(np.r_[self.forks, self.swap_from]).astype(np.int64)
        m_len = delta[multi]
        m_rep = np.repeat(multi, m_len)
        m_x = np.arange(len(m_rep)) - np.repeat(np.cumsum(m_len) - m_len, m_len)
        m_base = np.array([sp.aux[e] for e in multi.tolist()], np.int64)
        a_seq = np.r_[seq[direct], seq[m_rep]]
        a_pos = np.r_[depth[direct] - cow, depth[m_rep] + m_x]
        a_ev = np.r_[direct, m_rep]
        a_sub = np.r_[np.ones(len(direct), np.int64), 1 + m_x]
        a_block = np.r_[block[direct], np.full(len(m_rep), -1, np.int64)]
        a_tok = np.r_[
            np.where(kind[direct] == PREFIX_HIT, bs, 0),
            np.minimum(bs, np.repeat(m_base, m_len) - m_x * bs),
        ]
        # Slot ends: a free (the table's last slot) or a copy-on-write (its last slot, before the copy).
        ends = np.flatnonzero((kind == FREE) | (kind == COW_COPY))
        z_seq, z_pos, z_ev = seq[ends], depth[ends] - 1, ends
        na, nz = len(a_ev), len(z_ev)
        r_seq, r_pos, r_ev = np.r_[a_seq, z_seq], np.r_[a_pos, z_pos], np.r_[a_ev, z_ev]
        r_sub = np.r_[a_sub, np.zeros(nz, np.int64)]
        r_start = np.r_[np.ones(na, bool), np.zeros(nz, bool)]
        if (r_pos < 0).any():
            raise InternalError("a free or copy-on-write of an empty block table")
        o = _order(r_seq, r_pos, r_ev, r_sub)
        g = _group_starts(r_seq[o] * (int(r_pos.max(initial=0)) + 1) + r_pos[o])
        rank = np.arange(len(o)) - np.repeat(g, np.diff(np.r_[g, len(o)]))
        if (r_start[o] != (rank % 2 == 0)).any():
            raise InternalError("the log's block tables do not replay: a slot taken twice or freed empty")
        # Pair each start with the end that follows it in its slot (none: held at the end).
        nxt = np.r_[o[1:], -1]
        same = np.r_[(rank[1:] > 0), False]
        pair_of_start = np.full(na, -1, np.int64)  # index into ends, or -1
        is_s = r_start[o]
        pair_of_start[o[is_s]] = np.where(same[is_s], nxt[is_s] - na, -1)
        # A fork's or a group member's slots: the blocks its source table holds then, in log order.
        if len(m_rep):
            width = int(a_pos.max(initial=0)) + 1
            skey = (a_seq * width + a_pos) * (n + 1) + a_ev
            by = np.argsort(skey, kind="stable")
            sk = skey[by]
            at = len(direct)
            for e, length in zip(multi.tolist(), m_len.tolist(), strict=True):
                slot = sp.src[e] * width + np.arange(length)
                i = np.searchsorted(sk, slot * (n + 1) + e, "left") - 1
                if (i < 0).any() or (sk[np.maximum(i, 0)] // (n + 1) != slot).any():
                    raise InternalError(f"event {e} copies slots its source table never held")
                a_block[at : at + length] = a_block[by[i]]
                at += length
        if (a_block < 0).any():
            raise InternalError("a fork or swap-in copies blocks its source table does not hold")
        z_block = np.full(nz, -1, np.int64)
        has_end = pair_of_start >= 0
        z_block[pair_of_start[has_end]] = a_block[has_end]
        frees = kind[ends] == FREE
        if (z_block[frees] != block[ends][frees]).any():
            bad = int(ends[frees][np.flatnonzero(z_block[frees] != block[ends][frees])[0]])
            raise InternalError(f"free of block {int(block[bad])} by seq {int(seq[bad])}: not its last block")
        self._references(
            a_seq,
            a_pos,
            a_ev,
            a_sub,
            a_block,
            a_tok,
            z_seq,
            z_pos,
            z_ev,
            z_block,
            frees,
            names,
            request_names,
        )
        self.a_seq, self.a_pos, self.a_ev, self.a_block = a_seq, a_pos, a_ev, a_block
        self.a_end = np.where(has_end, z_ev[np.maximum(pair_of_start, 0)], n)

    def _references(
        self,
        a_seq: np.ndarray,
        a_pos: np.ndarray,
        a_ev: np.ndarray,
        a_sub: np.ndarray,
        a_block: np.ndarray,
        a_tok: np.ndarray,
        z_seq: np.ndarray,
        z_pos: np.ndarray,
        z_ev: np.ndarray,
        z_block: np.ndarray,
        frees: np.ndarray,
        names: dict[int, str],
        request_names: list[str],
    ) -> None:
        """Reference counts, lives, keys, holders and the block rows from the slot changes."""
        kind, st, sp, inp = self.kind, self.st, self.sp, self.inp
        n = len(kind)
        bs = self.config.block_size
        caching = self.config.enable_prefix_caching
        nb = self.config.num_blocks or 0
        na, nz = len(a_ev), len(z_ev)
        o_block = np.r_[a_block, z_block]
        o_ev = np.r_[a_ev, z_ev]
        o_sub = np.r_[a_sub, np.zeros(nz, np.int64)]
        o_seq = np.r_[a_seq, z_seq]
        o_pos = np.r_[a_pos, z_pos]
        o_d = np.r_[np.ones(na, np.int64), -np.ones(nz, np.int64)]
        o_tok = np.r_[a_tok, np.zeros(nz, np.int64)]
        o_free = np.r_[np.zeros(na, bool), frees]
        if len(o_block) and (o_block.min() < 0 or o_block.max() >= nb):
            raise InternalError("a block id outside the pool")
        ob = _order(o_block, o_ev, o_sub)  # ops by (block, event, sub-order)
        b_sorted = o_block[ob]
        bstarts = _group_starts(b_sorted)
        ref_after = _grouped_cumsum(o_d[ob], bstarts)
        ref_before = ref_after - o_d[ob]
        if (ref_after < 0).any():
            raise InternalError("a block freed more times than taken")
        allocs = kind[o_ev[ob]] == ALLOCATE
        if (allocs & (ref_before != 0)).any():
            i = int(np.flatnonzero(allocs & (ref_before != 0))[0])
            raise InternalError(f"block {int(b_sorted[i])} allocated with ref_cnt {int(ref_before[i])}")
        take0 = (o_d[ob] > 0) & (ref_before == 0)
        drop0 = (o_d[ob] < 0) & (ref_after == 0)
        # Lives: from a take of a free block to its return; shared lives go through Python below.
        life = np.cumsum(take0) - 1
        life_starts = _group_starts(life) if len(life) else np.zeros(0, np.int64)
        life_max = np.maximum.reduceat(ref_after, life_starts) if len(life) else np.zeros(0, np.int64)
        shared_life = np.repeat(life_max >= 2, np.diff(np.r_[life_starts, len(life)]))
        # Keys: the key a block takes when taken free (caching on): label and table index.
        ev_sorted = o_ev[ob]
        seq_sorted, pos_sorted = o_seq[ob], o_pos[ob]
        key_label = np.full(len(ob), -1, np.int64)
        key_index = np.full(len(ob), -1, np.int64)
        if caching and take0.any():
            t = np.flatnonzero(take0)
            key_label[t] = _key_labels(inp, names, request_names, bs, seq_sorted[t], pos_sorted[t])
            key_index[t] = pos_sorted[t]
            # Every op carries the key of its block's latest take of it free.
            last_take = np.maximum.accumulate(np.where(take0, np.arange(len(ob)), -1))
            ok = (last_take >= 0) & (b_sorted[np.maximum(last_take, 0)] == b_sorted)
            src = np.maximum(last_take, 0)
            key_label = np.where(ok, key_label[src], -1)
            key_index = np.where(ok, key_index[src], -1)
            self._sample_keys_to_writers(
                key_label, life, life_starts, shared_life, o_d[ob], ref_after, seq_sorted
            )
        # A full block keeps its key while free (cached) until it is evicted or taken again.
        aux = np.full(n + 1, -1, np.int64)  # index n: no release
        aux[np.fromiter(sp.aux, np.int64, len(sp.aux))] = np.fromiter(sp.aux.values(), np.int64, len(sp.aux))
        rel = self.last_rel[ev_sorted[drop0]]
        free_c = aux[np.where(rel >= 0, rel, n)]
        keyset_idx = np.flatnonzero(drop0)[
            o_free[ob][drop0] & caching & (free_c >= (pos_sorted[drop0] + 1) * bs)
        ]
        evicts = np.flatnonzero(kind == EVICT)
        k_block = np.r_[b_sorted[keyset_idx], b_sorted[take0], self.block[evicts]]
        k_ev = np.r_[ev_sorted[keyset_idx], ev_sorted[take0], evicts]
        k_set = np.r_[np.ones(len(keyset_idx), bool), np.zeros(int(take0.sum()) + len(evicts), bool)]
        k_label = np.r_[key_label[keyset_idx], np.full(len(k_ev) - len(keyset_idx), -1, np.int64)]
        k_index = np.r_[key_index[keyset_idx], np.full(len(k_ev) - len(keyset_idx), -1, np.int64)]
        ko = _order(k_block, k_ev)
        kkey = k_block[ko] * (n + 1) + k_ev[ko]
        # Rows: the last op of each (block, state).
        st_sorted = st[ev_sorted]
        gkey = b_sorted * (int(st.max(initial=0)) + 1) + st_sorted
        last = np.flatnonzero(np.r_[gkey[1:] != gkey[:-1], True]) if len(gkey) else np.zeros(0, np.int64)
        r_step, r_block, r_ref = st_sorted[last], b_sorted[last], ref_after[last]
        r_label, r_index = key_label[last], key_index[last]
        state = np.where(r_ref >= 2, 2, np.where(r_ref == 1, 1, 0)).astype(np.int64)
        free_rows = r_ref == 0
        if free_rows.any():
            q = r_block[free_rows] * (n + 1) + (self.upto[r_step[free_rows]] - 1)
            i = np.searchsorted(kkey, q, "right") - 1
            valid = i >= 0
            ii = ko[np.maximum(i, 0)]
            cached = valid & (k_block[ii] == r_block[free_rows]) & k_set[ii]
            state[np.flatnonzero(free_rows)[cached]] = 3
            lab = np.where(cached, k_label[ii], -1)
            idx = np.where(cached, k_index[ii], -1)
            r_label[free_rows], r_index[free_rows] = lab, idx
        # Holders: a life never shared has one holder, its taker; shared lives are replayed here.
        life_taker = seq_sorted[life_starts] if len(life) else np.zeros(0, np.int64)
        rid = inp.request_id.astype(np.int64)
        h_count = np.where(r_ref >= 1, 1, 0)
        h_first = np.where(r_ref >= 1, rid[life_taker[life[last]]] if len(last) else 0, -1)
        shared_rows: dict[int, list[int]] = {}
        dup_d = np.zeros(len(ob), np.int64)
        sh = np.flatnonzero(shared_life)
        if len(sh):
            is_last = np.zeros(len(ob), bool)
            is_last[last] = True
            row_of = np.full(len(ob), -1, np.int64)
            row_of[last] = np.arange(len(last))
            holders: dict[int, list[int]] = {}
            shared_tok: dict[int, int] = {}
            d_sorted, tok_sorted = o_d[ob], o_tok[ob]
            for i, b, d, rb, ra, q, tok, lst in zip(
                sh.tolist(),
                b_sorted[sh].tolist(),
                d_sorted[sh].tolist(),
                ref_before[sh].tolist(),
                ref_after[sh].tolist(),
                seq_sorted[sh].tolist(),
                tok_sorted[sh].tolist(),
                is_last[sh].tolist(),
                strict=True,
            ):
                hs = holders.setdefault(b, [])
                if d > 0:
                    if rb == 1:
                        shared_tok[b] = tok
                        dup_d[i] = tok
                    elif rb >= 2:
                        dup_d[i] = shared_tok[b]
                    hs.append(q)
                else:
                    if ra >= 1:
                        dup_d[i] = -shared_tok[b]
                    hs.remove(q)
                if lst and ra >= 1:
                    r = int(row_of[i])
                    got = sorted({int(rid[x]) for x in hs}) if ra >= 2 else [int(rid[hs[0]])]
                    shared_rows[r] = got
                    h_count[r] = len(got)
        # Block counts per state: each row moves its block from its previous row's state (the initial
        # one: free, block 0 vLLM's null block) to its own; rows are in block order here.
        first_of_block = np.ones(len(last), bool)
        first_of_block[1:] = r_block[1:] != r_block[:-1]
        prev = np.empty(len(last), np.int64)
        prev[1:] = state[:-1]
        prev[first_of_block] = np.where(r_block[first_of_block] == 0, 4, 0)
        s_total = len(self.upto)
        bcount = np.zeros((s_total, len(BLOCK_STATES)), np.int64)
        bcount[0, 0], bcount[0, 4] = nb - 1, 1
        np.add.at(bcount, (r_step, prev), -1)
        np.add.at(bcount, (r_step, state), 1)
        self.bcount = np.cumsum(bcount, axis=0)
        # Rows in step order (stable: by block within a step), after the initial ones (state 0).
        ro = _order(r_step)
        h_count, h_first = h_count[ro], h_first[ro]
        offsets = np.zeros(nb + len(ro) + 1, np.int64)
        np.cumsum(h_count, out=offsets[nb + 1 :])
        flat = np.full(int(offsets[-1]), -1, np.int64)
        one = h_count == 1
        flat[offsets[nb:-1][one]] = h_first[one]
        if shared_rows:
            pos_in_out = np.empty(len(ro), np.int64)
            pos_in_out[ro] = np.arange(len(ro))
            for r, got in shared_rows.items():
                at = int(offsets[nb + pos_in_out[r]])
                flat[at : at + len(got)] = got
        init = np.arange(nb, dtype=np.int64)
        none = np.full(nb, -1, np.int64)
        self.rows = BlockRows(
            step=np.concatenate((np.zeros(nb, np.int64), r_step[ro])),
            block=np.concatenate((init, r_block[ro])),
            state=np.concatenate((np.where(init == 0, 4, 0), state[ro])),
            ref=np.concatenate((np.zeros(nb, np.int64), r_ref[ro])),
            key_label=np.concatenate((none, r_label[ro])),
            key_index=np.concatenate((none, r_index[ro])),
            holders_offsets=offsets,
            holders=flat,
        )
        # Held blocks and shared tokens over time: prefix sums of their changes per event.
        self._held = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(ev_sorted, take0.astype(np.int64) - drop0, minlength=n), out=self._held[1:])
        self._dup = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(ev_sorted, dup_d, minlength=n).astype(np.int64), out=self._dup[1:])

    def held_at(self, upto: np.ndarray) -> np.ndarray:
        """Blocks held after the first `upto[i]` events."""
        return self._held[upto]

    def dup_at(self, upto: np.ndarray) -> np.ndarray:
        """Tokens stored once but held by several tables after the first `upto[i]` events."""
        return self._dup[upto]


def _seq_rows(
    inp: EngineInput,
    sp: _SeqPass,
    seq: np.ndarray,
    st: np.ndarray,
    num_steps: int,
    bp: _BlockPass | None,
) -> SeqRows:
    """Sequence rows: one at each state where an event touches the sequence, its tokens change rate or
    it arrives; tokens from the sequences' pass (between its rows a sequence's tokens follow its rates),
    tables from the block pass (`keep` = the shortest its table was during the state)."""
    width = num_steps + 2
    n = len(seq)
    # Event groups: (sequence, state) with the table's length after them and the shortest during them.
    order = bp.order if bp is not None else _order(seq)
    gk = seq[order] * width + st[order]
    gs = _group_starts(gk)
    g_key = gk[gs]
    if bp is not None:
        depth_o, delta_o = bp.depth[order], bp.delta[order]
        kind_o = bp.kind[order]
        low = depth_o - ((kind_o == FREE) | (kind_o == COW_COPY))
        g_keep = np.minimum.reduceat(low, gs) if n else np.zeros(0, np.int64)
        g_last = np.r_[gs[1:], n] - 1
        g_depth = depth_o[g_last] + delta_o[g_last]
    else:
        g_keep = g_depth = np.zeros(len(gs), np.int64)
    # Token rows from the sequences' pass: arrivals first, then the pass's rows (a later one wins).
    arr = np.array(sp.arrivals, np.int64).reshape(-1, 2)
    prow = np.array(sp.rows, np.int64).reshape(-1, 7)
    p_k = np.r_[arr[:, 0], prow[:, 0]]
    p_seq = np.r_[arr[:, 1], prow[:, 1]]
    p_key = p_seq * width + p_k
    p_vals = (
        np.r_[np.zeros((len(arr), 5), np.int64), prow[:, 2:]] if len(prow) or len(arr) else np.zeros((0, 5))
    )
    po = np.argsort(p_key, kind="stable")
    p_key_s = p_key[po]
    keys = _unique(np.concatenate((g_key, p_key)))
    k_seq, k_step = keys // width, keys % width
    i = np.searchsorted(p_key_s, keys, "right") - 1
    if (i < 0).any() or (p_key_s[np.maximum(i, 0)] // width != k_seq).any():
        raise InternalError("a sequence has events before it arrives")
    src = po[i]
    status, c, rc, g, rg = (p_vals[src, j] for j in range(5))
    d = k_step - p_k[src]
    c, g = c + rc * d, g + rg * d
    # Tables: the latest event group at or before the row.
    j = np.searchsorted(g_key, keys, "right") - 1
    has = (j >= 0) & (g_key[np.maximum(j, 0)] // width == k_seq)
    here = has & (g_key[np.maximum(j, 0)] == keys)
    depth = np.where(has, g_depth[np.maximum(j, 0)], 0)
    keep = np.where(here, g_keep[np.maximum(j, 0)], depth)
    out = _order(k_step, k_seq)
    row_of = np.empty(len(keys), np.int64)
    row_of[out] = np.arange(len(keys))
    if bp is not None and len(bp.a_ev):
        # A row's tail: the slots its state filled and that are still held at its end.
        a_st = st[bp.a_ev]
        end_st = np.where(bp.a_end < n, st[np.minimum(bp.a_end, n - 1)], num_steps + 1)
        alive = end_st > a_st
        t_key = bp.a_seq[alive] * width + a_st[alive]
        t_row = row_of[np.searchsorted(keys, t_key)]
        to = _order(t_row, bp.a_pos[alive])
        tail = bp.a_block[alive][to]
        t_count = np.bincount(t_row, minlength=len(keys))
    else:
        tail = np.zeros(0, np.int64)
        t_count = np.zeros(len(keys), np.int64)
    if (t_count != (depth - keep)[out]).any():
        raise InternalError("the log's block tables do not replay: a table's tail does not add up")
    rid, sample = inp.request_id.astype(np.int64), inp.sample.astype(np.int64)
    q = k_seq[out]
    return SeqRows(
        step=k_step[out],
        seq=q,
        request_id=rid[q],
        sample=np.broadcast_to(sample, (len(inp),))[q],
        status=status[out],
        computed=c[out],
        computed_rate=rc[out],
        generated=g[out],
        generated_rate=rg[out],
        keep=keep[out],
        tail_offsets=np.r_[0, np.cumsum(t_count)],
        tail=tail,
    )
