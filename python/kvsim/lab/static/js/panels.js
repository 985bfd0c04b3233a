// The metric cards, the contiguous and paged panels and the derivation: each value is a per-step metric
// column of the bundle (computed in Python from the replayed engine state) read at the current step.
// Elements carry the raw value in data-value so tests compare it with kvsim.lab.snapshot exactly.

import { drawPoolStrip, prepareCanvas } from "./grid.js";
import { bytes, esc, int, metric, pct, times } from "./format.js";
import { S } from "./replay.js";

// Writes only what changed: scrubbing redraws every step, and an unchanged write still costs the
// browser a style and layout pass over the element.
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function setData(el, key, value) {
  if (el.dataset[key] !== value) el.dataset[key] = value;
}

function setHtml(el, html) {
  if (el._html !== html) {
    el.innerHTML = html;
    el._html = html;
  }
}

function setWidth(el, width) {
  if (el.style.width !== width) el.style.width = width;
}

function setMetric(el, replay, name, text = null) {
  if (!el) return null;
  let v = replay.metric(name);
  if (Number.isNaN(v)) v = null; // undefined at this step (the multiplier with a side running nothing)
  setData(el, "value", v === null ? "" : String(v));
  setData(el, "metric", name);
  setText(el, text !== null ? text(v) : metric(name, v));
  el.classList.toggle("missing", v === null);
  return v;
}

// What each contiguous baseline reserves per request: the panel's title and its explanation.
const BASELINES = {
  static: ["Contiguous static pre-allocation", (b) => `Each request reserves the whole context up front ` +
    `(max_model_len = ${b.contiguous.max_model_len ? int(b.contiguous.max_model_len) : "—"} tokens, the ` +
    "longest request here), whatever it will use."],
  "orca-max": ["Contiguous reservation: prompt + max_tokens", () => "Each request reserves its prompt plus " +
    "the max_tokens its client asked for (Orca (Max)); it stops at its true output, so the rest stays locked."],
  "orca-pow2": ["Contiguous reservation: next power of two", () => "Each request reserves its prompt plus the " +
    "next power of two of its target length (Orca (Pow2)): a guess that overshoots by up to 2×."],
  "orca-oracle": ["Contiguous reservation: exact length (oracle)", () => "Each request reserves its prompt " +
    "plus exactly the output it will generate (Orca (Oracle): known in advance, which no real server can)."],
};

const $ = (id) => document.getElementById(id);

export class Panels {
  constructor(colors) {
    this.colors = colors;
    this.replay = null;
  }

  setReplay(replay) {
    this.replay = replay;
    const b = replay.bundle;
    const baseline = b.query.contiguous_policy ?? b.contiguous.policy;
    $("contig-policy").textContent = `${baseline} · ${b.query.placement ?? ""}`;
    const [title, explain] = BASELINES[baseline] || ["Contiguous reservation", () => ""];
    $("contig-title").textContent = title;
    $("contig-explain").textContent = `${explain(b)} Slots for tokens not generated yet stay locked, and the ` +
      "gaps between regions cannot host a request that needs more than the largest gap.";
    $("paged-policy").textContent = `${b.query.policy ?? b.paged.policy}${b.query.enable_prefix_caching === false ? " · no prefix cache" : ""}`;
    $("paged-explain").textContent = `The KV cache is cut into fixed-size blocks of ${b.block_size} tokens ` +
      `(${bytes(b.bytes_per_block)} each), allocated as tokens are computed and stitched together by ` +
      "per-sequence block tables, so no request needs contiguous memory and no hole is ever too small.";
  }

  /** Redraw the top of the panels at the replay's step: the cards, each track's headline figure and its
   * batch (what the page's first screen shows). */
  render() {
    const r = this.replay;
    if (!r) return;
    // Cards.
    setMetric($("card-multiplier"), r, "concurrency_multiplier", times);
    setMetric($("card-prefix"), r, "prefix_saved_bytes", bytes);
    setMetric($("card-waste"), r, "contiguous_waste_fraction", pct);
    setMetric($("card-slack"), r, "paged_tail_slack_fraction", pct);
    const bound = r.metric("paged_tail_slack_bound_bytes");
    setText($("card-slack-note"), bound !== null
      ? `Only tail blocks have slack: ${bytes(r.metric("paged_tail_slack_bytes"))} ≤ bound ${bytes(bound)} (< B tokens per sequence)`
      : "Only the tail block of a sequence has slack (< B tokens each)");
    setMetric($("contig-reserved"), r, "contiguous_reserved_bytes", bytes);
    setMetric($("paged-allocated"), r, "paged_allocated_bytes", bytes);
    this.renderBatch($("paged-batch"), r.paged, r.step);
    this.renderBatch($("contig-batch"), r.contig, r.step);
  }

  /** Redraw each track's detail (bars, fragmentation, maps) at the replay's step; `changed` the blocks
   * that changed since its last redraw (null: unknown, the pool map is redrawn). */
  renderDetail(changed = null) {
    const r = this.replay;
    if (!r) return;
    // Contiguous panel.
    const reserved = r.metric("contiguous_reserved_bytes");
    const used = r.metric("contiguous_used_bytes");
    const wasted = r.hasMetric("contiguous_wasted_bytes") ? r.metric("contiguous_wasted_bytes")
      : reserved !== null && used !== null ? reserved - used : null;
    const waste = r.metric("contiguous_waste_fraction");
    setText($("contig-used"), `${bytes(used)} (${pct(waste === null ? null : 1 - waste)})`);
    setData($("contig-used"), "value", String(used));
    setText($("contig-wasted"), `${bytes(wasted)} (${pct(waste)})`);
    setData($("contig-wasted"), "value", String(wasted));
    setWidth($("contig-used-bar"), `${reserved ? (100 * used) / reserved : 0}%`);
    setWidth($("contig-wasted-bar"), `${reserved ? (100 * wasted) / reserved : 0}%`);
    setMetric($("contig-internal"), r, r.hasMetric("contiguous_internal_fragmentation")
      ? "contiguous_internal_fragmentation" : "contiguous_waste_fraction", pct);
    setMetric($("contig-external"), r, "contiguous_external_fragmentation", pct);
    // Paged panel.
    const alloc = r.metric("paged_allocated_bytes");
    const stored = setMetric($("paged-stored"), r, "paged_stored_bytes", bytes);
    const slack = setMetric($("paged-slack"), r, "paged_tail_slack_bytes",
      (v) => `${bytes(v)} (${pct(r.metric("paged_tail_slack_fraction"))})`);
    setWidth($("paged-stored-bar"), `${alloc ? (100 * stored) / alloc : 0}%`);
    setWidth($("paged-slack-bar"), `${alloc ? (100 * slack) / alloc : 0}%`);
    setMetric($("paged-internal"), r, "paged_tail_slack_fraction", pct);
    setMetric($("paged-external"), r, "paged_external_fragmentation", pct);
    setMetric($("paged-saved"), r, "prefix_saved_bytes", bytes);
    this.drawMaps(changed === null || changed.size !== 0);
  }

  /** The same workload's sequences in one track at this step (each track's own engine run). */
  renderBatch(el, track, k) {
    const parts = [["num_running", "running"], ["num_waiting", "waiting"], ["num_swapped", "swapped"],
      ["num_finished", "finished"], ["num_rejected", "rejected"]]
      .map(([name, label]) => [label, track.metric(name, k)])
      .filter(([label, v]) => v !== null && (v > 0 || label === "running" || label === "waiting"));
    setData(el, "running", String(track.metric("num_running", k)));
    setHtml(el, parts.length ? `At this step: ${parts.map(([label, v]) =>
      `<b class="${label === "running" ? "run" : ""}">${int(v)}</b> ${label}`).join(" · ")}` : "");
  }

  drawMaps(pool = true) {
    const r = this.replay;
    if (pool) drawPoolStrip($("paged-map"), r.paged, this.colors);
    const counts = ["private", "shared", "cached", "free"].map((s) => [s, r.metric(`paged_${s}_blocks`)])
      .filter(([, v]) => v !== null).map(([s, v]) => `${int(v)} ${s}`);
    setText($("paged-map-caption"), `${int(r.numBlocks)} blocks${counts.length ? ` · ${counts.join(" · ")}` : ""}`);
    this.drawRegions();
  }

  /** The contiguous address space: each placed region at its offset, stored part and reserved rest. */
  drawRegions() {
    const r = this.replay;
    const canvas = $("contig-map");
    const { ctx, w, h } = prepareCanvas(canvas);
    ctx.fillStyle = this.colors.bg;
    ctx.fillRect(0, 0, w, h);
    const regions = r.contig.placedRegions();
    let cap = r.bundle.contiguous.capacity_tokens ?? r.bundle.capacity_tokens;
    if (!cap) cap = Math.max(1, ...regions.map((g) => g.offset + g.size));
    const X = (tok) => (tok / cap) * w;
    const hatch = this._hatch(ctx);
    const track = r.contig;
    // Regions are disjoint: each layer (reserved hatch, used fill, outline, label) is one path over all
    // of them, not a fill and a stroke per region (the outlines alone cost ~2 ms a step in software).
    const boxes = [];
    for (const g of regions) {
      const e = track.seqOf(g.rid, g.sample);
      const row = e === undefined ? null : track.seqs.row(e);
      const usedTok = row ? Math.min(g.size, Math.max(0, row[S.ctx] + row[S.ctxRate] * (r.step - row[S.step]))) : 0;
      boxes.push({ g, x: X(g.offset), ww: Math.max(1, X(g.size) - 1), used: Math.max(usedTok > 0 ? 1 : 0, X(usedTok)) });
    }
    const layer = (rect) => {
      ctx.beginPath();
      for (const b of boxes) rect(b);
    };
    layer((b) => ctx.rect(b.x, 4, b.ww, h - 8));
    ctx.fillStyle = hatch;
    ctx.fill();
    layer((b) => b.used > 0 && ctx.rect(b.x, 4, b.used, h - 8));
    ctx.fillStyle = "#2bb8a3";
    ctx.fill();
    layer((b) => ctx.rect(b.x + 0.5, 4.5, b.ww - 1, h - 9));
    ctx.strokeStyle = "rgba(255,255,255,0.55)";
    ctx.lineWidth = 1;
    ctx.stroke();
    ctx.fillStyle = "#fff";
    ctx.font = "11px ui-sans-serif, system-ui, sans-serif";
    for (const b of boxes) if (b.ww > 30) ctx.fillText(r.name(b.g.rid, b.g.sample), b.x + 4, 18, b.ww - 8);
    this.regionLabels = boxes.filter((b) => b.ww > 30).map((b) => r.name(b.g.rid, b.g.sample));
    canvas.dataset.labels = this.regionLabels.join(",");
    const placed = regions.reduce((a, g) => a + g.size, 0);
    setText($("contig-map-caption"), `${int(regions.length)} regions · ${int(placed)} of ${int(cap)} token slots reserved`);
  }

  _hatch(ctx) {
    if (this.hatchPattern) return this.hatchPattern;
    const c = document.createElement("canvas");
    c.width = 8;
    c.height = 8;
    const g = c.getContext("2d");
    g.fillStyle = "#5b2330";
    g.fillRect(0, 0, 8, 8);
    g.strokeStyle = "#ff5d73";
    g.lineWidth = 2;
    g.beginPath();
    g.moveTo(0, 8);
    g.lineTo(8, 0);
    g.stroke();
    this.hatchPattern = ctx.createPattern(c, "repeat");
    return this.hatchPattern;
  }

  renderDerivation() {
    const r = this.replay;
    const b = r.bundle;
    const m = b.model || {};
    const bpt = b.bytes_per_token ?? m.bytes_per_token;
    const arch = m.kv_lora_rank
      ? `MLA: one compressed latent of ${int(m.kv_lora_rank)} (+ the decoupled RoPE key) per layer, not K and V per head`
      : m.num_kv_heads && m.num_heads && m.num_kv_heads < m.num_heads
        ? `GQA: ${int(m.num_heads)} query heads share ${int(m.num_kv_heads)} KV heads, and only KV heads are cached`
        : "multi-head attention: every head caches its K and V";
    // The list is written once per bundle with a span for each number of the step; a step sets only
    // those spans' text (rewriting the list's HTML each step cost the browser a layout of every item).
    const v = (name) => `<span data-deriv="${name}"></span>`;
    const items = [
      `<b>Bytes per token</b> (${esc(m.name || "model")}, ${arch}): <span class="mono formula">${esc(m.formula || "—")}</span>`,
      `<b>Bytes per block</b>: B = ${int(b.block_size)} tokens × ${int(bpt)} B = <b>${bytes(b.bytes_per_block)}</b>` +
        ` (${int(b.bytes_per_block)} B); the pool has ${int(b.num_blocks)} blocks (block 0 is vLLM’s null block)` +
        ` = ${bytes(b.num_blocks * b.bytes_per_block)}.`,
      `<b>Contiguous</b> (${esc(b.query.contiguous_policy || b.contiguous.policy)}) reserves each request’s whole region when it starts:` +
        ` <b>${v("contiguous_reserved_bytes")}</b> at step <span data-deriv="step"></span>, of which ${v("contiguous_used_bytes")} hold computed tokens.`,
      `<b>Paged</b> allocates a block only when a token needs it: <b>${v("paged_allocated_bytes")}</b> allocated,` +
        ` ${v("paged_stored_bytes")} stored; shared prefix blocks are held once (${v("prefix_saved_bytes")} saved).`,
      `<b>Tail slack is bounded</b>: only a sequence’s last block can be partial, so each wastes at most B − 1 = ${int(b.block_size - 1)} tokens` +
        ` (${bytes((b.block_size - 1) * bpt)}): slack now ${v("paged_tail_slack_bytes")}` +
        (r.hasMetric("paged_tail_slack_bound_bytes") ? ` ≤ bound ${v("paged_tail_slack_bound_bytes")}.` : "."),
      `<b>Concurrency multiplier</b> = (contiguous reserved ÷ its running sequences) ÷ (paged allocated ÷ its` +
        ` running sequences) = <b>${v("concurrency_multiplier")}</b>: how many sequences paging fits into the memory` +
        " one contiguous sequence holds, at each side’s own batch (— when a side runs nothing).",
    ];
    setText($("deriv-model"), m.name ? `(${m.name}, ${m.dtype || ""} KV)` : "");
    const list = $("derivation");
    const html = items.map((t) => `<li>${t}</li>`).join("");
    if (list._html !== html) {
      setHtml(list, html);
      this.derivSpans = [...list.querySelectorAll("[data-deriv]")];
    }
    for (const el of this.derivSpans) {
      const name = el.dataset.deriv;
      const value = r.metric(name);
      setText(el, name === "step" ? int(r.step) : name === "concurrency_multiplier"
        ? times(Number.isNaN(value) ? null : value) : bytes(value));
    }
  }
}
