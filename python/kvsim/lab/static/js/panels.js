// The metric cards, the contiguous and paged panels and the derivation: each value is a per-step metric
// column of the bundle (computed in Python from the replayed engine state) read at the current step.
// Elements carry the raw value in data-value so tests compare it with kvsim.lab.snapshot exactly.

import { drawPoolStrip, prepareCanvas } from "./grid.js";
import { bytes, esc, int, metric, pct, secs, times } from "./format.js";
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
    const contig = $("contig-title").closest(".track-contig");
    contig.classList.toggle("absent", !b.contiguous);
    if (b.contiguous) {
      const baseline = b.query.contiguous_policy ?? b.contiguous.policy;
      $("contig-policy").textContent = `${baseline} · ${b.query.placement ?? ""}`;
      const [title, explain] = BASELINES[baseline] || ["Contiguous reservation", () => ""];
      $("contig-title").textContent = title;
      $("contig-explain").textContent = `${explain(b)} Slots for tokens not generated yet stay locked, and the ` +
        "gaps between regions cannot host a request that needs more than the largest gap.";
    } else {
      // A hybrid model: kvsim's contiguous baselines reserve one full-attention KV per token, which this
      // model does not keep; nothing is simulated on this side, and the page says so.
      $("contig-policy").textContent = "not simulated";
      $("contig-title").textContent = "Contiguous reservation: no baseline for this model";
      const kinds = new Set(b.layout.groups.map((g) => g.kind));
      const notKept = [kinds.has("sliding_window") && "sliding windows", kinds.has("chunked_local") && "local chunks",
        kinds.has("mamba") && "state layers"].filter(Boolean).join(" and ");
      $("contig-explain").textContent = `${b.model.name} is served by vLLM’s hybrid KV-cache manager ` +
        `(${b.layout.groups.length} KV-cache groups: ${b.layout.groups.map((g) => g.label).join(", ")}). kvsim’s ` +
        `contiguous baselines reserve every layer’s K and V for every token, which its ${notKept || "layers"} do ` +
        "not keep, so there is no contiguous run to compare with: the cards and the chart show the paged side only.";
    }
    $("paged-policy").textContent = `${b.query.policy ?? b.paged.policy}${b.query.enable_prefix_caching === false ? " · no prefix cache" : ""}`;
    const kinds = b.layout ? new Set(b.layout.groups.map((g) => g.kind)) : new Set();
    const rules = [kinds.has("full") && "full attention keeps every block",
      kinds.has("sliding_window") && "a sliding window frees the blocks that leave it (the null block takes their place)",
      kinds.has("chunked_local") && "a local chunk frees the chunks before it (the null block takes their place)",
      kinds.has("mamba") && (b.query.enable_prefix_caching === false ? "a state layer holds one block whatever the length"
        : "a state layer holds one block for its running state whatever the length (null entries before it; for a " +
          "step after its state moves to a new block, the one before too)")].filter(Boolean);
    $("paged-explain").textContent = b.layout
      ? `One pool of blocks of ${bytes(b.bytes_per_block)}, shared by ${b.layout.groups.length} KV-cache groups of ` +
        `${b.layout.group_size} layers: a block id is one page in each layer of the group holding it. Each request ` +
        `has a block table per group: ${rules.join(", ")}.`
      : `The KV cache is cut into fixed-size blocks of ${b.block_size} tokens ` +
        `(${bytes(b.bytes_per_block)} each), allocated as tokens are computed and stitched together by ` +
        "per-sequence block tables, so no request needs contiguous memory and no hole is ever too small.";
    $("card-multiplier").closest(".card").querySelector(".card-note").textContent = b.contiguous
      ? "Sequences paging fits in the memory one contiguous sequence holds, each side’s batch at the same instant t (— when a side runs nothing)"
      : "— here: no contiguous baseline for a hybrid model";
    $("card-waste").closest(".card").querySelector(".card-note").textContent = b.contiguous
      ? "Of the contiguous reservation: slots for tokens not (yet) generated" : "— here: no contiguous baseline for a hybrid model";
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
    const per = r.groups ? "< B tokens per sequence and attention group" : "< B tokens per sequence";
    setText($("card-slack-note"), bound !== null
      ? `Of the paged allocation; only tail blocks have slack: ${bytes(r.metric("paged_tail_slack_bytes"))} ≤ bound ${bytes(bound)} (${per})`
      : `Of the paged allocation; only the tail block of a sequence has slack (${per})`);
    setMetric($("contig-reserved"), r, "contiguous_reserved_bytes", bytes);
    setMetric($("paged-allocated"), r, "paged_allocated_bytes", bytes);
    this.renderBatch($("paged-batch"), r.paged, r.step);
    if (r.contig) this.renderBatch($("contig-batch"), r.contig, r.contigStep);
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
    if (!r.contig) {
      // No contiguous track: its figures read "—" (their data-value empty), not zeros.
      for (const id of ["contig-used", "contig-wasted"]) {
        setText($(id), "—");
        setData($(id), "value", "");
      }
      setMetric($("contig-internal"), r, "contiguous_internal_fragmentation", pct);
      setMetric($("contig-external"), r, "contiguous_external_fragmentation", pct);
    } else {
    setText($("contig-used"), `${bytes(used)} (${pct(waste === null ? null : 1 - waste)})`);
    setData($("contig-used"), "value", String(used));
    setText($("contig-wasted"), `${bytes(wasted)} (${pct(waste)})`);
    setData($("contig-wasted"), "value", String(wasted));
    setWidth($("contig-used-bar"), `${reserved ? (100 * used) / reserved : 0}%`);
    setWidth($("contig-wasted-bar"), `${reserved ? (100 * wasted) / reserved : 0}%`);
    setMetric($("contig-internal"), r, r.hasMetric("contiguous_internal_fragmentation")
      ? "contiguous_internal_fragmentation" : "contiguous_waste_fraction", pct);
    setMetric($("contig-external"), r, "contiguous_external_fragmentation", pct);
    }
    // Paged panel.
    const alloc = r.metric("paged_allocated_bytes");
    // (a CPU tier's load in flight: its blocks count as stored from the load's admission, the engine's
    // accounting, though their KV is still on the link; the figure says how much of it that is)
    const onLink = this.onLinkBytes();
    const stored = setMetric($("paged-stored"), r, "paged_stored_bytes",
      (v) => (onLink > 0 && v !== null ? `${bytes(v)} (${bytes(onLink)} of it still on the link from the CPU tier)` : bytes(v)));
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
    const parts = [["num_running", "running"], ["num_held", "held for CPU-tier loads"], ["num_waiting", "waiting"],
      ["num_swapped", "swapped"], ["num_finished", "finished"], ["num_rejected", "rejected"]]
      .map(([name, label]) => [label, track.metric(name, k)])
      .filter(([label, v]) => v !== null && (v > 0 || label === "running" || label === "waiting"));
    setData(el, "running", String(track.metric("num_running", k)));
    setData(el, "step", String(k));
    // Each run's own step at the shared instant, and whether it has ended by then (every request done).
    const r = this.replay;
    const n = track === r.paged ? r.numSteps : r.contigSteps;
    const ended = k >= n;
    setData(el, "ended", String(ended));
    const at = n === 0 ? "No step ran" : ended
      ? `Ended at t = ${secs(track.metric("time_s", n))} (step ${int(n)} of ${int(n)})`
      : `At step ${int(k)} of ${int(n)}`;
    // The swapped-out sequences' blocks wait in the CPU swap space (`TrackReplay.swapSpace`).
    const swap = track === this.replay.paged ? track.swapSpace(k) : { seqs: 0, blocks: 0 };
    setData(el, "swapBlocks", String(swap.blocks));
    const cap = this.replay.bundle.swap_space_blocks;
    setHtml(el, parts.length ? `${at}: ${parts.map(([label, v]) =>
      `<b class="${label === "running" ? "run" : ""}">${int(v)}</b> ${label}` +
      (label === "swapped" && swap.seqs ? ` (their ${int(swap.blocks)} block${swap.blocks === 1 ? "" : "s"} in the CPU swap space` +
        `${cap ? `, of its ${int(cap)}` : ""})` : ""))
      .join(" · ")}` : "");
  }

  drawMaps(pool = true) {
    const r = this.replay;
    if (pool) drawPoolStrip($("paged-map"), r.paged, this.colors);
    // (the private blocks a CPU-tier load in flight is filling, drawn apart, said apart)
    const filling = r.paged.filling.size;
    const counts = ["private", "shared", "cached", "free"].map((s) => [s, r.metric(`paged_${s}_blocks`)])
      .filter(([, v]) => v !== null).map(([s, v]) => `${int(v)} ${s}` +
        (s === "private" && filling ? ` (${int(filling)} of them being filled by a CPU-tier load)` : ""));
    // Block 0 is vLLM's null block (never handed out): the counts add up to the pool with it.
    const nulls = r.numBlocks > 0 && r.paged.stateOf(0) === "null" ? 1 : 0;
    setText($("paged-map-caption"), `${int(r.numBlocks)} blocks${counts.length
      ? ` · ${nulls ? `${nulls} null · ` : ""}${counts.join(" · ")}` : ""}`);
    this.drawRegions();
  }

  /** The contiguous address space: each placed region at its offset, stored part and reserved rest. */
  drawRegions() {
    const r = this.replay;
    const canvas = $("contig-map");
    const { ctx, w, h } = prepareCanvas(canvas);
    ctx.fillStyle = this.colors.bg;
    ctx.fillRect(0, 0, w, h);
    if (!r.contig) {
      this.regionLabels = [];
      canvas.dataset.labels = "";
      setText($("contig-map-caption"), "no contiguous baseline");
      return;
    }
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
      const usedTok = row ? Math.min(g.size, Math.max(0, row[S.ctx] + row[S.ctxRate] * (r.contigStep - row[S.step]))) : 0;
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

  /** A CPU tier: the bytes of the blocks its loads in flight are filling at this step (counted as stored
   * from the load's admission, the engine's accounting, though their KV is still on the host link). */
  onLinkBytes() {
    const r = this.replay;
    const tier = r.bundle.tier;
    return tier && r.hasMetric("cpu_loading_chunks")
      ? r.metric("cpu_loading_chunks") * tier.blocks_per_chunk * r.bundle.bytes_per_block : 0;
  }

  /** A hybrid model's derivation: per group its layers, page and block bytes; how the pages were made one
   * size; how many blocks the pool holds and why; the blocks each group holds at this step. Every number
   * is the bundle's (`layout`, computed in Python as vLLM forms the groups) or a metric column at the step. */
  _hybridItems(v) {
    const r = this.replay;
    const b = r.bundle;
    const L = b.layout;
    const m = b.model || {};
    const groupLines = L.groups.map((g) => {
      const ids = g.layer_ids;
      const layers = ids.length === g.num_layers ? `${int(g.num_layers)} layers`
        : `${int(ids.length)} layers + ${int(g.num_layers - ids.length)} padding`;
      const list = ids.length > 8 ? `${ids.slice(0, 6).join(", ")}, …` : ids.join(", ");
      const per = g.kind === "sliding_window"
        ? `; while it decodes a request holds at most ⌈(${int(g.window)} − 1) / ${int(g.block_size)}⌉ + 1 = ` +
          `${int(g.blocks_per_request)} of them: a block whose tokens left the window is freed at the request’s next ` +
          "step, the null block in its place (a prompt computed in one step holds all its blocks until then)"
        : g.kind === "mamba" ? "; a request holds one block for its running state, whatever its length " +
          "(with prefix caching, the step after it starts from a cached state, that one too)"
          : "; a request holds ⌈tokens / B⌉ of them";
      return `<li data-group="${g.index}"><b>G${g.index} ${esc(g.label)}</b>: ${esc(layers)} (${esc(list)}); one layer’s page ` +
        `<span class="mono formula">${esc(g.page_formula)}</span>${g.page_bytes !== (g.state_bytes ?? g.page_bytes) ? ` → ${int(g.page_bytes)} bytes` : ""}; ` +
        // (the page in bytes: 12 × 1.06 MiB read as 12.72, where the page is 1.0625 MiB and the block 12.75)
        `a block = ${int(g.num_layers)} layers × ${int(g.page_bytes)} bytes = <b>${bytes(g.bytes_per_block)}</b>` +
        ` (${int(g.bytes_per_block)} bytes)${per}.</li>`;
    }).join("");
    const pool = b.kv_cache_bytes !== null && b.kv_cache_bytes !== undefined
      ? `KV cache ${bytes(b.kv_cache_bytes)} ÷ ${bytes(b.bytes_per_block)} per block = <b>${int(b.num_blocks)} blocks</b>` +
        " (whole blocks, as vLLM’s num_gpu_blocks; block 0 is its null block)"
      : `<b>${int(b.num_blocks)} blocks</b> given (num_blocks) × ${bytes(b.bytes_per_block)} = ${bytes(b.num_blocks * b.bytes_per_block)}` +
        " (block 0 is vLLM’s null block)";
    const held = L.groups.map((g) => `G${g.index} <span data-deriv="group:${g.index}"></span>`).join(", ");
    const attention = L.groups.filter((g) => g.kind !== "mamba").length;
    return [
      `<b>KV-cache groups</b> (${esc(m.name || "model")}, vLLM’s hybrid KV-cache manager: a group’s layers share ` +
        `one block table per request): <ul class="deriv-groups">${groupLines}</ul>`,
      `<b>One page size</b>: ${L.unify.map((u) => esc(u)).join("; ")}; so a block id takes ` +
        `max over groups (layers × page) = <b>${bytes(b.bytes_per_block)}</b>, whichever group holds it.`,
      `<b>The pool</b>: ${pool}. A block’s ${int(b.block_size)} token slots take ${bytes(b.bytes_per_token)} each ` +
        "(its group’s layers only)" + (L.groups.some((g) => g.kind === "sliding_window" || g.kind === "chunked_local")
        ? `; were every attention layer to keep every token (its ${int(L.attention_layers)} attention layers as full ` +
          `attention, vLLM’s --disable-hybrid-kv-cache-manager), a token would take ${bytes(m.full_attention_bytes_per_token)}.`
        : "."),
      `<b>Held at step <span data-deriv="step"></span></b>, group by group (blocks × ${bytes(b.bytes_per_block)}): ${held}; ` +
        `in all <b>${v("paged_allocated_bytes")}</b> allocated, ${v("paged_stored_bytes")} stored${b.tier ? v("on_link") : ""}` +
        `${L.groups.some((g) => g.kind === "mamba") ? " (a state block counted full)" : ""}; shared prefix blocks ` +
        `are held once (${v("prefix_saved_bytes")} saved).`,
      `<b>Tail slack is bounded</b>: only a table’s last block can be partial, ${attention === 1
        ? "in its one attention group" : `in each of its ${int(attention)} attention groups`}, so a sequence wastes at most ${int(attention)} × (B − 1) = ` +
        `${int(attention * (b.block_size - 1))} token slots: slack now ${v("paged_tail_slack_bytes")}` +
        (r.hasMetric("paged_tail_slack_bound_bytes") ? ` ≤ bound ${v("paged_tail_slack_bound_bytes")}.` : "."),
      "<b>Concurrency multiplier</b>: — (no contiguous baseline for a model served by the hybrid KV-cache manager).",
    ];
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
    const items = b.layout ? this._hybridItems(v) : [
      `<b>Bytes per token</b> (${esc(m.name || "model")}, ${arch}): <span class="mono formula">${esc(m.formula || "—")}</span>`,
      `<b>Bytes per block</b>: B = ${int(b.block_size)} tokens a block × ${int(bpt)} bytes a token = <b>${bytes(b.bytes_per_block)}</b>` +
        ` (${int(b.bytes_per_block)} bytes); the pool has ${int(b.num_blocks)} blocks (block 0 is vLLM’s null block)` +
        ` = ${bytes(b.num_blocks * b.bytes_per_block)}.`,
      `<b>Contiguous</b> (${esc(b.query.contiguous_policy || b.contiguous.policy)}) reserves each request’s whole region when it starts:` +
        ` <b>${v("contiguous_reserved_bytes")}</b> at step <span data-deriv="step"></span>, of which ${v("contiguous_used_bytes")} hold computed tokens.`,
      `<b>Paged</b> allocates a block only when a token needs it: <b>${v("paged_allocated_bytes")}</b> allocated,` +
        ` ${v("paged_stored_bytes")} stored${b.tier ? v("on_link") : ""}; shared prefix blocks are held once (${v("prefix_saved_bytes")} saved).`,
      `<b>Tail slack is bounded</b>: only a sequence’s last block can be partial, so each wastes at most B − 1 = ${int(b.block_size - 1)} tokens` +
        ` (${bytes((b.block_size - 1) * bpt)}): slack now ${v("paged_tail_slack_bytes")}` +
        (r.hasMetric("paged_tail_slack_bound_bytes") ? ` ≤ bound ${v("paged_tail_slack_bound_bytes")}.` : "."),
      `<b>Concurrency multiplier</b> = (contiguous reserved ÷ its running sequences) ÷ (paged allocated ÷ its` +
        ` running sequences${r.bundle.tier ? ", and those held for a CPU-tier load" : ""}) = <b>${v("concurrency_multiplier")}</b>: how many sequences paging fits into the memory` +
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
      if (name.startsWith("group:")) {
        const n = r.metric(`paged_group_blocks_${name.slice(6)}`);
        setData(el, "value", String(n));
        setText(el, `${int(n)} blocks = ${bytes(n * b.bytes_per_block)}`);
        continue;
      }
      if (name === "on_link") {
        const onLink = this.onLinkBytes();
        setData(el, "value", String(onLink));
        setText(el, onLink > 0 ? ` (${bytes(onLink)} of it still on the link from the CPU tier)` : "");
        continue;
      }
      const value = r.metric(name);
      setText(el, name === "step" ? int(r.step) : name === "concurrency_multiplier"
        ? times(Number.isNaN(value) ? null : value) : bytes(value));
    }
  }
}
