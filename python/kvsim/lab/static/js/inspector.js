// The block inspector: everything about the selected physical block at the current step, read from the
// replayed rows (state, ref count, key, requests) and the bundle's sizes (bytes per block and token).

import { bytes, esc, hex, int } from "./format.js";
import { groupColors } from "./grid.js";
import { S } from "./replay.js";

const STATE_TEXT = {
  free: "FREE (ref 0)",
  private: "PRIVATE",
  shared: "SHARED",
  cached: "CACHED · free, evictable",
  null: "NULL BLOCK",
};

const STATE_NOTE = {
  free: "On the free queue, holds no key: the next allocation may take it.",
  private: "Held by one sequence.",
  shared: "Shared by several block tables.",
  cached: "Free (ref 0) but still carries its prefix key: a later request with the same prefix finds it; it is evicted only when popped for reuse.",
  null: "vLLM’s null block: taken at start and never handed out, so capacity is one block less.",
};

export class Inspector {
  constructor({ title, body, onSelectSeq, onSelectBlock }) {
    this.title = title;
    this.body = body;
    this.onSelectSeq = onSelectSeq;
    this.onSelectBlock = onSelectBlock;
    body.addEventListener("click", (ev) => {
      const seq = ev.target.closest("[data-seq]");
      if (seq) this.onSelectSeq(Number(seq.dataset.seq));
    });
  }

  clear() {
    this.lastTitle = this.lastHtml = null;
    this.title.textContent = "";
    this.body.innerHTML = '<p class="hint">Select a block in the pool.</p>';
  }

  /** Render block b of the paged track at the replay's current step. */
  show(replay, b) {
    const track = replay.paged;
    const bundle = replay.bundle;
    if (b < 0 || b >= track.numBlocks) {
      this.clear();
      return;
    }
    const blk = track.block(b);
    const panel = this.body.closest(".inspector");
    if (panel) panel.dataset.state = blk.state;
    // A hybrid model's block: its group's block size, and a state block holds a state, not token slots.
    const group = track.groups && blk.group >= 0 ? track.groups[blk.group] : null;
    const state = group !== null && group.kind === "mamba";
    // (a sliding window's and a state group's blocks are keyed only where a later hit can end: vLLM's sparse
    // retention, a load's landing included)
    const sparse = state || (group !== null && group.kind === "sliding_window");
    const bs = track.groupBlockSize(blk.group);
    const bpb = bundle.bytes_per_block;
    const bpt = group ? bpb / bs : bundle.bytes_per_token ?? (bundle.model && bundle.model.bytes_per_token);
    const offset = b * bpb;
    const width = Math.max(8, (track.numBlocks * bpb).toString(16).length);
    const slack = state ? null : blk.state === "private" ? bs - blk.num_tokens : blk.state === "shared" ? 0 : null;
    const holders = track.holders(b);
    // One pill per block table holding the block (a request's samples each hold it): as many as ref_cnt.
    const names = holders.map((h) => replay.name(h.rid, h.sample));
    const slots = [];
    if (bs <= 256 && !state) {
      for (let i = 0; i < bs; i += 1) {
        slots.push(`<span class="slot${i < blk.num_tokens ? " on" : ""}">${i}</span>`);
      }
    }
    // A CPU tier: a holder held for its load (its blocks allocated when the load was admitted); a block
    // past its GPU hits is being filled by the load in flight, and takes its key when the load lands where
    // its group keeps one (`TrackReplay.filling`, which the grid draws too).
    const held = holders.filter((h) => {
      const st = track.seqs.row(h.seq)[S.status];
      return st === "loading" || st === "loaded";
    }).map((h) => replay.name(h.rid, h.sample));
    const filling = blk.filling;
    const heldNote = held.length ? `<p class="hint insp-held" id="insp-held" data-filling="${filling}">Held by ` +
      `${esc(held.join(", "))}, held for a CPU-tier load: ${filling
        ? `this block is being filled by the load in flight (its ${state ? "state" : "KV"} arrives over the host link) and takes its prefix key when the load is seen complete${
          sparse ? `, if its group keeps one there (a ${state ? "state" : "window block"} is keyed only where a later hit can end)` : ""}.`
        : "this block holds its KV already (found on the GPU, or the load has landed)."}</p>` : "";
    const key = filling ? null : blk.prefix_key;
    // Why it is shared: a full block is read by all and never written again (prefix caching shares only
    // full blocks and never copies); a partial one is the prompt's last block forked samples share under
    // fork-cow, copied on the first write into it (copy-on-write).
    const full = blk.num_tokens >= bs || state;
    const note = blk.state !== "shared" ? STATE_NOTE[blk.state] || ""
      : full ? `Shared by ${blk.ref_cnt} block tables: a full block, read by all and never written again (a prefix-cache ` +
        "hit or forked samples’ common prompt). Prefix caching shares only full blocks and never copies one."
      : `Shared by ${blk.ref_cnt} forked samples (fork-cow): their prompt’s last, partial block; the first sample to ` +
        "write into it gets a copy (copy-on-write), the others keep this one.";
    // A hybrid model's block is drawn in its group's colours: the swatch and the state's words take them.
    const gc = group && !filling ? groupColors(track.groups)[blk.group] : null;
    const swatch = !gc ? "" : blk.state === "shared"
      ? `background: repeating-linear-gradient(135deg, ${gc.main} 0 5px, ${gc.dark} 5px 10px); border-color: #fff`
      : blk.state === "cached" ? `--c-cached: ${gc.main}; background: ${gc.empty}; border-color: ${gc.main}`
      : blk.state === "private" ? `background: ${gc.main}; border-color: ${gc.border}` : "";
    const title = `<b class="mono" id="insp-id">P_${b}</b>`;
    const html = `
      <p class="insp-state s-${filling ? "filling" : blk.state}-text" id="insp-state" data-state="${blk.state}"
        data-filling="${filling}"${swatch ? ` data-colour="${gc.main}" style="color: ${gc.main}"` : ""}>
        <span class="cell s-${filling ? "filling" : blk.state} demo" aria-hidden="true"${swatch
          ? ` style="${swatch}"` : ""}></span>${STATE_TEXT[blk.state] ||
          esc(blk.state)}${filling ? " · BEING LOADED" : ""}
        <span class="ref" id="insp-ref" data-ref="${blk.ref_cnt}">ref_cnt = ${blk.ref_cnt}</span></p>
      <p class="hint" id="insp-note">${note}</p>
      ${heldNote}
      <dl class="kv">
        <dt>Base offset</dt><dd class="mono" id="insp-offset" data-offset="${offset}">${hex(offset, width)}
          <small>(${bytes(offset)} mark · ${int(bpb)} bytes per block)</small></dd>
        ${track.groups ? `<dt>KV-cache group</dt><dd id="insp-group" data-group="${blk.group}">${group
          ? `G${blk.group} · ${esc(group.label)} · ${int(group.num_layers)} layers: a page in each (${bytes(group.page_bytes)})`
          : '<span class="hint">none (free)</span>'}</dd>` : ""}
        <dt>Occupancy</dt><dd id="insp-occupancy" data-tokens="${blk.num_tokens}">${state
          ? `a state of <b>${int(blk.num_tokens)}</b> tokens (fixed size, whatever the length)${filling
            ? " <small>(counted as stored from the load's admission, as the engine counts it: the state is on the link)</small>" : ""}`
          : `<b>${blk.num_tokens} / ${bs}</b> tokens${filling
            ? " <small>(counted as stored from the load's admission, as the engine counts them: they are on the link)</small>" : ""}`}</dd>
        <dt>Slack</dt><dd id="insp-slack">${slack === null ? "—"
          : `${slack} tokens <small>(${bpt ? bytes(slack * bpt) : "—"} unused)</small>`}</dd>
        <dt>Mapped by</dt><dd id="insp-requests" data-requests="${blk.request_ids.join(",")}"
          data-sequences="${esc(names.join(","))}">${names.length
          ? names.map((n, i) => `<span class="pill">${esc(n)}</span>${i < names.length - 1 ? " " : ""}`).join("")
          : '<span class="hint">no sequence</span>'}</dd>
        <dt>Prefix key</dt><dd class="mono" id="insp-key">${key ? esc(key) : filling
          ? `<span class="hint">none yet (taken when the load lands${sparse ? ", where its group keeps one" : ""})</span>`
          : '<span class="hint">none (a partial or unkeyed block)</span>'}</dd>
      </dl>
      ${holders.length ? `<p class="label">Block tables holding it</p><ul class="holders">${holders.map((h) =>
        `<li><button type="button" class="linkish" data-seq="${h.seq}">${esc(replay.name(h.rid, h.sample))}</button>
         at L_${h.logical}${track.groups ? ` of G${h.group}` : ""}</li>`).join("")}</ul>` : ""}
      ${slots.length ? `<p class="label">Token slots in P_${b} (${bs} slots${filling ? "; the load is filling them" : ""})</p><div
        class="slots${group ? " grouped" : ""}${filling ? " filling" : ""}"
        ${group ? `style="--g:${groupColors(track.groups)[blk.group].main}"` : ""}>${slots.join("")}</div>`
        : `<div class="usage-bar thin${filling ? " filling" : ""}"><span class="used" style="width:${state ? 100 : (100 * blk.num_tokens) / bs}%"></span></div>`}
    `;
    // Scrubbing re-shows the selected block every step: touch the DOM only when what it shows changed.
    if (title !== this.lastTitle) this.title.innerHTML = title;
    if (html !== this.lastHtml) this.body.innerHTML = html;
    this.lastTitle = title;
    this.lastHtml = html;
  }
}
