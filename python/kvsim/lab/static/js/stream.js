// The memory event stream: the engine's event log up to the current step, newest first, with type and
// request filters. The rows are the engine's own (step, time, kind, request, sample, block).

import { esc, int, secs } from "./format.js";
import { B, E } from "./replay.js";

const SHOWN = 100;
export const KIND_LABELS = {
  arrive: "request added",
  admit: "admitted",
  schedule: "scheduled",
  "prefix-hit": "prefix hit",
  allocate: "allocated",
  "cow-copy": "copy-on-write",
  evict: "evict",
  free: "free",
  preempt: "preempt",
  "swap-out": "swap out",
  "swap-in": "swap in",
  fork: "fork",
  finish: "finish",
  reject: "reject",
  window: "left window",
  "cpu-hit": "CPU-tier hit",
  load: "load CPU → GPU",
  "load-done": "load landed",
  store: "store GPU → CPU",
  "store-done": "store landed",
  "cpu-evict": "CPU-tier evict",
};
const ORDER = Object.keys(KIND_LABELS);
// The kinds whose count is the block's KV-cache group in a hybrid model (DESIGN.md §Event log).
const GROUP_KINDS = new Set(["allocate", "prefix-hit", "evict", "free", "window"]);

export class EventStream {
  constructor({ list, kinds, request, count, onSelectBlock }) {
    this.list = list;
    this.kindsRoot = kinds;
    this.request = request;
    this.count = count;
    this.onSelectBlock = onSelectBlock;
    this.hidden = new Set();
    this.replay = null;
    kinds.addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-kind]");
      if (!b) return;
      const k = b.dataset.kind;
      if (this.hidden.has(k)) this.hidden.delete(k);
      else this.hidden.add(k);
      b.setAttribute("aria-pressed", String(!this.hidden.has(k)));
      this.render();
    });
    request.addEventListener("input", () => this.render());
    list.addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-block]");
      if (b) this.onSelectBlock(Number(b.dataset.block));
      const who = ev.target.closest("[data-filter]");
      if (who) {
        this.request.value = who.dataset.filter;
        this.render();
      }
    });
  }

  setReplay(replay) {
    this.replay = replay;
    const present = new Set(replay.paged.kindsPresent());
    const kinds = [...ORDER.filter((k) => present.has(k)), ...[...present].filter((k) => !ORDER.includes(k)).sort()];
    this.kindsRoot.innerHTML = kinds.map((k) =>
      `<button type="button" class="chip ev-${k}" data-kind="${k}" aria-pressed="${!this.hidden.has(k)}">${esc(KIND_LABELS[k] || k)}</button>`).join("");
  }

  /** The request filter as a set of request ids (by name, "req-3", or number), or null for all. */
  _requestFilter(replay) {
    const q = this.request.value.trim().toLowerCase();
    if (!q) return null;
    const ids = new Set();
    for (const [rid, req] of replay.requests) {
      if (String(req.name).toLowerCase() === q || String(rid) === q || (req.label || "").toLowerCase().includes(q)) ids.add(rid);
    }
    return ids;
  }

  _text(replay, ev, i) {
    const [, , kind, rid, sample, block, count] = ev;
    const state = replay.paged.evState[i];
    const req = replay.requests.get(rid);
    const who = rid >= 0 ? `<button type="button" class="linkish who" data-filter="${esc(req ? req.name : rid)}"
      title="show only this request's events">${esc(replay.name(rid, sample))}</button>` : "";
    const blk = block >= 0
      ? `<button type="button" class="linkish mono" data-block="${block}">P_${block}</button>` : "";
    // A hybrid model's block events name the block's KV-cache group (the event's count; other kinds' count
    // is a number of their own: a `schedule`'s tokens, an `admit`'s junction, a `load`'s chunks).
    const groups = replay.groups;
    const g = groups && GROUP_KINDS.has(kind) && count >= 0 && count < groups.length ? groups[count] : null;
    const tag = g ? ` <span class="hint">G${count} ${esc(g.label)}</span>` : "";
    let key = "";
    let anchor = false;
    if (block >= 0 && kind === "allocate") {
      // An allocation is a prefix-cache anchor only when the block, at the state this event belongs to,
      // carries a key naming shared content (a system prompt's block: not a request's or a sample's own
      // tokens) and is full, so registered (`TrackReplay.sharedKeyAt`).
      const k = replay.paged.sharedKeyAt(block, state);
      anchor = k !== null;
      if (anchor) key = ` <span class="mono key">${esc(k)}</span>`;
    } else if (block >= 0 && (kind === "prefix-hit" || kind === "evict")) {
      // The block's key as it stood at the state this event belongs to (the state before, for evict).
      const row = replay.paged.blocks.rowAt(block, kind === "evict" ? Math.max(0, state - 1) : state);
      const k = row ? row[B.key] : null;
      if (k) key = ` <span class="mono key">${esc(k)}</span>`;
    }
    if (kind === "window") {
      if (g && g.kind === "mamba") {
        return `${blk} left ${who}’s ${esc(g.label)} table (G${count}): a newer state replaced it; freed, vLLM’s null ` +
          "block takes its place there (the request reads only its latest state)";
      }
      return `${blk} left ${who}’s ${g ? esc(g.label) : "window"} table (G${count}): freed, vLLM’s null block takes its ` +
        "place there (the window no longer reads its tokens)";
    }
    if (kind === "reject") {
      const why = replay.rejectReason(replay.paged, rid);
      return `${who} rejected${why ? `: <span class="reject-why" data-reason="${esc(why)}">${esc(why)}</span>` : ""}`;
    }
    return this._plain(kind, who, blk, key, anchor, count) + tag;
  }

  _plain(kind, who, blk, key, anchor, count) {
    switch (kind) {
      case "arrive": return `${who} arrived`;
      case "admit": return `${who} admitted (scheduled for prefill)`;
      case "prefix-hit": return `Prefix cache hit: ${who} shares ${blk}${key}`;
      case "allocate": return anchor ? `Allocated ${blk} for ${who} as the prefix-cache anchor of${key}`
        : `Allocated ${blk} for ${who}`;
      case "schedule": return count > 0 ? `${who} scheduled for ${int(count)} token${count === 1 ? "" : "s"}` : `${who} scheduled`;
      case "cow-copy": return `Copy-on-write: ${who} writes into a shared block, copy in ${blk}`;
      case "evict": return `Evicted cached ${blk} (its key dropped for reuse)${key}`;
      case "free": return `Freed ${blk} from ${who}`;
      case "preempt": return `Preempted ${who} (recompute: its blocks are freed)`;
      case "swap-out": return `Swapped out ${who} to the CPU pool`;
      case "swap-in": return `Swapped in ${who} from the CPU pool`;
      case "fork": return `Fork: ${who} starts on its parent’s blocks (shared copy-on-write, ref + 1 each)`;
      case "finish": return `${who} finished`;
      case "reject": return `${who} rejected`;
      case "cpu-hit": return `${who} finds ${int(count)} token${count === 1 ? "" : "s"} in the CPU tier beyond its GPU hits (not computed)`;
      case "load": return `Load of ${int(count)} chunk${count === 1 ? "" : "s"} CPU → GPU for ${who}: held until it lands`;
      case "load-done": return `Load of ${int(count)} chunk${count === 1 ? "" : "s"} for ${who} seen complete: its blocks take their keys`;
      case "store": return `Store of ${int(count)} chunk${count === 1 ? "" : "s"} of ${who} GPU → CPU planned (pending in the tier)`;
      case "store-done": return `Store of ${int(count)} chunk${count === 1 ? "" : "s"} of ${who} seen complete: ready in the tier`;
      case "cpu-evict": return `A CPU-tier chunk evicted to make room for ${who}’s store`;
      default: return `${who} ${blk}`;
    }
  }

  render() {
    const replay = this.replay;
    if (!replay) return;
    const track = replay.paged;
    const total = track.numEvents;
    const n = track.eventCount(replay.step);
    const reqs = this._requestFilter(replay);
    const items = [];
    let matched = 0;
    const filtered = reqs !== null || this.hidden.size > 0;
    // Unfiltered, the newest SHOWN events are the last ones: no need to walk the whole log.
    const stop = filtered ? 0 : Math.max(0, n - SHOWN);
    if (!filtered) matched = n - SHOWN > 0 ? n - SHOWN : 0;
    const hiddenCodes = new Set(track.kindNames.map((k, c) => (this.hidden.has(k) ? c : -1)).filter((c) => c >= 0));
    for (let i = n - 1; i >= stop; i -= 1) {
      // Filter on the columns; build the row only for what is shown.
      if (hiddenCodes.has(track.evKind[i])) continue;
      if (reqs) {
        const q = track.evSeq[i];
        if (!reqs.has(q >= 0 ? track.seqRid[q] : -1)) continue;
      }
      matched += 1;
      if (items.length < SHOWN) {
        const ev = track.event(i);
        items.push(`<li class="ev ev-${ev[E.kind]}" data-index="${i}" data-kind="${ev[E.kind]}" data-rid="${ev[E.rid]}">
          <span class="ev-when" data-state="${track.evState[i]}">step ${int(track.evState[i])} · ${secs(ev[E.time])}</span>
          <span class="ev-kind">${esc(KIND_LABELS[ev[E.kind]] || ev[E.kind])}</span>
          <span class="ev-text">${this._text(replay, ev, i)}</span></li>`);
      }
    }
    this.count.textContent = `${int(n)} of ${int(total)} events happened by step ${int(replay.step)}` +
      (matched !== n ? ` · ${int(matched)} match` : "") + (matched > SHOWN ? ` · latest ${SHOWN} shown` : "");
    this.list.innerHTML = items.join("") || '<li class="hint">No event yet at this step (or none matches the filters).</li>';
  }
}
