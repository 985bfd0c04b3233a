// Replay of a bundle (see LAB_CONTRACT.md / DESIGN.md "Lab"): the state at step k read from the rows the
// server computed with the engine. Nothing is simulated here: a row says "from step s on, this entity is
// X"; seeking to k means knowing, for every entity, its last row with step <= k. Moving forward applies
// rows; moving back undoes them through per-row links to the entity's previous row, or restarts from a
// keyframe (a saved copy of the per-entity row pointers) when that is cheaper. Each seek reports which
// entities changed, so the views redraw only those.

/** Index of the first element of the sorted Int32Array `a` greater than `x` (rows with step <= x). */
export function upperBound(a, x) {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid] <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Index of the first element of the sorted Int32Array `a` at or above `x`. */
export function lowerBound(a, x) {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Rows sorted by step, each about one entity; `cur[e]` is the row in force for entity e (or -1). Rows
 * come as columns: `steps` and `ent` (Int32Arrays) and `makeRow(i)`, which builds row i as an array (the
 * contract's fields) when a view first asks for it.
 */
export class RowTrack {
  constructor(steps, ent, numEntities, makeRow) {
    const n = steps.length;
    this.steps = steps;
    this.ent = ent;
    this.numEntities = numEntities;
    this.makeRow = makeRow;
    this.cache = new Array(n);
    this.prev = new Int32Array(n);
    this.cur = new Int32Array(numEntities).fill(-1);
    this.pos = 0; // rows [0, pos) are applied
    // Keyframes: the pointers after every `every` rows, so a long jump back costs at most one copy of
    // the pointers plus `every` rows.
    this.every = Math.max(1024, numEntities);
    this.keyframes = [{ pos: 0, cur: new Int32Array(numEntities).fill(-1) }];
    const cur = new Int32Array(numEntities).fill(-1);
    for (let i = 0; i < n; i += 1) {
      const e = ent[i];
      this.prev[i] = cur[e];
      cur[e] = i;
      if ((i + 1) % this.every === 0) this.keyframes.push({ pos: i + 1, cur: cur.slice() });
    }
    this.byEntity = null;
  }

  get length() {
    return this.steps.length;
  }

  /** Row i as an array (built once). */
  rowIndex(i) {
    let r = this.cache[i];
    if (r === undefined) {
      r = this.makeRow(i);
      this.cache[i] = r;
    }
    return r;
  }

  /** Move to step k. Returns the changed entities (an array), or null when all may have changed. */
  seek(k) {
    const target = upperBound(this.steps, k);
    const { pos } = this;
    if (target === pos) return [];
    // The nearest keyframe at or before the target.
    let kf = this.keyframes[Math.min(this.keyframes.length - 1, Math.floor(target / this.every))];
    if (kf.pos > target) kf = this.keyframes[0];
    const direct = Math.abs(target - pos);
    const viaKeyframe = this.numEntities + (target - kf.pos);
    if (viaKeyframe < direct) {
      this.cur.set(kf.cur);
      for (let i = kf.pos; i < target; i += 1) this.cur[this.ent[i]] = i;
      this.pos = target;
      return null;
    }
    const changed = [];
    if (target > pos) {
      for (let i = pos; i < target; i += 1) {
        this.cur[this.ent[i]] = i;
        changed.push(this.ent[i]);
      }
    } else {
      for (let i = pos - 1; i >= target; i -= 1) {
        this.cur[this.ent[i]] = this.prev[i];
        changed.push(this.ent[i]);
      }
    }
    this.pos = target;
    return changed;
  }

  /** The row in force for entity e, or null. */
  row(e) {
    const i = this.cur[e];
    return i < 0 ? null : this.rowIndex(i);
  }

  /** The row in force for entity e at step k, without moving (binary search over e's rows). */
  rowAt(e, k) {
    const i = this.indexAt(e, k);
    return i < 0 ? null : this.rowIndex(i);
  }

  /** The index of the row in force for entity e at step k (-1: none), without moving. */
  indexAt(e, k) {
    if (this.byEntity === null) {
      // CSR lists of row indices per entity, in step order.
      const start = new Int32Array(this.numEntities + 1);
      for (let i = 0; i < this.ent.length; i += 1) start[this.ent[i] + 1] += 1;
      for (let e2 = 0; e2 < this.numEntities; e2 += 1) start[e2 + 1] += start[e2];
      const fill = start.slice(0, this.numEntities);
      const idx = new Int32Array(this.ent.length);
      for (let i = 0; i < this.ent.length; i += 1) idx[fill[this.ent[i]]++] = i;
      this.byEntity = { start, idx };
    }
    const { start, idx } = this.byEntity;
    let lo = start[e];
    let hi = start[e + 1];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.steps[idx[mid]] <= k) lo = mid + 1;
      else hi = mid;
    }
    return lo === start[e] ? -1 : idx[lo - 1];
  }
}

// Field positions of the rows as views see them (built from the bundle's columns). A hybrid model's block
// rows add the block's KV-cache group (-1 while free); its sequence rows add `tables`, one per group (block
// 0, vLLM's null block, where a window's tokens left), and their `table` is the blocks those hold.
export const B = { step: 0, id: 1, state: 2, ref: 3, key: 4, reqs: 5, group: 6 };
export const S = { step: 0, rid: 1, sample: 2, status: 3, ctx: 4, ctxRate: 5, gen: 6, genRate: 7, table: 8, tables: 9 };
// Sequence keys are request * SAMPLES + sample (numbers: faster map keys than strings).
const SAMPLES = 1 << 16;
export const R = { step: 0, rid: 1, offset: 2, size: 3, sample: 4 };
export const E = { step: 0, time: 1, kind: 2, rid: 3, sample: 4, block: 5, count: 6 };

// Columns arrive as TypedArrays (api.js `typedColumns`): used as they are when of the right type, else
// converted (a native copy).
const i32 = (a) => (a instanceof Int32Array ? a : new Int32Array(a || []));
const u8 = (a) => (a instanceof Uint8Array ? a : new Uint8Array(a || []));

/** Exclusive prefix sums of counts: offsets[i] .. offsets[i + 1] is row i's slice. */
function offsetsOf(counts) {
  const out = new Int32Array(counts.length + 1);
  for (let i = 0; i < counts.length; i += 1) out[i + 1] = out[i] + counts[i];
  return out;
}

/** One track (paged or contiguous) of a bundle, replayable to any step; `groups` a hybrid model's KV-cache
 * groups (the bundle's `layout.groups`), null for one table per sequence. */
export class TrackReplay {
  constructor(track, numBlocks, blockSize, groups = null, sharedLabels = null) {
    this.track = track;
    this.blockSize = blockSize;
    this.numBlocks = numBlocks;
    this.groups = groups && groups.length ? groups : null;
    this.numGroups = track.num_groups || 1;
    this.metrics = track.metrics || {};
    this.eventUpto = track.event_upto || null;
    // Per sequence (the engine's index): its request id and sample.
    this.seqRid = i32(track.seq_request_id);
    this.seqSample = i32(track.seq_sample);
    this.seqIndex = new Map();
    for (let q = 0; q < this.seqRid.length; q += 1) this.seqIndex.set(this.seqRid[q] * SAMPLES + this.seqSample[q], q);
    // The event log, as columns.
    const ev = track.events || {};
    this.kindNames = track.event_kinds || [];
    this.evStep = i32(ev.step);
    this.evKind = u8(ev.kind);
    this.evSeq = i32(ev.seq);
    this.evBlock = i32(ev.block);
    this.evCount = i32(ev.count);
    this.evTime = ev.time_s ? new Float64Array(ev.time_s) : null;
    this.numEvents = this.evStep.length;
    this.events = { length: this.numEvents };
    this.eventSteps = this.evStep;
    // Block rows.
    const bl = track.blocks || {};
    const states = track.block_states || [];
    const labels = track.key_labels || [];
    const bBlock = i32(bl.block);
    const bState = u8(bl.state);
    const bRef = i32(bl.ref);
    const bLabel = i32(bl.key_label);
    const bIndex = i32(bl.key_index);
    const hOff = offsetsOf(bl.holders_count || []);
    const holders = i32(bl.holders);
    const bSteps = i32(bl.step);
    const bGroup = bl.group ? i32(bl.group) : null;
    this.blocks = new RowTrack(bSteps, bBlock, numBlocks, (i) => [
      bSteps[i], bBlock[i], states[bState[i]], bRef[i],
      bLabel[i] < 0 ? null : `${labels[bLabel[i]]}:block-${bIndex[i]}`,
      Array.from(holders.subarray(hOff[i], hOff[i + 1])),
      bGroup ? bGroup[i] : -1,
    ]);
    this.blockState = bState; // per row: the state's code (the grid reads it without building rows)
    this.blockKeyIndex = bIndex; // per row: its key's block position (-1: none)
    this.blockLabel = bLabel; // per row: its key's content label (-1: no key)
    this.blockRef = bRef;
    this.blockGroup = bGroup;
    this.stateNames = states;
    // Sequence rows: a row's table is `keep` blocks of the sequence's previous row's table, then its tail.
    const sq = track.seqs || {};
    const statuses = track.statuses || [];
    const sSteps = i32(sq.step);
    const sSeq = i32(sq.seq);
    const sStatus = u8(sq.status);
    const sC = i32(sq.computed);
    const sRc = i32(sq.computed_rate);
    const sG = i32(sq.generated);
    const sRg = i32(sq.generated_rate);
    const sKeep = i32(sq.keep);
    const tOff = offsetsOf(sq.tail_count || []);
    const tail = i32(sq.tail);
    const G = this.numGroups;
    // Table lengths per row (all groups'); `keep` and `tail_count` run over (row, group).
    this.seqDepth = new Int32Array(sSteps.length);
    for (let i = 0; i < sSteps.length; i += 1) {
      for (let g = 0; g < G; g += 1) this.seqDepth[i] += sKeep[i * G + g] + tOff[i * G + g + 1] - tOff[i * G + g];
    }
    // One table per group per row, rebuilt from the `keep` chain when a view first reads it.
    const tables = new Array(sSteps.length * G);
    const tableOf = (i, g) => {
      const at = (r) => r * G + g;
      if (tables[at(i)] !== undefined) return tables[at(i)];
      // Walk back to a row whose table is known or starts afresh, then rebuild forward.
      const chain = [];
      let j = i;
      while (j >= 0 && tables[at(j)] === undefined && sKeep[at(j)] > 0) {
        chain.push(j);
        j = this.seqs.prev[j];
      }
      let table = j < 0 ? [] : tables[at(j)] !== undefined ? tables[at(j)]
        : Array.from(tail.subarray(tOff[at(j)], tOff[at(j) + 1]));
      if (j >= 0) tables[at(j)] = table;
      for (let c = chain.length - 1; c >= 0; c -= 1) {
        const r = chain[c];
        table = table.slice(0, sKeep[at(r)]);
        for (let x = tOff[at(r)]; x < tOff[at(r) + 1]; x += 1) table.push(tail[x]);
        tables[at(r)] = table;
      }
      return tables[at(i)];
    };
    const hybrid = this.groups !== null;
    this.seqs = new RowTrack(sSteps, sSeq, this.seqRid.length, (i) => {
      const q = sSeq[i];
      const row = [sSteps[i], this.seqRid[q], this.seqSample[q], statuses[sStatus[i]], sC[i], sRc[i], sG[i],
        sRg[i]];
      // The table is rebuilt from its `keep` chain when a view first reads it (listing sequences reads
      // their status only). A hybrid model's `table` is the blocks its group tables hold (no null block).
      const lazy = (field, make) => Object.defineProperty(row, field, {
        configurable: true, enumerable: true,
        get: () => {
          const value = make();
          Object.defineProperty(row, field, { value, writable: true, enumerable: true });
          return value;
        },
      });
      if (hybrid) {
        lazy(S.tables, () => Array.from({ length: G }, (_, g) => tableOf(i, g)));
        lazy(S.table, () => row[S.tables].flat().filter((b) => b > 0));
      } else {
        lazy(S.table, () => tableOf(i, 0));
      }
      return row;
    });
    // Regions are per (request, sample) too (the 5th field, when present, is the sample).
    const regions = track.regions || [];
    this.regionIndex = new Map();
    this.regionKeys = [];
    const regionOf = (r) => {
      const key = r[R.rid] * SAMPLES + (r[R.sample] ?? 0);
      let e = this.regionIndex.get(key);
      if (e === undefined) {
        e = this.regionKeys.length;
        this.regionIndex.set(key, e);
        this.regionKeys.push([r[R.rid], r[R.sample] ?? 0]);
      }
      return e;
    };
    const regionIds = Int32Array.from(regions, regionOf);
    this.regions = new RowTrack(Int32Array.from(regions, (r) => r[R.step]), regionIds, this.regionKeys.length,
      (i) => regions[i]);
    this.step = -1;
    this.tokens = new Int32Array(numBlocks); // tokens held per block at this step
    this.live = new Set(); // sequences whose block table is not empty
    this.changedBlocks = null;
    // A CPU tier: the blocks a load in flight is filling at this step (`_filling`), and per `loading`
    // sequence row the GPU hits its load started after (`loadingHits`, found once per row).
    this.filling = new Set();
    this.fillingHits = new Map();
    const load = this.kindNames.indexOf("load");
    this.hasLoads = load >= 0 && this.evKind.includes(load);
    // The prefix keys' labels that name shared content (a named segment: `bundle.shared_key_labels`).
    this.sharedLabels = sharedLabels;
    // Per event, the state it belongs to: "step k" on the page is the state after k engine steps, and an
    // event listed at step k is one of those that made it (`event_upto`; else the step after its count).
    this.evState = new Int32Array(this.numEvents);
    if (this.eventUpto) {
      let k = 0;
      for (let i = 0; i < this.numEvents; i += 1) {
        while (k < this.eventUpto.length - 1 && this.eventUpto[k] <= i) k += 1;
        this.evState[i] = k;
      }
    } else {
      for (let i = 0; i < this.numEvents; i += 1) this.evState[i] = this.evStep[i] + 1;
    }
    // Swaps: per swap-out event, the blocks it moved to the CPU swap space (the frees of its sequence that
    // follow it in the same step: the engine frees a swapped-out table's blocks right after); per sequence,
    // its swap-out events in order.
    const swapOut = this.kindNames.indexOf("swap-out");
    const free = this.kindNames.indexOf("free");
    this.swapOuts = new Map();
    this.swapBlocks = new Map();
    for (let i = 0; swapOut >= 0 && i < this.numEvents; i += 1) {
      if (this.evKind[i] !== swapOut) continue;
      const q = this.evSeq[i];
      let n = 0;
      for (let j = i + 1; j < this.numEvents && this.evStep[j] === this.evStep[i]; j += 1) {
        if (this.evSeq[j] === q && this.evKind[j] === free) n += 1;
        else if (this.evSeq[j] === q) break;
      }
      this.swapBlocks.set(i, n);
      if (!this.swapOuts.has(q)) this.swapOuts.set(q, []);
      this.swapOuts.get(q).push(i);
    }
  }

  /** The blocks sequence q holds in the CPU swap space at step k (its latest swap-out's; 0 unless it is
   * swapped out then). */
  swappedBlocks(q, k) {
    const row = this.seqs.rowAt(q, k);
    const outs = this.swapOuts.get(q);
    if (!row || row[S.status] !== "swapped" || !outs) return 0;
    const n = this.eventCount(k);
    let last = -1;
    for (const i of outs) if (i < n) last = i;
    return last < 0 ? 0 : this.swapBlocks.get(last);
  }

  /** How many blocks of sequence q's group-g table left its window by step k (its `window` events since
   * its latest preemption, which restarts its tables); the rest of its leading null blocks were never
   * held (a prefix hit or a CPU-tier load started past them). */
  windowLeft(q, g, k) {
    if (!this.windowEvents) {
      // Per sequence, its window and preempt events in order (built on first use).
      const win = this.kindNames.indexOf("window");
      const pre = this.kindNames.indexOf("preempt");
      this.windowEvents = new Map();
      for (let i = 0; i < this.numEvents; i += 1) {
        const kind = this.evKind[i];
        if (kind !== win && kind !== pre) continue;
        const e = this.evSeq[i];
        if (!this.windowEvents.has(e)) this.windowEvents.set(e, []);
        this.windowEvents.get(e).push(i);
      }
      this.preemptCode = pre;
    }
    const n = this.eventCount(k);
    let left = 0;
    for (const i of this.windowEvents.get(q) || []) {
      if (i >= n) break;
      if (this.evKind[i] === this.preemptCode) left = 0;
      else if (this.evCount[i] === g) left += 1;
    }
    return left;
  }

  /** The blocks in the CPU swap space at step k: the swapped-out sequences' (their count and blocks). */
  swapSpace(k) {
    let seqs = 0;
    let blocks = 0;
    for (const q of this.swapOuts.keys()) {
      const n = this.swappedBlocks(q, k);
      const row = this.seqs.rowAt(q, k);
      if (row && row[S.status] === "swapped") {
        seqs += 1;
        blocks += n;
      }
    }
    return { seqs, blocks };
  }

  /** Block b's prefix key at state k when it is the anchor of shared content: the key names a shared
   * segment (a system prompt's block, not a request's or a sample's own tokens) and the block carries it
   * then (the contract's fullness rule, as `block`: a held block only once full; a hybrid model's row
   * carries a key only while the block has one). Null otherwise. */
  sharedKeyAt(b, k) {
    const i = this.blocks.indexAt(b, k);
    if (i < 0 || !this.sharedLabels) return null;
    const label = this.blockLabel[i];
    if (label < this.sharedLabels[0] || label >= this.sharedLabels[1]) return null;
    const row = this.blocks.rowIndex(i);
    const st = row[B.state];
    if (this.groups || st === "cached") return row[B.key];
    if (st !== "private" && st !== "shared") return null;
    // A held block's tokens at k: the most any table holding it says (min(B, c − i·B)); a block a load in
    // flight is filling has no key yet.
    let held = 0;
    for (const rid of row[B.reqs]) {
      for (let s = 0; ; s += 1) {
        const q = this.seqOf(rid, s);
        if (q === undefined) break;
        const seq = this.seqs.rowAt(q, k);
        if (!seq) continue;
        const at = seq[S.table].indexOf(b);
        if (at < 0) continue;
        if (seq[S.status] === "loading") return null;
        held = Math.max(held, Math.min(this.blockSize, Math.max(0, TrackReplay.ctxAt(seq, k) - at * this.blockSize)));
      }
    }
    return held === this.blockSize ? row[B.key] : null;
  }

  /** The sequence entity of (request, sample), or undefined. */
  seqOf(rid, sample) {
    return this.seqIndex.get(rid * SAMPLES + sample);
  }

  /** Event i as [step, time_s, kind, request id, sample, block, count]. */
  event(i) {
    const q = this.evSeq[i];
    const step = this.evStep[i];
    return [step, this.eventTime(i), this.kindNames[this.evKind[i]], q >= 0 ? this.seqRid[q] : -1,
      q >= 0 ? this.seqSample[q] : 0, this.evBlock[i], this.evCount[i]];
  }

  eventTime(i) {
    if (this.evTime) return this.evTime[i];
    const t = this.metrics.time_s;
    return t ? t[Math.min(this.evStep[i], t.length - 1)] : 0;
  }

  /** The event kinds present in the log (names). */
  kindsPresent() {
    const seen = new Uint8Array(256);
    for (let i = 0; i < this.numEvents; i += 1) seen[this.evKind[i]] = 1;
    return this.kindNames.filter((_, c) => seen[c]);
  }

  /** Seek every row track to step k; remembers which blocks changed (null: all). */
  seek(k) {
    const changedBlocks = this.blocks.seek(k);
    const changedSeqs = this.seqs.seek(k);
    this.regions.seek(k);
    if (changedSeqs === null) {
      this.live.clear();
      for (let e = 0; e < this.seqs.numEntities; e += 1) this._noteLive(e);
    } else {
      for (const e of changedSeqs) this._noteLive(e);
    }
    this.step = k;
    const before = this.tokens;
    this.tokens = this._tokens(k);
    const wasFilling = this.filling;
    this.filling = this._filling(k);
    if (changedBlocks === null) {
      this.changedBlocks = null;
    } else {
      const set = new Set(changedBlocks);
      for (let b = 0; b < this.numBlocks; b += 1) if (before[b] !== this.tokens[b]) set.add(b);
      // A load landing changes no block row (its request's status changes): its blocks are redrawn.
      for (const b of wasFilling) if (!this.filling.has(b)) set.add(b);
      for (const b of this.filling) if (!wasFilling.has(b)) set.add(b);
      this.changedBlocks = set;
    }
    return this.changedBlocks;
  }

  /** A CPU tier: the blocks a load in flight is filling at step k, the snapshot's `loading` blocks
   * (`snapshot.filling_blocks`): those of a sequence held `loading` past its GPU hits. They are allocated
   * and counted as stored, but their KV is still on the host link; they take their keys when the load
   * lands (its `load-done` makes the sequence `loaded`). One table per sequence: the table past
   * `loadingHits`; a hybrid model's block rows carry the keys its manager gave, so the blocks with none. */
  _filling(k) {
    const out = new Set();
    if (!this.hasLoads) return out;
    for (const e of this.live) {
      const i = this.seqs.cur[e];
      const row = this.seqs.rowIndex(i);
      if (row[S.status] !== "loading") continue;
      if (this.groups) {
        for (const b of row[S.table]) {
          const r = this.blocks.cur[b];
          if (r >= 0 && this.blockLabel[r] < 0) out.add(b);
        }
        continue;
      }
      let hits = this.fillingHits.get(i);
      if (hits === undefined) {
        hits = this.loadingHits(e, k);
        this.fillingHits.set(i, hits);
      }
      const table = row[S.table];
      for (let x = hits; x < table.length; x += 1) out.add(table[x]);
    }
    return out;
  }

  /** Whether a CPU-tier load in flight is filling block b at this step. */
  isFilling(b) {
    return this.filling.has(b);
  }

  _noteLive(e) {
    const i = this.seqs.cur[e];
    if (i >= 0 && this.seqDepth[i] > 0) this.live.add(e);
    else this.live.delete(e);
  }

  /** Context tokens of a sequence row at step k (the contract's linear rate between rows). */
  static ctxAt(row, k) {
    return row[S.ctx] + row[S.ctxRate] * (k - row[S.step]);
  }

  static genAt(row, k) {
    return row[S.gen] + row[S.genRate] * (k - row[S.step]);
  }

  /** The block size of group g (the track's own without groups). */
  groupBlockSize(g) {
    return this.groups && g >= 0 ? this.groups[g].block_size : this.blockSize;
  }

  /** Tokens per block: the contract's rule min(B, max(0, c - i B)), the most any table holding it says
   * (a hybrid model's: B its group's, and a state block the tokens its state covers: c for a request's
   * running state, its table's last, (i + 1) B for a state at position i, cached or started from). */
  _tokens(k) {
    const t = new Int32Array(this.numBlocks);
    const bs = this.blockSize;
    for (const e of this.live) {
      const row = this.seqs.row(e);
      const c = TrackReplay.ctxAt(row, k);
      const tables = this.groups ? row[S.tables] : [row[S.table]];
      for (let g = 0; g < tables.length; g += 1) {
        const table = tables[g];
        const size = this.groups ? this.groups[g].block_size : bs;
        const state = this.groups !== null && this.groups[g].kind === "mamba";
        let last = -1;
        for (let i = 0; i < table.length; i += 1) if (table[i] > 0) last = i;
        for (let i = 0; i < table.length; i += 1) {
          const b = table[i];
          if (b < 0 || b >= this.numBlocks || (this.groups && b === 0)) continue;
          const held = state ? (i === last ? c : (i + 1) * size) : Math.min(size, Math.max(0, c - i * size));
          if (held > t[b]) t[b] = held;
        }
      }
    }
    // A held block (private or shared: a forked group's shared partial block too) holds what its
    // tables say; a cached one is full (only full blocks carry keys); free and null hold nothing.
    const cur = this.blocks.cur;
    const names = this.stateNames;
    for (let b = 0; b < this.numBlocks; b += 1) {
      const i = cur[b];
      if (i < 0) continue;
      const st = names[this.blockState[i]];
      if (st === "cached") {
        const g = this.groups ? this.blockGroup[i] : -1;
        const size = this.groups ? this.groupBlockSize(g) : bs;
        // (a cached state: the state after its block's tokens, by its key's position)
        const at = this.blockKeyIndex[i];
        t[b] = g >= 0 && this.groups[g].kind === "mamba" && at >= 0 ? (at + 1) * size : size;
      }
      else if (st === "free" || st === "null") t[b] = 0;
    }
    return t;
  }

  /** The KV-cache group of block b at this step (-1 while free, or without groups). */
  groupOf(b) {
    const i = this.blocks.cur[b];
    return i < 0 || !this.blockGroup ? -1 : this.blockGroup[i];
  }

  /** Block b's reference count at this step, without building its row. */
  refOf(b) {
    const i = this.blocks.cur[b];
    return i < 0 ? 0 : this.blockRef[i];
  }

  /** The state of block b at this step (a name), without building its row. */
  stateOf(b) {
    const i = this.blocks.cur[b];
    return i < 0 ? "free" : this.stateNames[this.blockState[i]];
  }

  /** The block as the inspector and the grid show it (`filling`: a load in flight is filling it). */
  block(b) {
    const row = this.blocks.row(b);
    if (!row) {
      return { block_id: b, state: "free", ref_cnt: 0, prefix_key: null, request_ids: [], num_tokens: 0, filling: false };
    }
    const st = row[B.state];
    const tokens = this.tokens[b];
    // A block's key is registered once it is full (the row carries the key it gets): the contract's rule.
    // A hybrid model's row carries a key only while the block has one (a window keys few of its blocks).
    const keyed = this.groups ? true
      : st === "cached" || ((st === "private" || st === "shared") && tokens === this.blockSize);
    return {
      block_id: b,
      state: st,
      ref_cnt: row[B.ref],
      prefix_key: keyed ? row[B.key] : null,
      request_ids: row[B.reqs] || [],
      num_tokens: tokens,
      group: row[B.group],
      filling: this.filling.has(b),
    };
  }

  /** Where block b sits in the live tables: [{seq, rid, sample, logical, group}] (group 0 without groups). */
  holders(b) {
    const out = [];
    for (const e of this.live) {
      const row = this.seqs.row(e);
      const tables = this.groups ? row[S.tables] : [row[S.table]];
      for (let g = 0; g < tables.length; g += 1) {
        const table = tables[g];
        for (let i = 0; i < table.length; i += 1) {
          if (table[i] === b) out.push({ seq: e, rid: row[S.rid], sample: row[S.sample], logical: i, group: g });
        }
      }
    }
    out.sort((x, y) => x.rid - y.rid || x.sample - y.sample);
    return out;
  }

  /** Every sequence that has a row at this step: [{seq, row}] in (request, sample) order. */
  sequences() {
    const out = [];
    for (let e = 0; e < this.seqs.numEntities; e += 1) {
      const row = this.seqs.row(e);
      if (row) out.push({ seq: e, row });
    }
    return out;
  }

  /** Contiguous regions in force: [{rid, offset, size}] with a placed (non-null) offset. */
  placedRegions() {
    const out = [];
    for (let r = 0; r < this.regions.numEntities; r += 1) {
      const row = this.regions.row(r);
      if (row && row[R.offset] !== null) {
        out.push({ rid: row[R.rid], sample: row[R.sample] ?? 0, offset: row[R.offset], size: row[R.size] });
      }
    }
    return out;
  }

  /** A CPU tier: the blocks sequence q, held for a load at step k, found on the GPU (its prefix-hit rows
   * between its last admit and its load); the blocks after them are being filled by the load and take
   * their keys when it lands (`snapshot.loading_hits`). */
  loadingHits(q, k) {
    const load = this.kindNames.indexOf("load");
    const admit = this.kindNames.indexOf("admit");
    const hit = this.kindNames.indexOf("prefix-hit");
    let i = this.eventCount(k) - 1;
    while (i >= 0 && !(this.evSeq[i] === q && this.evKind[i] === load)) i -= 1;
    if (i < 0) return 0;
    let hits = 0;
    for (i -= 1; i >= 0; i -= 1) {
      if (this.evSeq[i] !== q) continue;
      if (this.evKind[i] === admit) break;
      if (this.evKind[i] === hit) hits += 1;
    }
    return hits;
  }

  /** Number of events that have happened by step k: the bundle's `event_upto` when present. */
  eventCount(k) {
    if (this.eventUpto) return this.eventUpto[Math.max(0, Math.min(k, this.eventUpto.length - 1))];
    return upperBound(this.eventSteps, k - 1);
  }

  /** A metric's value at step k, or null when the bundle lacks it. */
  metric(name, k) {
    const col = this.metrics[name];
    if (!col) return null;
    return col[Math.max(0, Math.min(k, col.length - 1))];
  }
}

/** A whole bundle: the paged and contiguous tracks at one shared instant. The tracks' clocks differ (a
 * contiguous batch steps at its own pace), so the page steps through *moments* (the bundle's `moments`:
 * every time at which either track's state changes, each track's last state by then): moment m shows the
 * paged track at state `paged_step[m]` and the contiguous one at `contiguous_step[m]`, both in force at
 * `time_s[m]`. A hybrid model's bundle has no contiguous track (`contig` null: its moments are the paged
 * steps) and its KV-cache groups (`groups`). */
export class Replay {
  constructor(bundle) {
    this.bundle = bundle;
    this.numSteps = bundle.num_steps; // the paged track's
    this.blockSize = bundle.block_size;
    this.numBlocks = bundle.num_blocks;
    this.groups = bundle.layout ? bundle.layout.groups : null;
    this.requests = new Map((bundle.requests || []).map((r) => [r.request_id, r]));
    this.paged = new TrackReplay(bundle.paged, bundle.num_blocks, bundle.block_size, this.groups,
      bundle.shared_key_labels || null);
    this.contig = bundle.contiguous ? new TrackReplay(bundle.contiguous, 0, bundle.block_size) : null;
    this.contigSteps = this.contig ? bundle.contiguous.num_steps : null;
    const mo = bundle.moments || {};
    const steps = Array.from({ length: this.numSteps + 1 }, (_, k) => k);
    this.momentPaged = i32(mo.paged_step || steps);
    this.momentContig = this.contig ? i32(mo.contiguous_step) : null;
    this.momentTime = mo.time_s ? new Float64Array(mo.time_s) : null;
    this.momentMultiplier = mo.concurrency_multiplier ? new Float64Array(mo.concurrency_multiplier) : null;
    this.numMoments = this.momentPaged.length;
    this.step = -1; // the paged track's state
    this.contigStep = -1; // the contiguous track's
    this.moment = -1;
  }

  /** The first moment at which the paged track is at state k (the contiguous one at its last by then). */
  momentOfStep(k) {
    return Math.min(this.numMoments - 1, lowerBound(this.momentPaged, k));
  }

  /** The first moment at which the contiguous track is at state k. */
  momentOfContigStep(k) {
    return this.momentContig ? Math.min(this.numMoments - 1, lowerBound(this.momentContig, k)) : 0;
  }

  /** The moment at which the paged track is at state k and the contiguous one at state kc (-1: none). */
  momentOfBoth(k, kc) {
    if (!this.momentContig) return kc === null ? this.momentOfStep(k) : -1;
    for (let m = lowerBound(this.momentPaged, k); m < this.numMoments && this.momentPaged[m] === k; m += 1) {
      if (this.momentContig[m] === kc) return m;
    }
    return -1;
  }

  /** Seek to the paged track's state k (the first moment it is in force). */
  seek(k) {
    return this.seekMoment(this.momentOfStep(Math.max(0, Math.min(this.numSteps, k | 0))));
  }

  /** Seek both tracks to moment m; returns the paged blocks that changed (null: all). */
  seekMoment(m) {
    const moment = Math.max(0, Math.min(this.numMoments - 1, m | 0));
    const step = this.momentPaged[moment];
    const changed = this.paged.seek(step);
    if (this.contig) {
      this.contigStep = this.momentContig[moment];
      this.contig.seek(this.contigStep);
    }
    this.step = step;
    this.moment = moment;
    return changed;
  }

  /** The time of the current moment (s), null when the bundle has no clock. */
  get time() {
    return this.momentTime ? this.momentTime[this.moment] : this.paged.metric("time_s", this.step);
  }

  /** Whether a track has ended by the current moment: its last state is in force, every request done. */
  ended(track) {
    return track === this.contig ? this.contigStep >= this.contigSteps : this.step >= this.numSteps;
  }

  /** A metric at the current moment: the multiplier (comparing the tracks) the moment's, a paged column at
   * the paged state (k, the current by default), a contiguous one at the contiguous state. */
  metric(name, k = this.step) {
    if (name === "concurrency_multiplier") {
      if (!this.momentMultiplier) return null;
      const m = k === this.step ? this.moment : this.momentOfStep(k);
      return this.momentMultiplier[Math.max(0, m)];
    }
    const v = this.paged.metric(name, k);
    if (v !== null || !this.contig) return v;
    return this.contig.metric(name, k === this.step ? this.contigStep : this.momentContig[this.momentOfStep(k)]);
  }

  hasMetric(name) {
    if (name === "concurrency_multiplier") return this.momentMultiplier !== null;
    return name in this.paged.metrics || (this.contig !== null && name in this.contig.metrics);
  }

  /** Why the engine rejected request `rid` in `track` (its run's words), or null. */
  rejectReason(track, rid) {
    const reasons = track.track.reject_reasons || {};
    return reasons[String(rid)] ?? null;
  }

  /** The request's display name (req-1 ...), with the sample when it has several. */
  name(rid, sample = 0) {
    const req = this.requests.get(rid);
    const base = req ? req.name : `req#${rid}`;
    return req && req.num_samples > 1 ? `${base}·s${sample}` : base;
  }
}
