// kvsim lab: the disaggregated fleet's page. Draws the server's snapshots (api/pd) as they are: no state
// is computed here, only shown (DESIGN.md §Lab, "A disaggregated fleet").

import { bytes, clockNote, int, pct, secs } from "./format.js";

const $ = (id) => document.getElementById(id);

// The fleet's P/D figures in words and units (the CLI's own: DESIGN.md §Prefill/decode disaggregation).
const SUMMARY = {
  pd_disaggregated: ["routed to a prefill replica", int],
  pd_local_prefills: ["prefilled on their decode replica", int],
  pd_transfers: ["transfers", int],
  pd_transfer_blocks: ["blocks moved", int],
  pd_transfer_bytes: ["KV moved", bytes],
  // (a transfer holds the link for its fixed latency too, the next one waiting: "in use" counts it, which
  // read as bandwidth used under "link utilisation"; the bandwidth used is the bytes' time alone)
  pd_link_utilization: ["link in use (latency included) / run", pct],
  pd_link_bandwidth_utilization: ["link bandwidth used (bytes' time) / run", pct],
};
const fmtMs = (s) => (s == null ? "—" : `${(s * 1000).toFixed(3)} ms`);

function drawPool(pool) {
  const grid = document.querySelector(`.pd-grid[data-pool="${pool.name}"]`);
  if (grid.children.length !== pool.blocks.length) {
    grid.replaceChildren(...pool.blocks.map(() => document.createElement("span")));
  }
  pool.blocks.forEach((b, i) => {
    const cell = grid.children[i];
    cell.className = "pd-cell";
    cell.dataset.block = String(b.id);
    cell.dataset.held = b.requests.length ? "1" : "0";
    cell.dataset.shared = b.requests.length > 1 ? "1" : "0";
    cell.dataset.transfer = b.transfer ? "1" : "0";
    cell.dataset.requests = b.requests.join(",");
    cell.dataset.cached = b.cached ?? "";
    const short = (n) => n.replace("req-", "r");
    cell.textContent = b.requests.length
      ? `P${b.id} ${b.requests.map(short).join("+")}`
      : b.cached ? `P${b.id} ${short(b.cached)}` : `P${b.id}`;
    cell.title = b.requests.length
      ? `block ${b.id}: ${b.requests.join(", ")}${b.transfer ? " (transfer not yet seen complete)" : ""}`
      : b.cached ? `block ${b.id}: free, cached (freed by ${b.cached}; a later prompt can hit it)` : `block ${b.id}: free`;
  });
  document.querySelector(`[data-count="${pool.name}"]`).textContent =
    `${pool.held} of ${pool.num_blocks} held` + (pool.transfer ? `, ${pool.transfer} for transfers` : "") +
    (pool.cached ? `, ${pool.cached} free cached` : "");
}

function drawLink(snap, tm) {
  const l = snap.link;
  const el = $("pd-link-state");
  el.dataset.onLink = l.on_link.join(",");
  el.dataset.queued = l.queued.join(",");
  const on = l.on_link.length
    ? `<span class="pd-arrow">⇒</span> ${l.on_link.join(", ")} on the link`
    : "idle";
  el.innerHTML = on + (l.queued.length ? `<br>queued: ${l.queued.join(", ")}` : "") +
    `<br><small>${snap.transfers_done} transfer(s) done</small>`;
  const ticks = tm && tm.name === "ticks";
  $("pd-link-spec").textContent =
    `latency ${fmtMs(l.latency_s)} + ${(l.s_per_block * 1e6).toFixed(1)} µs per block; one transfer at a time: ` +
    "the next starts when it ends, its latency included (the link in use, moving no bytes)" +
    (ticks ? `. The link’s figures are a real link’s; the replicas’ steps are ticks of ${secs(tm.step_s).replace(".0 ms", " ms")}, ` +
      "not a GPU’s step time, so a transfer’s span in steps is not one a GPU would see" : "");
  $("pd-link-spec").dataset.timeModel = tm ? tm.name : "";
}

function drawRequests(snap) {
  const body = $("pd-rows");
  if (body.children.length !== snap.requests.length) {
    body.replaceChildren(...snap.requests.map(() => {
      const tr = document.createElement("tr");
      // (each cell named by its column, which a phone shows beside it: the rows stack there)
      const heads = Array.from(document.querySelectorAll(".pd-requests thead th"), (th) => th.textContent);
      for (let i = 0; i < 6; i++) {
        const td = document.createElement("td");
        td.dataset.label = heads[i] || "";
        tr.append(td);
      }
      return tr;
    }));
  }
  snap.requests.forEach((q, i) => {
    const tr = body.children[i];
    tr.dataset.request = q.name;
    tr.dataset.phase = q.phase;
    tr.dataset.generated = String(q.generated);
    const cells = [
      q.name + (q.disaggregated || q.phase === "not arrived" || q.phase === "rejected" ? "" : " (prefilled locally)"),
      q.phase,
      `${q.generated} of ${q.max_tokens}`,
      q.prefill_blocks.length ? q.prefill_blocks.map((b) => `P${b}`).join(" ") : "—",
      q.decode_blocks.length ? q.decode_blocks.map((b) => `P${b}`).join(" ") : "—",
      q.transfer_blocks
        ? `${q.transfer_blocks} blocks (${q.decode_hit_blocks} hit on decode), link ${fmtMs(q.link_start_s)}–${fmtMs(q.link_end_s)}, seen ${fmtMs(q.seen_s)}`
        : "—",
    ];
    cells.forEach((text, j) => { if (tr.children[j].textContent !== text) tr.children[j].textContent = text; });
  });
}

function show(data, index) {
  const snap = data.snapshots[index];
  $("pd-instant").value = String(index);
  // (counted from 0 as the address's ?instant= and the API's are, the main page's "step k / n" form: it
  // read "8 of 44" at ?instant=7, user53 #3)
  $("pd-instant-label").textContent = `${index} / ${data.snapshots.length - 1} · t = ${fmtMs(snap.time_s)}`;
  for (const pool of snap.pools) drawPool(pool);
  drawLink(snap, data.time_model);
  drawRequests(snap);
  document.getElementById("pd").dataset.instant = String(index);
  const url = new URL(location.href);
  if (url.searchParams.has("preset")) url.searchParams.set("preset", data.preset.name);
  url.searchParams.set("instant", String(index));
  history.replaceState(null, "", url);
}

/** The instant the address asks for, read as the main page reads `?step=`: a whole number, else its text
 * (null: none asked). */
function askedInstant(params) {
  if (!params.has("instant")) return null;
  const raw = params.get("instant");
  return /^-?[0-9]+$/.test(raw.trim()) ? Number.parseInt(raw, 10) : raw;
}

/** The instant the page opens on and what the banner says of the address's (null: nothing to say): the
 * opening instant for none or one that is not a number, one out of range clamped into 0..last. */
function openingInstant(data, asked) {
  const last = data.snapshots.length - 1;
  if (asked === null) return [data.opening, null];
  if (typeof asked === "string") {
    return [data.opening, `instant ${JSON.stringify(asked)} in the address is not an instant number: showing the ` +
      `opening instant, ${data.opening}`];
  }
  const clamped = Math.max(0, Math.min(last, asked));
  if (clamped !== asked) {
    return [clamped, `instant ${asked} in the address is outside the run's instants 0–${last}: showing instant ${clamped}`];
  }
  return [asked, null];
}

function banner(msg) {
  $("pd-banner").hidden = !msg;
  $("pd-banner").textContent = msg || "";
}

/** The fleet's timeline for `preset` (null: the default), as [data, null] or [null, the server's refusal]. */
async function fetchTimeline(preset) {
  const res = await fetch(preset === null ? "api/pd" : `api/pd?preset=${encodeURIComponent(preset)}`);
  const data = await res.json();
  return res.ok ? [data, null] : [null, data.error];
}

async function main() {
  const params = new URLSearchParams(location.search);
  let [data, refused] = await fetchTimeline(params.has("preset") ? params.get("preset") : null);
  let notice = null;
  if (refused !== null) {
    // A link the server refuses (an unknown preset) would leave an empty page: the default preset instead,
    // the refusal said above it, as the main page does (its instant was the unknown preset's: not used).
    const sentence = /[.!?)]$/.test(refused) ? refused : `${refused}.`;
    [data, refused] = await fetchTimeline(null);
    if (refused !== null) {
      banner(refused);
      document.getElementById("pd").setAttribute("aria-busy", "false");
      return;
    }
    notice = `${sentence} Showing the default preset (${data.preset.name}) instead.`;
    params.delete("instant");
  }
  $("pd-title").textContent = data.preset.title;
  $("pd-description").textContent = data.preset.description;
  $("pd-presets").replaceChildren(...data.presets.flatMap((name, i) => {
    const a = document.createElement("a");
    a.href = `pd?preset=${encodeURIComponent(name)}`;
    a.textContent = name;
    if (name === data.preset.name) a.setAttribute("aria-current", "page");
    return i ? [" · ", a] : [a];
  }));
  const dl = $("pd-summary");
  dl.replaceChildren(...Object.entries(data.summary).flatMap(([k, v]) => {
    const [label, fmt] = SUMMARY[k] ?? [k, String];
    const dt = document.createElement("dt");
    dt.textContent = label;
    dt.title = k; // (the summary key, as `kvsim run --json` names it)
    const dd = document.createElement("dd");
    dd.textContent = v == null ? "—" : fmt(v);
    dd.dataset.value = v == null ? "" : String(v);
    return [dt, dd];
  }));
  const note = clockNote(data.time_model);
  $("pd-clock").textContent = note ? `Times are ${note}.` : "";
  $("pd-clock").dataset.timeModel = data.time_model ? data.time_model.name : "";
  const slider = $("pd-instant");
  slider.max = String(data.snapshots.length - 1);
  const [start, said] = openingInstant(data, askedInstant(params));
  banner(notice ?? said);
  slider.addEventListener("input", () => show(data, Number(slider.value)));
  show(data, start);
  document.getElementById("pd").setAttribute("aria-busy", "false");
}

main();
