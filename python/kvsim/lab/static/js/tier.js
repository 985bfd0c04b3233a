// The CPU tier beside the GPU pool (vLLM's native KV offloading, DESIGN.md §CPU tier): its chunks at this
// step by state (pinned by a load, ready, pending while their store is in flight, free), the transfers of
// this step from the engine's event log (stores planned GPU → CPU, loads planned CPU → GPU, transfers seen
// complete, chunks evicted), the requests held for their loads, and the tier's counters. Every number is
// a metric column of the bundle (`state.tier_columns`, counted from the log) or one of its event rows; the
// log names no chunk, so the cells are drawn grouped by state, not at positions.

import { bytes, esc, int, secs } from "./format.js";
import { canvasSize, forgetCanvasSizes, prepareCanvas } from "./grid.js";

export const TIER_KINDS = ["store", "load", "cpu-hit", "cpu-evict", "store-done", "load-done"];
// Cell states in drawing order, with the column each count comes from.
export const CHUNK_STATES = ["loading", "ready", "pending", "free"];
const MAX_LINES = 8;
// Past this many chunks the tier is drawn as one bar of the four states' shares, not a cell each.
export const MAX_CELLS = 2048;

/** A short duration, in µs below a millisecond (a link's latency is a few µs). */
function span(t) {
  return t < 1e-3 ? `${Number((t * 1e6).toPrecision(3))} µs` : secs(t);
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/** The tier's chunk counts at step k from the bundle's columns (null without a tier). */
export function tierCounts(replay, k) {
  const tier = replay.bundle.tier;
  if (!tier) return null;
  const m = (name) => replay.metric(name, k) ?? 0;
  const used = m("cpu_chunks");
  const pending = m("cpu_pending_chunks");
  const loading = m("cpu_loading_chunks");
  return {
    chunks: tier.chunks,
    used,
    pending,
    loading,
    ready: used - pending - loading,
    free: tier.chunks - used,
  };
}

/** Colours of the chunk states, read once from the stylesheet. */
function tierColors() {
  const css = getComputedStyle(document.documentElement);
  const get = (n, d) => css.getPropertyValue(n).trim() || d;
  return {
    loading: get("--c-tier-loading", "#f05bcb"),
    ready: get("--c-tier-ready", "#4d8dff"),
    pending: get("--c-tier-pending", "#e3a82b"),
    free: get("--c-free", "#262d38"),
    bg: get("--c-bg-deep", "#090b0f"),
    mark: get("--c-text", "#e6ecf5"),
  };
}

/** Cell size and columns for n cells in a width: square cells of 4 to 22 px, at most 8 rows of the big
 * ones; a tier of many chunks gets small cells. */
export function tierLayout(n, w) {
  let cell = 22;
  while (cell > 4 && Math.ceil(n / Math.max(1, Math.floor(w / cell))) * cell > 8 * 22) cell -= 1;
  const cols = Math.max(1, Math.floor(w / cell));
  return { cell, cols, rows: Math.max(1, Math.ceil(n / cols)) };
}

export class TierView {
  constructor({ root }) {
    this.root = root;
    this.canvas = root.querySelector("#tier-canvas");
    this.title = root.querySelector("#tier-title");
    this.caption = root.querySelector("#tier-caption");
    this.flows = root.querySelector("#tier-flows");
    this.held = root.querySelector("#tier-held");
    this.stats = Object.fromEntries([...root.querySelectorAll("[data-tier-stat]")].map((el) => [el.dataset.tierStat, el]));
    this.replay = null;
    this.colors = null;
    this.shownStep = -1;
  }

  setReplay(replay) {
    this.replay = replay;
    const tier = replay.bundle.tier;
    this.root.hidden = !tier;
    this.shownStep = -1;
    if (!tier) return;
    this.colors = this.colors || tierColors();
    setText(this.title, `CPU tier · host memory (${int(tier.chunks)} chunks × ${bytes(tier.chunk_bytes)} = ` +
      `${bytes(tier.chunks * tier.chunk_bytes)})`);
    // (a model with state layers: its states are chunks of their own, DESIGN.md §CPU tier, "A Mamba group")
    const states = !!(replay.groups && replay.groups.some((g) => g.kind === "mamba"));
    const link = tier.s_per_block > 0 ? `${span(tier.latency_s)} + ${span(tier.s_per_block)} a block`
      : `${span(tier.latency_s)} a transfer (no time per block: no GPU is given to derive its host link from)`;
    setText(this.caption, `vLLM’s native KV offloading: a chunk is ${int(tier.blocks_per_chunk)} GPU ` +
      `block${tier.blocks_per_chunk === 1 ? "" : "s"} of one request, stored as its tokens are computed` +
      `${tier.prompt_only ? " (prompt tokens only)" : ""}, evicted ${tier.eviction_policy.toUpperCase()}; the link takes ` +
      `${link}.${states ? " With state layers, a state group’s chunk is one block, the state after the chunk’s last " +
        "token: stored alone, before the step’s other stores, where the GPU’s prefix cache keys a state (a prompt’s " +
        "last block boundary, a shared prefix’s end); a load reads the one state its request resumes from." : ""} ` +
      "The log names no chunk nor its group, so the cells are grouped by state.");
    // The canvas's height follows the tier's rows (measured once per run, not per step).
    forgetCanvasSizes(this.canvas);
    const { w } = canvasSize(this.canvas);
    const { cell, rows } = tierLayout(tier.chunks, w);
    const bar = tier.chunks > MAX_CELLS;
    this.canvas.style.height = bar ? "28px" : `${rows * cell}px`;
    forgetCanvasSizes(this.canvas); // measured again at its new height when drawn
    this.canvas.dataset.cell = String(cell);
    this.canvas.dataset.mode = bar ? "bar" : "cells";
    this.root.querySelector("#tier-fresh-legend").hidden = bar; // a bar outlines nothing
    const failed = this.stats.stores_failed;
    if (failed) {
      setText(failed, int(tier.stores_failed));
      failed.dataset.value = String(tier.stores_failed);
    }
    const skipped = this.stats.stores_skipped;
    if (skipped) {
      setText(skipped, int(tier.stores_skipped));
      skipped.dataset.value = String(tier.stores_skipped);
    }
  }

  relayout() {
    if (this.replay) {
      this.setReplay(this.replay);
      this.render();
    }
  }

  render() {
    const r = this.replay;
    if (!r || !r.bundle.tier) return;
    const k = r.step;
    if (k === this.shownStep) return;
    this.shownStep = k;
    const c = tierCounts(r, k);
    const m = (name, kk = k) => r.metric(name, kk) ?? 0;
    const storedNow = m("cpu_stored_chunks") - (k > 0 ? m("cpu_stored_chunks", k - 1) : 0);
    const loadedNow = m("cpu_loaded_chunks") - (k > 0 ? m("cpu_loaded_chunks", k - 1) : 0);
    for (const st of ["chunks", "used", "pending", "loading", "ready", "free"]) this.root.dataset[st] = String(c[st]);
    this.draw(c, Math.min(storedNow, c.pending), Math.min(loadedNow, c.loading));
    const stat = (name, value, text = int(value)) => {
      const el = this.stats[name];
      if (!el) return;
      setText(el, text);
      el.dataset.value = String(value);
    };
    stat("used", c.used, `${int(c.used)} / ${int(c.chunks)}`);
    stat("cpu_hit_tokens", m("cpu_hit_tokens"));
    stat("cpu_loads", m("cpu_loads"), `${int(m("cpu_loads"))} (${int(m("cpu_loaded_chunks"))} chunks)`);
    stat("cpu_stores", m("cpu_stores"), `${int(m("cpu_stores"))} (${int(m("cpu_stored_chunks"))} chunks)`);
    stat("cpu_evictions", m("cpu_evictions"));
    stat("num_held", m("num_held"));
    this.renderFlows(r, k);
    this.renderHeld(r);
    this.root.dataset.step = String(k);
  }

  /** The chunks by state: pinned by a load (read back to the GPU), ready, pending (store in flight),
   * free; this step's new stores and loads outlined. */
  draw(c, newStores, newLoads) {
    const { ctx, w, h } = prepareCanvas(this.canvas);
    const col = this.colors;
    ctx.clearRect(0, 0, w, h);
    if (c.chunks > MAX_CELLS) {
      // One bar: each state's share of the chunks, in the cells' order (a cell each would be a few pixels).
      let x = 0;
      for (const st of CHUNK_STATES) {
        const width = (w * c[st]) / c.chunks;
        ctx.fillStyle = col[st];
        ctx.fillRect(x, 0, width, h);
        x += width;
      }
      this.canvas.dataset.drawn = JSON.stringify({ loading: c.loading, ready: c.ready, pending: c.pending, free: c.free });
      this.canvas.setAttribute("aria-label", `CPU tier chunks: ${int(c.loading)} being loaded, ${int(c.ready)} ready, ` +
        `${int(c.pending)} pending (store in flight), ${int(c.free)} free`);
      return;
    }
    const { cell, cols } = tierLayout(c.chunks, w);
    const gap = cell >= 8 ? 2 : cell >= 5 ? 1 : 0;
    const runs = [["loading", c.loading], ["ready", c.ready], ["pending", c.pending], ["free", c.free]];
    let i = 0;
    const drawn = { loading: 0, ready: 0, pending: 0, free: 0 };
    for (const [st, n] of runs) {
      for (let j = 0; j < n; j += 1, i += 1) {
        const x = (i % cols) * cell;
        const y = Math.floor(i / cols) * cell;
        ctx.fillStyle = col[st];
        ctx.fillRect(x, y, cell - gap, cell - gap);
        // This step's transfers: a load's chunks (the first of the pinned) and a store's (the last of the
        // pending), outlined.
        const fresh = (st === "loading" && j < newLoads) || (st === "pending" && j >= n - newStores);
        if (fresh && cell >= 6) {
          ctx.strokeStyle = col.mark;
          ctx.lineWidth = Math.max(1, Math.floor(cell / 8));
          const lw = ctx.lineWidth;
          ctx.strokeRect(x + lw / 2, y + lw / 2, cell - gap - lw, cell - gap - lw);
        }
        drawn[st] += 1;
      }
    }
    this.canvas.dataset.drawn = JSON.stringify(drawn);
    this.canvas.setAttribute("aria-label", `CPU tier chunks: ${int(c.loading)} being loaded, ${int(c.ready)} ready, ` +
      `${int(c.pending)} pending (store in flight), ${int(c.free)} free`);
  }

  /** The tier's events of this step (those between the previous step's count and this one's). */
  renderFlows(r, k) {
    const t = r.paged;
    const lo = k > 0 ? t.eventCount(k - 1) : 0;
    const hi = t.eventCount(k);
    const lines = [];
    let evicted = 0;
    for (let i = lo; i < hi; i += 1) {
      const kind = t.kindNames[t.evKind[i]];
      if (!TIER_KINDS.includes(kind)) continue;
      const q = t.evSeq[i];
      const who = q >= 0 ? r.name(t.seqRid[q], t.seqSample[q]) : "";
      const n = t.evCount[i];
      const ch = `${int(n)} chunk${n === 1 ? "" : "s"}`;
      if (kind === "cpu-evict") evicted += 1;
      else if (kind === "store") lines.push(["store", `GPU → CPU: store of ${ch} of ${who} planned (pending until it lands)`]);
      else if (kind === "load") lines.push(["load", `CPU → GPU: load of ${ch} for ${who} (held until it lands)`]);
      else if (kind === "cpu-hit") lines.push(["hit", `${who} finds ${int(n)} token${n === 1 ? "" : "s"} in the tier it will not compute`]);
      else if (kind === "store-done") lines.push(["done", `store of ${ch} of ${who} landed: ready`]);
      else if (kind === "load-done") lines.push(["done", `load of ${ch} for ${who} landed: it may resume`]);
    }
    if (evicted) lines.unshift(["evict", `${int(evicted)} chunk${evicted === 1 ? "" : "s"} evicted to make room for a store`]);
    const shown = lines.slice(0, MAX_LINES);
    const more = lines.length - shown.length;
    const html = lines.length
      ? shown.map(([cls, text]) => `<li class="flow flow-${cls}" data-flow="${cls}">${esc(text)}</li>`).join("") +
        (more > 0 ? `<li class="flow">… and ${int(more)} more (the event stream lists them)</li>` : "")
      : `<li class="flow flow-none">No tier transfer at this step.</li>`;
    if (this.flows.innerHTML !== html) this.flows.innerHTML = html;
    this.flows.dataset.count = String(lines.length);
  }

  /** The requests held for their loads at this step: loading, or landed and not yet resumed. */
  renderHeld(r) {
    const held = [];
    // Only scan the sequences while the tier holds some (a long run's rows are built on demand).
    const scan = (r.metric("num_held") ?? 0) > 0 ? r.paged.sequences() : [];
    for (const { row } of scan) {
      const st = row[3];
      if (st === "loading" || st === "loaded") held.push(`${r.name(row[1], row[2])} (${st === "loading" ? "load in flight" : "landed, resumes next"})`);
    }
    setText(this.held, held.length ? `Held for their loads (neither running nor computing): ${held.join(", ")}` : "");
    this.held.dataset.count = String(held.length);
  }
}
