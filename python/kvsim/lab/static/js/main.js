// The page's wiring: controls -> api/run -> a Replay of the bundle -> the views at the current step;
// replay controls (step, play / pause, speed, scrubber); the URL holding configuration and step.

import { fetchPresets, fetchRun, lastFetch } from "./api.js";
import { Chart } from "./chart.js";
import { Experiments } from "./experiments.js";
import { bytes, clockNote, esc, int, secs } from "./format.js";
import { BlockGrid, WINDOW, canvasSize, forgetCanvasSizes, groupColors, stateColors } from "./grid.js";
import { Inspector } from "./inspector.js";
import { Panels } from "./panels.js";
import { Replay } from "./replay.js";
import { EventStream } from "./stream.js";
import { SeqTables } from "./tables.js";
import { TierView } from "./tier.js";

const $ = (id) => document.getElementById(id);
const PARAMS = ["preset", "model", "block_size", "kv_cache_bytes", "num_blocks", "enable_prefix_caching", "policy",
  "sampling", "preemption", "contiguous_policy", "placement", "kv_offloading_bytes", "async_scheduling"];
const MIB = 2 ** 20;
const OPTION_LISTS = {
  model: "models", block_size: "block_sizes", policy: "policies", sampling: "samplings",
  preemption: "preemptions", contiguous_policy: "contiguous_policies", placement: "placements",
};

const lab = {
  presets: null,
  replay: null,
  step: 0, // the paged track's state shown
  moment: 0, // the scrubber: the shared instant shown (each track's state by then: `Replay`)
  selected: -1,
  playing: false,
  pending: null,
  runSeq: 0,
  completed: 0, // runs answered (drawn or refused): the tests wait on it
  timings: [],
  notice: null, // a message the next run's page keeps in the banner (a link refused: what is shown instead)
};
window.kvlab = lab; // for the browser tests and the page benchmark

const colors = stateColors();
const panels = new Panels(colors);
const inspector = new Inspector({
  title: $("insp-title"),
  body: $("insp-body"),
  onSelectSeq: (seq) => tables.selectSeq(seq),
});
const grid = new BlockGrid({
  root: $("grid"),
  overview: $("grid-overview"),
  overviewCanvas: $("grid-overview-canvas"),
  caption: $("grid-window-caption"),
  onSelect: (b) => selectBlock(b),
});
const tables = new SeqTables({
  list: $("seq-list"), filter: $("seq-filter"), count: $("seq-count"),
  onSelectBlock: (b) => grid.select(b, false),
});
const stream = new EventStream({
  list: $("ev-list"), kinds: $("ev-kinds"), request: $("ev-request"), count: $("ev-count"),
  onSelectBlock: (b) => grid.select(b, false),
});
const chart = new Chart({
  canvas: $("chart"), cursor: $("chart-cursor"), legend: $("chart-legend"),
  onSeek: (k) => requestStep(k),
});
lab.chart = chart; // (the tests read its geometry)
const tier = new TierView({ root: $("tier-panel") });
lab.tier = tier;
const experiments = new Experiments({ root: $("exp-list"), onApply: (over) => { lab.lastEdit = null; applyOverrides(over); } });
lab.experiments = experiments; // the tests re-check a state they alter

function banner(msg) {
  const el = $("banner");
  el.hidden = !msg;
  el.textContent = msg || "";
}

/** A refusal's banner scrolled into view where it is off-screen: on a phone the field edited sits a screen
 * below the banner, and the value's return to the run's own read as accepted (user53 #13). */
function refusalInView() {
  const el = $("banner");
  const r = el.getBoundingClientRect();
  if (r.top < 0 || r.bottom > window.innerHeight) el.scrollIntoView({ block: "start" });
}

/** A message as a sentence: its full stop added where it has none, so that the next one does not run on. */
const sentence = (msg) => (/[.!?)]$/.test(msg.trim()) ? msg.trim() : `${msg.trim()}.`);

// ---------------------------------------------------------------- URL

function queryFromUrl() {
  const u = new URLSearchParams(window.location.search);
  const q = {};
  for (const p of PARAMS) if (u.has(p)) q[p] = u.get(p);
  // (a step that is not a whole number stays its text: the page says it shows the opening step instead)
  const num = (name) => {
    const raw = u.has(name) ? u.get(name) : null;
    return raw !== null && /^-?[0-9]+$/.test(raw.trim()) ? Number.parseInt(raw, 10) : raw;
  };
  return { query: q, step: num("step"), contigStep: num("contiguous_step") };
}

let urlTimer = 0;
function writeUrl() {
  clearTimeout(urlTimer);
  urlTimer = setTimeout(() => {
    const r = lab.replay;
    if (!r) return;
    const u = new URLSearchParams();
    for (const p of PARAMS) {
      const v = r.bundle.query[p];
      // (synchronous scheduling, the presets' own, needs no word in a link)
      if (p === "async_scheduling" && v === false) continue;
      if (v !== undefined && v !== null) u.set(p, String(v));
    }
    u.set("step", String(lab.step));
    if (r.contig) u.set("contiguous_step", String(r.contigStep));
    const url = `${window.location.pathname}?${u.toString()}`;
    if (url !== `${window.location.pathname}${window.location.search}`) window.history.replaceState(null, "", url);
  }, 400); // once the scrubbing pauses: replaceState costs a frame's worth of time in chromium
}

// ---------------------------------------------------------------- controls

function fillSelect(sel, values, current) {
  const opts = values.map((v) => (typeof v === "object" ? v : { name: v }));
  sel.innerHTML = opts.map((o) => `<option value="${esc(o.name)}"${o.why ? ` disabled data-why="${esc(o.why)}"` : ""}>` +
    `${esc(o.title || o.name)}${o.why ? ` (${esc(o.why)})` : ""}</option>`).join("");
  if (current !== undefined && current !== null) {
    if (!opts.some((o) => String(o.name) === String(current))) {
      sel.insertAdjacentHTML("beforeend", `<option value="${esc(current)}">${esc(current)}</option>`);
    }
    sel.value = String(current);
  }
}

/** The pool's memory: what the query asked for, else its blocks' bytes (a block count was given). */
function poolBytes(bundle) {
  return bundle.kv_cache_bytes ?? bundle.num_blocks * bundle.bytes_per_block;
}

// How a parameter and its values read in a reason ("needs prefix caching off", not "... false").
const PARAM_WORDS = { enable_prefix_caching: "prefix caching", async_scheduling: "async scheduling" };
const SWITCHES = ["enable_prefix_caching", "async_scheduling"];
const valueWord = (param, v) => (SWITCHES.includes(param) ? (v === true || v === "true" ? "on" : "off") : String(v));
const sameValue = (a, b) => String(a) === String(b);

/** Why option `value` of `param` would be refused next to the current query (null: it runs as far as the
 * page can tell): a value another needs (the server's `requires`, one table for both: a hybrid model needs
 * vLLM's v1 knobs), or a block size or model whose
 * blocks do not fit the pool's memory (fewer than 2, or more than the page draws). */
function whyNot(param, value, bundle) {
  const opts = lab.presets.options || {};
  const q = bundle.query;
  const requires = opts.requires || {};
  const need = (requires[param] || {})[value] || {};
  for (const [other, allowed] of Object.entries(need)) {
    if (!allowed.some((a) => sameValue(a, q[other]))) {
      return `needs ${PARAM_WORDS[other] || other} ${allowed.map((a) => valueWord(other, a)).join(" or ")}`;
    }
  }
  for (const [other, values] of Object.entries(requires)) {
    if (other === param) continue;
    const theirs = (values[q[other]] || {})[param];
    if (theirs && !theirs.some((a) => sameValue(a, value))) {
      const words = PARAM_WORDS[param] ? `${PARAM_WORDS[param]} ` : "";
      return `${other} ${q[other]} needs ${words}${theirs.map((a) => valueWord(param, a)).join(" or ")}`;
    }
  }
  // A CPU tier runs with vLLM v1's knobs (the server's rule), on every model offered.
  if (Number(q.kv_offloading_bytes || 0) > 0) {
    const needed = (opts.tier_needs || {})[param];
    if (needed !== undefined && !sameValue(needed, value)) {
      return `the CPU tier needs ${PARAM_WORDS[param] || param} ${valueWord(param, needed)}`;
    }
  }
  if ((param === "block_size" || param === "model") && q.num_blocks === undefined) {
    // Bytes per block as the server cuts the pool (a hybrid model's: its largest group's layers × page).
    const model = param === "model" ? value : q.model;
    const size = param === "block_size" ? Number(value) : Number(q.block_size);
    const perModel = (opts.model_bytes_per_block || {})[model] || {};
    const bpb = perModel[size] ?? (param === "block_size" && !bundle.layout ? size * bundle.bytes_per_token : null);
    if (bpb) {
      const blocks = Math.floor(poolBytes(bundle) / bpb);
      const cap = (lab.presets.limits || {}).max_blocks;
      if (blocks < 2) return `${bytes(poolBytes(bundle))} holds under 2 blocks`;
      if (cap && blocks > cap) return `${int(blocks)} blocks, over the page's ${int(cap)}`;
    }
  }
  return null;
}

function syncControls(bundle) {
  const q = bundle.query;
  const opts = lab.presets.options || {};
  fillSelect($("c-preset"), lab.presets.presets.map((p) => ({
    name: p.name, title: `${p.title || p.name}${p.available === false ? " (unavailable here)" : ""}`,
  })), q.preset);
  for (const [param, list] of Object.entries(OPTION_LISTS)) {
    const sel = document.querySelector(`[data-param="${param}"]`);
    const values = (opts[list] || []).map((v) => (typeof v === "object" ? v : { name: v }))
      .map((o) => (String(o.name) === String(q[param]) ? o : { ...o, why: whyNot(param, o.name, bundle) }));
    fillSelect(sel, values, q[param]);
  }
  const mem = $("c-kv-memory");
  const pool = poolBytes(bundle);
  mem.value = String(Number((pool / MIB).toFixed(3)));
  mem.dataset.value = String(pool);
  const cap = (lab.presets.limits || {}).max_blocks;
  mem.min = String((2 * bundle.bytes_per_block) / MIB);
  if (cap) mem.max = String((cap * bundle.bytes_per_block) / MIB);
  const derived = q.num_blocks === undefined;
  $("c-pool-blocks").textContent = derived
    ? `= ${int(bundle.num_blocks)} blocks of ${bytes(bundle.bytes_per_block)}, cut from the memory as vLLM does`
    : `${int(bundle.num_blocks)} blocks given (num_blocks) × ${bytes(bundle.bytes_per_block)}`;
  syncTier(bundle);
  syncSwitch(bundle, "enable_prefix_caching", "c-prefix", ["ACTIVE", "OFF"]);
  // Asynchronous scheduling: fixed off where the lab does not replay it (the server's `async_replays`).
  const notReplayed = !q.async_scheduling && (bundle.layout || Number(q.kv_offloading_bytes || 0) > 0);
  syncSwitch(bundle, "async_scheduling", "c-async", ["ON", "OFF"], ASYNC_HINTS,
    notReplayed ? `the lab replays it on ${opts.async_replays}` : null);
  const layout = bundle.layout;
  const raised = layout && layout.block_size !== Number(q.block_size)
    ? `raised to ${int(layout.block_size)} tokens (a block holds a state); ` : "";
  $("c-bpb").textContent = `${raised}${bytes(bundle.bytes_per_block)} / block; ${derived
    ? "memory kept, blocks follow" : "block count kept"}`;
  $("c-bpb").dataset.value = String(bundle.bytes_per_block);
  const bpt = bundle.bytes_per_token ?? (bundle.model && bundle.model.bytes_per_token);
  $("c-model-bpt").textContent = layout
    ? `${int(layout.groups.length)} KV-cache groups of ${int(layout.group_size)} layers`
    : bpt ? `${bytes(bpt)} KV / token` : "";
  // A hybrid model has no contiguous baseline: its controls say so rather than offer what does not run.
  for (const id of ["c-contig", "c-placement"]) {
    const sel = $(id);
    sel.disabled = !bundle.contiguous;
    sel.title = bundle.contiguous ? "" : "no contiguous baseline for a model served by vLLM's hybrid KV-cache manager";
  }
  const pre = lab.presets.presets.find((p) => p.name === q.preset);
  const asks = bundle.preset && bundle.preset.max_tokens
    ? ` Clients ask for ${bundle.preset.max_tokens}${bundle.contiguous ? ": what orca-max reserves" : ""}.` : "";
  // The preset's story is true of its own settings: where the run changed one, the page says which (the
  // bundle's `preset.differs`) and that the story describes the preset's settings, not this run.
  const desc = $("c-preset-desc");
  const differs = (bundle.preset && bundle.preset.differs) || [];
  const story = pre ? `${pre.description || ""}${asks}` : "";
  desc.dataset.differs = differs.map((d) => d.field).join(",");
  desc.classList.toggle("differs", differs.length > 0);
  desc.innerHTML = differs.length === 0 ? esc(story)
    : `<span class="differs-note"><b>This run differs from the preset:</b> ${differs.map((d) =>
      `${esc(d.label)} ${esc(d.run)} (preset: ${esc(d.preset)})`).join(" · ")}. The preset’s description below ` +
      "is true of the preset’s own settings, not of this run; the figures on the page are this run’s.</span> " +
      `<span class="preset-story"><b>The preset with its own settings:</b> ${esc(story)}</span>`;
}

const ASYNC_HINTS = ["a finished request holds its blocks until the next step is scheduled",
  "synchronous: a finished request frees its blocks at once (--no-async-scheduling)"];
/** A switch: its state's word; fixed, saying why, where the server refuses the other value (or `also`). */
function syncSwitch(bundle, param, id, words, hints = ["", ""], also = null) {
  const el = $(id);
  el.checked = bundle.query[param] === true || bundle.query[param] === "true";
  const flip = whyNot(param, !el.checked, bundle) ?? also;
  el.disabled = flip !== null;
  $(`${id}-state`).textContent = words[el.checked ? 0 : 1];
  $(`${id}-why`).textContent = flip ? `fixed: ${flip}` : hints[el.checked ? 0 : 1];
  if (flip) el.dataset.why = flip;
  else delete el.dataset.why;
}

/** The CPU tier's control: its memory in MiB (0: none), the chunks it gives, and what it needs where the
 * current query stops it (the server refuses such a run, naming the value; the page says it first). */
function syncTier(bundle) {
  const q = bundle.query;
  const opts = lab.presets.options || {};
  const input = $("c-tier");
  const tb = Number(q.kv_offloading_bytes || 0);
  input.value = String(Number((tb / MIB).toFixed(3)));
  input.dataset.value = String(tb);
  const t = bundle.tier;
  // (the chunks the size holds whole, as vLLM's `num_chunks` floors: the rest of the size is not used)
  const rest = t ? tb - t.chunks * t.chunk_bytes : 0;
  let hint = t ? `= ${int(t.chunks)} chunks of ${bytes(t.chunk_bytes)} (a block's KV padded to 4 KiB, as vLLM sizes it)` +
    (rest > 0 ? `; ${bytes(rest)} left over, unused` : "") : "0: no tier";
  const needs = opts.tier_needs || {};
  const stop = Object.entries(needs).filter(([k, v]) => !sameValue(q[k], v))
    .map(([k, v]) => `needs ${PARAM_WORDS[k] || k} ${valueWord(k, v)}`).join(", ");
  if (!t && stop) hint = `0: no tier; a tier ${stop}`;
  $("c-tier-chunks").textContent = hint;
  if (!t && stop) input.dataset.why = stop;
  else delete input.dataset.why;
}

function readControl(el) {
  if (el.type === "checkbox") return el.checked;
  if (el.dataset.param === "kv_cache_bytes" || el.dataset.param === "kv_offloading_bytes") {
    // (a size whose bytes pass the largest number, above about 1.7e302 MiB, is sent as that number: the
    // server's refusal, past its cap, says what the field takes)
    const b = Math.round(Number.parseFloat(el.value) * MIB);
    return b === Infinity ? Number.MAX_VALUE : b;
  }
  if (el.type === "number") return Number.parseInt(el.value, 10);
  return el.value;
}

// The memory fields take MiB (the API bytes): a refusal names the field as the page labels it and speaks
// in MiB.
const MEMORY_FIELDS = { kv_cache_bytes: "KV cache memory (MiB)", kv_offloading_bytes: "CPU tier (MiB)" };
const STILL_SHOWN = "The page still shows the previous run; its settings are back in the controls.";
// (exact: a bound rounded to 6 figures read "1073740000 MiB" for 2**30, user53 #6)
const mib = (b) => `${Number.isInteger(b / MIB) ? int(b / MIB) : String(b / MIB)} MiB`;

/** Why a value typed into a memory field is refused before any run (null: the server judges it). */
function memoryWhyNot(param, raw) {
  const label = MEMORY_FIELDS[param];
  const text = raw.trim();
  const v = Number(text);
  if (text === "" || !Number.isFinite(v)) return `${label}: ${JSON.stringify(raw)} is not a number of MiB.`;
  const bpb = lab.replay ? lab.replay.bundle.bytes_per_block : null;
  if (param === "kv_cache_bytes" && v <= 0) {
    return `${label} ${text} MiB: the memory must be more than 0 MiB` +
      `${bpb ? `, and a pool needs 2 blocks (vLLM's null block and one to use): at least ${mib(2 * bpb)} here` : ""}.`;
  }
  if (param === "kv_offloading_bytes" && v < 0) return `${label} ${text} MiB: give 0 MiB for no tier, or more.`;
  return null;
}

/** The server's refusal of a memory field's value, in the field's words and MiB (the API's are bytes). */
function inFieldUnits(err) {
  const e = lab.lastEdit;
  if (!e || err.field !== e.param) return err.message;
  return err.message
    // (a size of many digits is shown by its first ones, `104857... (a 307-digit size)`: kvsim.lab.query.sized)
    .replace(new RegExp(`^${e.param} -?[0-9]+(?:\\.\\.\\.)?(?: \\([^)]*\\))?`), `${MEMORY_FIELDS[e.param]} ${e.typed} MiB`)
    .replace(/must be between ([0-9]+) and ([0-9]+)/, (_, lo, hi) => `must be between ${mib(Number(lo))} and ${mib(Number(hi))}`);
}

/** A change refused before a run: said in the banner, the controls back to the run shown. */
function refuse(message) {
  banner(`${sentence(message)} ${STILL_SHOWN}`);
  refusalInView();
  if (lab.replay) syncControls(lab.replay.bundle);
  lab.completed += 1;
  document.body.dataset.runs = String(lab.completed);
  document.body.dataset.error = message;
}

for (const el of document.querySelectorAll("[data-param]")) {
  el.addEventListener("change", () => {
    const param = el.dataset.param;
    lab.lastEdit = null;
    if (param in MEMORY_FIELDS) {
      const why = memoryWhyNot(param, el.value);
      if (why) {
        refuse(why);
        return;
      }
      lab.lastEdit = { param, typed: el.value.trim() };
    }
    const value = readControl(el);
    if (param === "preset") run({ preset: value }, null);
    else applyOverrides({ [param]: value });
  });
}

function applyOverrides(over) {
  const base = lab.replay ? { ...lab.replay.bundle.query } : {};
  // The pool is memory: a new memory replaces a block count, and a new block size or model keeps the
  // memory (the server cuts it into blocks), even when the page shows a block count a link gave.
  if (lab.replay && base.num_blocks !== undefined && ("block_size" in over || "model" in over)) {
    base.kv_cache_bytes = poolBytes(lab.replay.bundle);
  }
  if ("kv_cache_bytes" in over || "block_size" in over || "model" in over) delete base.num_blocks;
  let step = lab.step; // (the paged state: a new run's clock differs)
  if (over.preset && over.preset !== base.preset) {
    run({ ...over }, null);
    return;
  }
  if (!lab.replay) step = null;
  run({ ...base, ...over }, step);
}

// ---------------------------------------------------------------- runs

async function run(query, step, fromUrl = false, contigStep = null) {
  const seq = ++lab.runSeq;
  const t0 = performance.now();
  $("lab").setAttribute("aria-busy", "true");
  document.body.dataset.ready = "false";
  let bundle;
  try {
    bundle = await fetchRun(query);
  } catch (err) {
    if (seq !== lab.runSeq) return;
    const message = inFieldUnits(err);
    if (!lab.replay && fromUrl) {
      // A link the server refuses (an unknown preset, a bad value) would leave an empty page: show its
      // preset alone instead, or the default where the preset is the unknown, and say so.
      const known = lab.presets.presets.some((p) => p.name === query.preset);
      const fallback = known ? query.preset : lab.presets.presets[0].name;
      const what = known ? `preset ${fallback} with its own settings` : `the default preset (${fallback})`;
      lab.notice = `${sentence(message)} Showing ${what} instead.`;
      await run({ preset: fallback }, null);
      return;
    }
    banner(lab.replay ? `${sentence(message)} ${STILL_SHOWN}` : message);
    refusalInView();
    $("lab").setAttribute("aria-busy", "false");
    if (lab.replay) syncControls(lab.replay.bundle); // the rejected change changed nothing
    lab.completed += 1;
    document.body.dataset.runs = String(lab.completed);
    document.body.dataset.error = message;
    document.body.dataset.ready = "true";
    return;
  }
  if (seq !== lab.runSeq) return; // a later change superseded this run
  const t1 = performance.now();
  banner(lab.notice); // (a link's refusal, said over the run shown instead; once)
  lab.notice = null;
  // Measure the canvases before any DOM write: one layout, not one per view.
  grid.overview.hidden = !(bundle.num_blocks > WINDOW);
  for (const c of document.querySelectorAll("canvas")) canvasSize(c);
  const replay = new Replay(bundle);
  const tReplay = performance.now();
  lab.replay = replay;
  syncControls(bundle);
  const scrub = $("r-scrub");
  scrub.max = String(replay.numMoments - 1);
  grid.reset(replay.paged);
  tables.setReplay(replay);
  stream.setReplay(replay);
  panels.setReplay(replay);
  tier.setReplay(replay);
  $("grid-title").textContent = `GPU VRAM physical memory block pool (${int(bundle.num_blocks)} blocks · ` +
    `${bytes(bundle.num_blocks * bundle.bytes_per_block)}` +
    `${bundle.layout ? ` · ${int(bundle.layout.groups.length)} KV-cache groups` : ""})`;
  setGroupLegend(replay);
  // With a CPU tier, the legends name the style of a block a load in flight is filling.
  $("grid-filling-legend").hidden = !bundle.tier;
  $("paged-map-filling").hidden = !bundle.tier;
  lab.moment = openingMoment(replay, step, fromUrl ? contigStep : null, fromUrl);
  replay.seekMoment(lab.moment);
  lab.step = replay.step;
  chart.setReplay(replay);
  if (lab.selected >= bundle.num_blocks) lab.selected = -1;
  render(null);
  if (lab.selected < 0) {
    // Open the inspector on the most telling block there is: shared, else held, else cached.
    const first = ["shared", "private", "cached"].map((st) => firstBlockWith(replay, st)).find((b) => b >= 0);
    if (first !== undefined) grid.select(first, false);
  } else {
    grid.select(lab.selected, false);
  }
  const t2 = performance.now();
  lab.timings.push({ query, fetch_ms: t1 - t0, server_ms: lastFetch.headers_ms, body_ms: lastFetch.body_ms, transfer_ms: lastFetch.transfer_ms,
    bytes: lastFetch.bytes, replay_ms: tReplay - t1, render_ms: t2 - t1, total_ms: t2 - t0, views_ms: lab.lastRender });
  $("foot-run").textContent = `Last run: ${int(bundle.requests.length)} requests, ${int(bundle.num_steps)} steps, ` +
    `${int(replay.paged.numEvents)} events; fetched in ${(t1 - t0).toFixed(0)} ms, drawn in ${(t2 - t1).toFixed(0)} ms.`;
  $("lab").setAttribute("aria-busy", "false");
  lab.completed += 1;
  document.body.dataset.runs = String(lab.completed);
  delete document.body.dataset.error;
  document.body.dataset.ready = "true";
  writeUrl();
}

/** The moment a run opens on: the paged track's state `step` (a number; else the opening step), or with
 * `contigStep` from the address the moment both are in force. An address's step past the paged track's
 * end but within the contiguous one's (a link from before the page compared the tracks at one instant,
 * when the scrubber ran to the longer track's end) opens where the contiguous track is at that step. */
function openingMoment(replay, step, contigStep, fromUrl) {
  const bundle = replay.bundle;
  const n = replay.numSteps;
  const start = typeof step === "number" ? step : bundle.default_step;
  const clamped = Math.max(0, Math.min(n, start));
  const cn = replay.contigSteps;
  if (fromUrl && typeof step === "string") {
    banner(`step ${JSON.stringify(step)} in the address is not a step number: showing the opening step, ${clamped}`);
    return replay.momentOfStep(clamped);
  }
  if (fromUrl && typeof step === "number" && step > n && cn !== null && step <= cn && contigStep === null) {
    const m = replay.momentOfContigStep(step);
    banner(`step ${int(step)} in the address is past the paged run's end (${int(n)} steps; the contiguous run's ` +
      `${int(cn)}): showing the instant the contiguous run reaches step ${int(step)}, t = ${secs(replay.momentTime[m])}, ` +
      "the paged run ended");
    return m;
  }
  if (fromUrl && start !== clamped) {
    banner(`step ${start} in the address is outside the paged run's steps 0–${n}: showing step ${clamped}`);
    return replay.momentOfStep(clamped);
  }
  if (fromUrl && contigStep !== null && replay.contig) {
    const both = typeof contigStep === "number" ? replay.momentOfBoth(clamped, contigStep) : -1;
    if (both >= 0) return both;
    banner(`contiguous_step ${JSON.stringify(contigStep)} in the address is not in force while the paged run is at ` +
      `step ${int(clamped)}: showing the contiguous run where it is at that instant`);
  }
  return replay.momentOfStep(clamped);
}

/** A hybrid model's groups under the grid: each one's colour, kind, window, layers and the blocks it holds
 * at this step (`paged_group_blocks_<g>`); hidden for one table per sequence. */
function setGroupLegend(replay) {
  const list = $("grid-groups");
  const groups = replay.groups;
  $("grid").closest(".grid-panel").classList.toggle("hybrid", !!groups);
  list.hidden = !groups;
  $("grid-groups-hint").hidden = !groups;
  if (!groups) {
    list.innerHTML = "";
    return;
  }
  const colors = groupColors(groups);
  list.innerHTML = groups.map((g, i) => {
    const ids = g.layer_ids;
    const layers = ids.length === g.num_layers ? `${int(g.num_layers)} layers`
      : `${int(ids.length)} layers + ${int(g.num_layers - ids.length)} padding`;
    const what = g.kind === "sliding_window" ? `sliding window of ${int(g.window)} tokens`
      : g.kind === "chunked_local" ? `chunked local attention, chunks of ${int(g.window)}`
        : g.kind === "mamba" ? "state (Mamba / linear attention)" : "full attention";
    return `<li data-group="${i}" data-kind="${esc(g.kind)}" data-window="${g.window}" data-layers="${ids.length}">` +
      `<span class="swatch" style="--g:${colors[i].main}" aria-hidden="true"></span>` +
      `<span><b>G${i}</b> ${esc(what)} · ${esc(layers)} (${esc(ids.length > 6 ? `${ids.slice(0, 4).join(", ")}, …` : ids.join(", "))})` +
      ` · <b class="group-blocks" data-group-blocks="${i}"></b> blocks held</span></li>`;
  }).join("");
  lab.groupCounts = [...list.querySelectorAll("[data-group-blocks]")];
  renderGroupCounts();
}

function renderGroupCounts() {
  const r = lab.replay;
  if (!r || !r.groups || !lab.groupCounts) return;
  for (const el of lab.groupCounts) {
    const v = r.metric(`paged_group_blocks_${el.dataset.groupBlocks}`);
    const text = int(v);
    if (el.textContent !== text) el.textContent = text;
    el.dataset.value = String(v);
  }
}

function firstBlockWith(replay, state) {
  for (let b = 0; b < replay.numBlocks; b += 1) if (replay.paged.stateOf(b) === state) return b;
  return -1;
}

// ---------------------------------------------------------------- step and render

// Views below the fold redraw when they are on screen; off screen they are marked stale and caught up
// when the scrubbing pauses and the browser is idle, so a scrub pays only for what the user sees. body[data-settled] is the step
// every view shows (the tests wait for it).
const lazy = [
  // Each track's detail (bars, fragmentation, maps) sits just below the fold of a usual window: it is
  // watched without a margin (`near: false`), so a scrub at the top does not redraw it (its canvases and
  // texts cost a step's frame ~10 ms of paint, commit and raster on this VM); the derivation below it.
  { name: "detail", els: [...document.querySelectorAll(".track-detail")], near: false,
    draw: (changed) => panels.renderDetail(changed) },
  { name: "derivation", el: $("derivation").closest("section"), draw: () => panels.renderDerivation() },
  { name: "tables", el: $("seq-list").closest("section"), draw: () => tables.render() },
  { name: "stream", el: $("ev-list").closest("section"), draw: () => stream.render() },
  { name: "experiments", el: $("exp-list").closest("section"), draw: () => experiments.render(lab.replay) },
  // The inspector sits (sticky) in the pool's section: on screen exactly when that section is. Its HTML,
  // rewritten when the selected block changes, makes chromium re-layerize the page, so off screen it waits.
  // The CPU tier sits in the pool's section too (hidden without a tier: it then draws nothing).
  { name: "tier", el: $("grid").closest("section"), draw: () => tier.render() },
  { name: "inspector", el: $("grid").closest("section"),
    draw: () => lab.selected >= 0 && inspector.show(lab.replay, lab.selected) },
];
const onScreen = new Set();
const visible = (v) => (v.els || [v.el]).some((el) => onScreen.has(el));
let idleHandle = 0;
// The block grid draws only on screen too: off screen it keeps the blocks that changed (`grid.defer`).
const poolSection = $("grid").closest("section");
lazy.push({ name: "grid", el: poolSection, draw: () => grid.catchUp(), get stale() { return grid.hasDeferred(); },
  set stale(_) {} });

function settle() {
  if (lab.replay && lazy.every((v) => !v.stale) && !grid.hasPending()) {
    document.body.dataset.settled = String(lab.step);
  }
}

function catchUp() {
  idleHandle = 0;
  if (!lab.replay) return;
  for (const v of lazy) {
    if (v.stale) {
      v.draw();
      v.stale = false;
    }
  }
  grid.syncCells();
  settle();
}

function onIntersect(entries) {
  for (const e of entries) {
    if (e.isIntersecting) onScreen.add(e.target);
    else onScreen.delete(e.target);
  }
  for (const v of lazy) {
    if (v.stale && visible(v) && lab.replay) {
      v.draw(null);
      v.stale = false;
    }
  }
  settle();
}
// Most views count as on screen 200 px before they scroll in, so they are drawn before they show.
const observer = new IntersectionObserver(onIntersect, { rootMargin: "200px 0px" });
const exact = new IntersectionObserver(onIntersect);
for (const v of lazy) for (const el of v.els || [v.el]) (v.near === false ? exact : observer).observe(el);

function render(changed) {
  const r = lab.replay;
  const marks = [performance.now()];
  if (onScreen.has(poolSection)) grid.update(changed);
  else grid.defer(changed);
  marks.push(performance.now());
  panels.render();
  renderGroupCounts();
  marks.push(performance.now());
  for (const v of lazy) {
    if (v.name === "grid") continue;
    if (visible(v)) {
      v.draw(v.stale ? null : changed);
      v.stale = false;
    } else {
      v.stale = true;
    }
    marks.push(performance.now());
  }
  chart.moveCursor();
  // Where a redraw's time goes (the page benchmark reports it); a stale view's time is 0 here.
  lab.lastRender = Object.fromEntries(["grid", "panels", ...lazy.filter((v) => v.name !== "grid").map((v) => v.name)]
    .map((name, i) => [name, marks[i + 1] - marks[i]]));
  const scrub = $("r-scrub");
  scrub.value = String(lab.moment);
  $("r-step").textContent = clockText(r);
  const note = clockNote(r.bundle.time_model);
  const how = r.contig ? "; both runs at the same instant t, each at the last state it reached by then, " +
    "step k of a run: its state after k engine steps" : "; step k: the state after k engine steps";
  setTextOnce($("r-clock"), `(${note ? `${note}` : "simulated time"}${how})`);
  $("r-step").dataset.step = String(lab.step);
  $("r-step").dataset.contiguousStep = r.contig ? String(r.contigStep) : "";
  $("r-step").dataset.time = String(r.time);
  document.body.dataset.step = String(lab.step);
  document.body.dataset.moment = String(lab.moment);
  if (lazy.some((v) => v.stale) || grid.hasPending()) {
    // Catch up once the user stops scrubbing (no redraw for 200 ms), in an idle period.
    delete document.body.dataset.settled;
    clearTimeout(idleHandle);
    idleHandle = setTimeout(() => requestIdleCallback(catchUp, { timeout: 500 }), 200);
  } else {
    settle();
  }
}

/** The scrubber's reading: the shared instant and each run's step there (an ended run says so); a run
 * in which no step ran says that, not a clock. */
function clockText(r) {
  const t = r.time;
  const steps = (n, k, ended) => (n === 0 ? "no step ran" : `step ${int(k)} / ${int(n)}${ended ? " (ended)" : ""}`);
  if (!r.contig) {
    if (r.numSteps === 0) return `step 0 / 0 · no step ran: ${noStepWhy(r)}`;
    return `step ${int(lab.step)} / ${int(r.numSteps)} · t = ${secs(t)}`;
  }
  if (r.numSteps === 0 && r.contigSteps === 0) return `step 0 / 0 · no step ran in either run: ${noStepWhy(r)}`;
  return `t = ${secs(t)} · paged ${steps(r.numSteps, lab.step, r.ended(r.paged))} · ` +
    `contiguous ${steps(r.contigSteps, r.contigStep, r.ended(r.contig))}`;
}

/** Why a run took no step: its requests' fates (every one rejected at arrival, as a pool too small). */
function noStepWhy(r) {
  const rejected = r.paged.metric("num_rejected", 0);
  const total = r.bundle.requests.length;
  return rejected === total ? `every request was rejected at arrival (${int(total)} of ${int(total)})`
    : `${int(rejected)} of ${int(total)} requests rejected`;
}

function setTextOnce(el, text) {
  if (el.textContent !== text) el.textContent = text;
  el.dataset.timeModel = lab.replay ? lab.replay.bundle.time_model?.name ?? "" : "";
}

function selectBlock(b) {
  lab.selected = b;
  if (!lab.replay) return;
  inspector.show(lab.replay, b);
  tables.markBlock(b);
}

/** Seek to moment m now (synchronously) and redraw what changed. */
function seek(m) {
  const r = lab.replay;
  if (!r) return;
  const moment = Math.max(0, Math.min(r.numMoments - 1, m | 0));
  const t0 = performance.now();
  const changed = r.seekMoment(moment);
  lab.lastReplayMs = performance.now() - t0;
  lab.moment = moment;
  lab.step = r.step;
  render(changed);
  lab.lastSeekMs = performance.now() - t0;
  writeUrl();
}
lab.seek = seek;
/** Seek to the paged track's state k (the first moment it is in force). */
lab.seekStep = (k) => lab.replay && seek(lab.replay.momentOfStep(k));

/** Seek at the next frame, coalescing a burst of scrubber events into one redraw. */
function requestStep(k) {
  lab.pending = k;
  if (lab.frame) return;
  lab.frame = requestAnimationFrame(() => {
    lab.frame = 0;
    const p = lab.pending;
    lab.pending = null;
    if (p !== null) seek(p);
  });
}

$("r-scrub").addEventListener("input", (ev) => requestStep(Number(ev.target.value)));
$("r-start").addEventListener("click", () => seek(0));
$("r-end").addEventListener("click", () => lab.replay && seek(lab.replay.numMoments - 1));
$("r-prev").addEventListener("click", () => seek(lab.moment - 1));
$("r-next").addEventListener("click", () => seek(lab.moment + 1));
$("r-default").addEventListener("click", () => lab.replay && seek(lab.replay.momentOfStep(lab.replay.bundle.default_step)));
$("r-play").addEventListener("click", () => setPlaying(!lab.playing));
$("r-link").addEventListener("click", async () => {
  const btn = $("r-link");
  try {
    await navigator.clipboard.writeText(window.location.href);
    btn.textContent = "link copied";
  } catch {
    btn.textContent = "see address bar";
  }
  setTimeout(() => { btn.textContent = "copy link"; }, 1500);
});

function setPlaying(on) {
  const r = lab.replay;
  if (on && r && lab.moment >= r.numMoments - 1) seek(0);
  lab.playing = on && !!r;
  const btn = $("r-play");
  btn.textContent = lab.playing ? "⏸" : "▶";
  btn.setAttribute("aria-label", lab.playing ? "Pause" : "Play");
  if (!lab.playing) return;
  let last = performance.now();
  let acc = 0;
  const tick = (now) => {
    if (!lab.playing) return;
    acc += ((now - last) / 1000) * Number($("r-speed").value);
    last = now;
    const n = Math.floor(acc);
    if (n > 0) {
      acc -= n;
      const next = Math.min(lab.replay.numMoments - 1, lab.moment + n);
      seek(next);
      if (next >= lab.replay.numMoments - 1) {
        setPlaying(false);
        return;
      }
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}

document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  if (t.closest && (t.closest("input, select, textarea, button") || t.closest("#grid"))) return;
  if (ev.key === " ") { ev.preventDefault(); setPlaying(!lab.playing); }
  else if (ev.key === "ArrowRight" || ev.key === ".") { ev.preventDefault(); seek(lab.moment + 1); }
  else if (ev.key === "ArrowLeft" || ev.key === ",") { ev.preventDefault(); seek(lab.moment - 1); }
  else if (ev.key === "Home") { ev.preventDefault(); seek(0); }
  else if (ev.key === "End" && lab.replay) { ev.preventDefault(); seek(lab.replay.numMoments - 1); }
});

let resizeTimer = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    grid.relayout();
    forgetCanvasSizes(...document.querySelectorAll("canvas"));
    if (lab.replay) {
      chart.draw();
      panels.drawMaps();
      grid.update(null);
      tier.relayout();
    }
  }, 100);
});

// ---------------------------------------------------------------- start

async function start() {
  try {
    lab.presets = await fetchPresets();
  } catch (err) {
    banner(`cannot load the presets: ${err.message}`);
    document.body.dataset.ready = "true";
    return;
  }
  const { query, step, contigStep } = queryFromUrl();
  if (!query.preset) query.preset = lab.presets.presets[0].name;
  await run(query, step, true, contigStep);
}
lab.ready = start();
