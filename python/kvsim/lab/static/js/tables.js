// Sequence block tables: per sequence its request, status, token counts and the L_i -> P_k chips of its
// block table at the current step (from the bundle's seq rows). Clicking a chip selects that block.

import { esc, int, pct } from "./format.js";
import { FILLING_TEXT, groupColors } from "./grid.js";
import { S, TrackReplay } from "./replay.js";

const MAX_CARDS = 30;
const MAX_CHIPS = 24;
const ORDER = { running: 0, loading: 1, loaded: 1, swapped: 2, preempted: 3, waiting: 4, finished: 5, rejected: 6 };
const STATUS_TEXT = {
  running: "Running",
  waiting: "Waiting",
  swapped: "Swapped out",
  preempted: "Preempted",
  finished: "Finished",
  rejected: "Rejected",
  // A CPU tier: held for its load (blocks allocated, neither running nor computing), or landed and held
  // until the scheduler resumes it.
  loading: "Loading from CPU",
  loaded: "Loaded, resumes",
};

export class SeqTables {
  constructor({ list, filter, count, onSelectBlock }) {
    this.list = list;
    this.filter = filter;
    this.count = count;
    this.onSelectBlock = onSelectBlock;
    this.selectedBlock = -1;
    this.selectedSeq = -1;
    this.replay = null;
    this.cards = new Map(); // seq -> {sig, el, and the elements _update writes}
    this.order = "";
    list.addEventListener("click", (ev) => {
      const chip = ev.target.closest("[data-block]");
      if (chip) this.onSelectBlock(Number(chip.dataset.block));
    });
    filter.addEventListener("input", () => this.render());
  }

  setReplay(replay) {
    this.replay = replay;
    this.selectedSeq = -1;
    this.cards = new Map();
    this.order = "";
    this.colors = replay.groups ? groupColors(replay.groups) : null;
  }

  /** A sequence's tables as the card's data attribute: one table, or a hybrid model's per group joined by
   * "|" (block 0, the null block, where a window's tokens left). */
  static tablesText(replay, row) {
    return replay.groups ? row[S.tables].map((t) => t.join(",")).join("|") : row[S.table].join(",");
  }

  /** Match the filter box against name, label and status ("req-3", "running", "copilot"). */
  _matches(replay, row, terms) {
    if (terms.length === 0) return true;
    const req = replay.requests.get(row[S.rid]);
    const hay = `${replay.name(row[S.rid], row[S.sample])} ${req ? req.label || "" : ""} ${row[S.status]}`.toLowerCase();
    return terms.every((t) => hay.includes(t));
  }

  render() {
    const replay = this.replay;
    if (!replay) return;
    const k = replay.step;
    const track = replay.paged;
    const terms = this.filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    const all = track.sequences();
    let active = 0;
    for (const { row } of all) if (row[S.status] !== "finished" && row[S.status] !== "rejected") active += 1;
    const shown = terms.length ? all.filter(({ row }) => this._matches(replay, row, terms)) : all;
    shown.sort((a, b) => (ORDER[a.row[S.status]] ?? 9) - (ORDER[b.row[S.status]] ?? 9)
      || a.row[S.rid] - b.row[S.rid] || a.row[S.sample] - b.row[S.sample]);
    // The selected sequence first if it would be cut off.
    if (this.selectedSeq >= 0) {
      const at = shown.findIndex((x) => x.seq === this.selectedSeq);
      if (at >= MAX_CARDS) shown.unshift(...shown.splice(at, 1));
    }
    const visible = shown.slice(0, MAX_CARDS);
    this.count.textContent = `${int(active)} active of ${int(all.length)} sequences arrived` +
      (shown.length > MAX_CARDS ? ` · showing ${MAX_CARDS} of ${int(shown.length)} matching` : "");
    // Cards are kept per sequence: one whose status, table and selection did not change only gets its
    // token counts updated (the common case while a run decodes), the others are rebuilt.
    const keep = new Map();
    const elements = [];
    for (const { seq, row } of visible) {
      // (a `loading` sequence's chips mark the blocks its load is filling: they change when it lands,
      // with its status)
      const filling = row[S.status] === "loading" ? row[S.table].filter((b) => track.isFilling(b)).join(",") : "";
      // (a swapped-out sequence's card says its blocks in the swap space: its latest swap-out's)
      const swapped = row[S.status] === "swapped" ? track.swappedBlocks(seq, k) : 0;
      const sig = `${row[S.status]}|${SeqTables.tablesText(replay, row)}|${seq === this.selectedSeq}|${filling}|${swapped}`;
      let card = this.cards.get(seq);
      if (!card || card.sig !== sig) {
        const holder = document.createElement("div");
        holder.innerHTML = this._card(replay, seq, row, k);
        const el = holder.firstElementChild;
        el.dataset.ctx = ""; // _update fills the token counts
        card = { sig, el, ctx: el.querySelector(".d-ctx"), ctx2: el.querySelector(".d-ctx2"),
          gen: el.querySelector(".d-gen"), pct: el.querySelector(".d-pct"), bar: el.querySelector(".fillbar span") };
      }
      this._update(replay, card, row, k);
      keep.set(seq, card);
      elements.push(card.el);
    }
    this.cards = keep;
    const order = visible.map((x) => x.seq).join(",");
    if (order !== this.order || this.list.children.length !== elements.length
        || elements.some((el, i) => this.list.children[i] !== el)) {
      if (elements.length) this.list.replaceChildren(...elements);
      else this.list.innerHTML = '<p class="hint">No sequence has arrived at this step.</p>';
      this.order = order;
    }
  }

  /** The numbers of a card that change every step while a sequence decodes. */
  _update(replay, card, row, k) {
    const ctx = TrackReplay.ctxAt(row, k);
    const gen = TrackReplay.genAt(row, k);
    const req = replay.requests.get(row[S.rid]) || {};
    const target = req.target_tokens ?? null;
    const fill = target ? Math.min(1, ctx / target) : 0;
    const c = int(ctx);
    if (card.el.dataset.ctx === String(ctx)) return;
    card.el.dataset.ctx = String(ctx);
    if (card.ctx) card.ctx.textContent = c;
    if (card.ctx2) card.ctx2.textContent = c;
    if (card.gen) card.gen.textContent = int(gen);
    if (card.pct) card.pct.textContent = pct(fill, 0);
    if (card.bar) card.bar.style.width = `${(100 * fill).toFixed(1)}%`;
  }

  /** The chips of one table: L_i → P_k, each a button selecting its block (from `start`, at most `max`);
   * a block a CPU-tier load in flight is filling marked so (the grid's style, a title saying it). */
  _chips(table, start, max, group = null) {
    const chips = [];
    const end = Math.min(table.length, start + max);
    const track = this.replay.paged;
    for (let i = start; i < end; i += 1) {
      const b = table[i];
      const where = group === null ? "" : ` of group ${group}`;
      const filling = track.isFilling(b);
      const why = filling ? ", being filled by the CPU-tier load in flight (its KV not there yet)" : "";
      chips.push(`<button type="button" class="chip-map${b === this.selectedBlock ? " sel" : ""}${filling ? " filling" : ""}"
        data-block="${b}" data-filling="${filling}"${filling ? ` title="P_${b} is ${esc(FILLING_TEXT)}"` : ""}
        aria-label="logical block ${i}${where} maps to physical block ${b}${why}"><span>L_${i}</span>→<b>P_${b}</b>${filling
          ? '<i class="arrive" aria-hidden="true">↓</i>' : ""}</button>`);
    }
    if (table.length > end) chips.push(`<span class="hint">+${int(table.length - end)} more</span>`);
    return chips;
  }

  /** A hybrid model's tables, a row per KV-cache group: the leading null blocks (tokens a window or chunk
   * left) as one dim chip, then the blocks held. */
  _groupRows(replay, row, seq, k) {
    return replay.groups.map((g, x) => {
      const table = row[S.tables][x] || [];
      let lead = 0;
      while (lead < table.length && table[lead] === 0) lead += 1;
      const chips = [];
      const range = (a, b) => (a === b ? `L_${a}` : `L_${a}–L_${b}`);
      if (lead > 0 && g.kind === "mamba") {
        const one = lead === 1;
        // (a state table keeps only its latest states: the null block stands for those a newer one replaced
        // and for those a hit, or a CPU-tier load, started past)
        const why = `${one ? "an earlier state" : "earlier states"}: replaced by a newer one, or never held (a hit starts ` +
          "from a cached state, a CPU-tier load from the state it brings)";
        chips.push(`<span class="chip-map null" data-null="${lead}" title="${why}: vLLM’s null block (P_0) in ` +
          `${one ? "its" : "their"} place">${range(0, lead - 1)}→∅ <small>(null)</small></span>`);
      } else if (lead > 0) {
        // A window's leading null blocks: those it never held (a prefix hit or a CPU-tier load started past
        // them) come first, then those that left it (its `window` events): told apart.
        const left = Math.min(lead, replay.paged.windowLeft(seq, x, k));
        const never = lead - left;
        if (never > 0) {
          const one = never === 1;
          chips.push(`<span class="chip-map null" data-null="${never}" data-never="${never}" title="${one ? "this block was"
            : "these blocks were"} never held (a prefix hit or a CPU-tier load started past ${one ? "it" : "them"}): ` +
            `vLLM’s null block (P_0) in ${one ? "its" : "their"} place">${range(0, never - 1)}→∅ <small>(never held)</small></span>`);
        }
        if (left > 0) {
          const one = left === 1;
          chips.push(`<span class="chip-map null" data-null="${left}" data-left="${left}" title="${one ? "this block"
            : "these blocks"} left the window (freed): vLLM’s null block (P_0) in ${one ? "its" : "their"} place">` +
            `${range(never, lead - 1)}→∅ <small>(left)</small></span>`);
        }
      }
      chips.push(...this._chips(table, lead, Math.max(4, Math.floor(MAX_CHIPS / replay.groups.length) + 4), x));
      if (table.length === 0) chips.push('<span class="hint">no blocks</span>');
      return `<div class="group-row" data-group="${x}"><span class="group-tag" style="--g:${this.colors[x].main}"
        title="${esc(g.label)}, ${g.num_layers} layers">G${x} ${esc(g.label)}</span>${chips.join("")}</div>`;
    }).join("");
  }

  _card(replay, seq, row, k) {
    const rid = row[S.rid];
    const req = replay.requests.get(rid) || {};
    const status = row[S.status];
    const ctx = TrackReplay.ctxAt(row, k);
    const target = req.target_tokens ?? null;
    const table = row[S.table] || [];
    const chips = replay.groups ? [] : this._chips(table, 0, MAX_CHIPS);
    const filling = status === "loading" ? table.filter((b) => replay.paged.isFilling(b)).length : 0;
    // A swapped-out sequence's context is in the CPU swap space, not in no memory: its blocks there.
    const swapped = status === "swapped" ? replay.paged.swappedBlocks(seq, k) : 0;
    const away = status === "swapped"
      ? `<span class="swapped-count" data-swapped="${swapped}">${int(swapped)} block${swapped === 1 ? "" : "s"} in the CPU swap space</span>` +
        " (none on the GPU until it is swapped in)" : "";
    const held = away || (replay.groups ? `${int(table.length)} blocks held in ${replay.groups.length} tables` : `${int(table.length)} blocks`) +
      (filling ? `, <span class="filling-count" data-filling="${filling}">${int(filling)} being filled by its CPU-tier load</span>` : "");
    // A rejected request says why (the engine's reason: the bundle's `reject_reasons`).
    const why = status === "rejected" ? replay.rejectReason(replay.paged, rid) : null;
    const none = status === "swapped" ? `<span class="hint">swapped out: its ${int(swapped)} block${swapped === 1 ? "" : "s"} wait in the CPU swap space</span>`
      : why ? `<span class="reject-why" data-reason="${esc(why)}">rejected: ${esc(why)}</span>`
        : '<span class="hint">no blocks</span>';
    return `<article class="seq st-${status}${seq === this.selectedSeq ? " selected" : ""}" data-seq="${seq}"
        data-rid="${rid}" data-sample="${row[S.sample]}" data-status="${status}" data-ctx="${ctx}"
        data-table="${esc(SeqTables.tablesText(replay, row))}">
      <header><b class="mono">${esc(replay.name(rid, row[S.sample]))}</b>
        <span class="seq-label">${esc(req.label || "")}</span>
        <span class="status st-${status}">${STATUS_TEXT[status] || esc(status)}${target ? ` (<span class="d-ctx">${int(ctx)}</span>/${int(target)} tok)` : ""}</span></header>
      <p class="seq-tokens">${req.system_prompt ? `Sys prompt <b>${int(req.system_tokens)}</b> tok <span class="mono">${esc(req.system_prompt)}</span> • ` : ""}User prompt <b>${int(req.user_tokens ?? 0)}</b> tok • Generated <b class="d-gen"></b> tok</p>
      <div class="fillbar" title="context against target"><span></span></div>
      <p class="seq-fill">Context fill <b class="d-ctx2">${int(ctx)}</b> tokens${target ? ` · target ${int(target)} (<span class="d-pct"></span>)` : ""} · ${held}</p>
      ${replay.groups && !why ? `<div class="group-rows">${this._groupRows(replay, row, seq, k)}</div>`
        : `<div class="chips-map">${chips.join("") || none}</div>`}
    </article>`;
  }

  /** Highlight the chips of block b. */
  markBlock(b) {
    this.selectedBlock = b;
    for (const c of this.list.querySelectorAll(".chip-map.sel")) c.classList.remove("sel");
    for (const c of this.list.querySelectorAll(`.chip-map[data-block="${b}"]`)) c.classList.add("sel");
  }

  /** Select a sequence (from the inspector) and bring its card into view. */
  selectSeq(seq) {
    this.selectedSeq = seq;
    this.render();
    const card = this.list.querySelector(`.seq[data-seq="${seq}"]`);
    if (card) card.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }
}
