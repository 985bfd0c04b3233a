// The time-series chart: the bundle's per-step metric columns (allocated, stored, slack, and what the
// contiguous baseline reserves) drawn once per bundle against simulated time, each track's values at its
// own steps' times (the two runs' clocks differ: a column of pixels is one instant for both); the cursor
// at the current instant is a separate element, so scrubbing moves it without redrawing the lines. Click
// or drag on the chart to seek to the instant under the pointer.

import { prepareCanvas } from "./grid.js";
import { bytes, pct } from "./format.js";
import { upperBound } from "./replay.js";

// Drawn in this order. Stored is never above allocated (allocated = stored + tail slack): stored is an
// area, and allocated a line drawn over it, so where the two meet (a small slack) both stay visible.
export const SERIES = [
  { name: "paged_stored_bytes", label: "paged stored", color: "#35c28a", area: true },
  { name: "paged_tail_slack_bytes", label: "tail slack", color: "#ff9f43" },
  { name: "paged_allocated_bytes", label: "paged allocated", color: "#4d8dff", width: 2 },
  { name: "contiguous_reserved_bytes", label: "contiguous reserved", color: "#ff5d73", dash: [5, 4] },
];
const ON_LINK = "Includes the KV of blocks a CPU-tier load is still filling: they count as stored from the " +
  "load's admission (the engine's accounting), before their KV has crossed the host link.";
// The plot's margins inside the canvas (the cursor box covers the plot only: not the step labels below).
// (l: the tick labels and, rotated beside them, the axis's quantity)
export const PAD = { l: 76, r: 8, t: 8, b: 16 };
// The pool's capacity is drawn when the run's peak is at least this share of it: a lower peak would be a
// flat line at the bottom of a scale stretched to the pool, so the legend gives the pool and the peak's share.
const POOL_SCALE = 0.25;
const POOL_COLOR = "rgba(230,236,245,0.7)"; // (a reference line, as the grid lines: not a series)
const POOL_TITLE = "The pool's blocks × the bytes of a block, as the pool's title states it. One block is " +
  "vLLM's null block, never handed out: a full pool's lines stop one block below this line.";
const UNITS = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10], ["B", 1]];

/** The time axis's two ends in one unit, the later one's (ms under a second): ["0 ms", "50.0 ms"]. */
export function timeEnds(t0, t1) {
  const [unit, scale, digits] = t1 < 1 ? ["ms", 1000, 1] : ["s", 1, 3];
  const at = (t) => (t === 0 ? `0 ${unit}` : `${(t * scale).toFixed(digits)} ${unit}`);
  return [at(t0), at(t1)];
}

/** Y ticks at round values: a step of 1, 2 or 5 × 10^k in the unit of the largest value, from 0 to the
 * first multiple at or above `ymax`: [{value, label}]. */
export function niceTicks(ymax, target = 3) {
  if (!(ymax > 0)) return [{ value: 0, label: "0 B" }, { value: 1, label: "1 B" }];
  const [unit, size] = UNITS.find(([, u]) => ymax >= u) || UNITS[UNITS.length - 1];
  const raw = ymax / size / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw) * size;
  const n = Math.ceil(ymax / step - 1e-9);
  const ticks = [];
  for (let i = 0; i <= n; i += 1) {
    const v = i * step;
    const x = v / size;
    ticks.push({ value: v, label: i === 0 ? "0 B" : `${Number.isInteger(x) ? x : Number(x.toPrecision(3))} ${unit}` });
  }
  return ticks;
}

export class Chart {
  constructor({ canvas, cursor, legend, onSeek }) {
    this.canvas = canvas;
    this.cursor = cursor;
    this.legend = legend;
    this.onSeek = onSeek;
    this.replay = null;
    const seekAt = (ev) => {
      if (!this.replay) return;
      const rect = canvas.getBoundingClientRect();
      const x = Math.max(0, Math.min(1, (ev.clientX - rect.left - this.padL) / (rect.width - this.padL - this.padR)));
      this.onSeek(this.momentAt(x));
    };
    let dragging = false;
    canvas.addEventListener("pointerdown", (ev) => {
      dragging = true;
      canvas.setPointerCapture(ev.pointerId);
      seekAt(ev);
    });
    canvas.addEventListener("pointermove", (ev) => dragging && seekAt(ev));
    canvas.addEventListener("pointerup", () => {
      dragging = false;
    });
    this.padL = PAD.l;
    this.padR = PAD.r;
    // The cursor moves across the plot only: its box stops above the step labels (it once hid "step 0").
    Object.assign(cursor.style, { top: `${PAD.t}px`, bottom: `${PAD.b}px` });
  }

  setReplay(replay) {
    this.replay = replay;
    this.draw();
    // With a CPU tier, a block a load is still filling counts as stored from the load's admission (the
    // engine's accounting, as the paged panel's "Stored" and the inspector say): the legend says so too.
    const tiered = Boolean(replay.bundle && replay.bundle.tier);
    this.legend.hidden = this.canvas.dataset.empty === "true"; // (no line drawn: nothing to name)
    const pool = this.pool;
    this.legend.innerHTML = SERIES.filter((s) => replay.hasMetric(s.name)).map((s) =>
      `<span data-series="${s.name}"${s.name === "paged_stored_bytes" && tiered ? ` title="${ON_LINK}"` : ""}>` +
      `<i class="${s.area ? "area" : s.dash ? "dash" : ""}" style="--c:${s.color}"></i>` +
      `${s.name === "paged_stored_bytes" && tiered ? `${s.label} (loads in flight included)` : s.label}</span>`).join("") +
      (!pool ? "" : pool.drawn
        ? `<span data-series="pool" title="${POOL_TITLE}"><i class="dash" style="--c:${POOL_COLOR}"></i>pool capacity ${bytes(pool.bytes)}</span>`
        : `<span data-series="pool">pool capacity ${bytes(pool.bytes)}, above this scale (the chart's peak ${pct(pool.peak / pool.bytes)} of it)</span>`);
  }

  /** The chart's time span: [first instant, last instant] (seconds). */
  span() {
    const t = this.replay.momentTime;
    if (!t || t.length === 0) return [0, 0];
    return [t[0], t[t.length - 1]];
  }

  /** The moment at fraction x of the time axis: the last instant at or before that time. */
  momentAt(x) {
    const r = this.replay;
    const t = r.momentTime;
    if (!t) return Math.round(x * (r.numMoments - 1));
    const [t0, t1] = this.span();
    return Math.max(0, upperBound(t, t0 + x * (t1 - t0)) - 1);
  }

  draw() {
    const replay = this.replay;
    if (!replay) return;
    const { ctx, w, h } = prepareCanvas(this.canvas);
    ctx.clearRect(0, 0, w, h);
    this.pool = null;
    const n = replay.numMoments - 1;
    // Each series with its own track's times (a contiguous column at the contiguous steps' times).
    const series = SERIES.map((s) => {
      const track = s.name in replay.paged.metrics ? replay.paged : replay.contig && s.name in replay.contig.metrics ? replay.contig : null;
      return track ? { ...s, col: track.metrics[s.name], time: track.metrics.time_s } : null;
    }).filter((s) => s);
    const [t0, t1] = this.span();
    let top = 0;
    for (const s of series) for (const v of s.col) if (v > top) top = v;
    this.canvas.dataset.empty = String(top === 0);
    if (!(top > 0)) {
      // Nothing was ever held (no step ran, or nothing allocated): no axis to read, a sentence instead.
      ctx.fillStyle = "rgba(230,236,245,0.6)";
      ctx.font = "12px ui-sans-serif, system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.fillText(n === 0 ? "no step ran: nothing to chart" : "no KV memory was held in this run", w / 2, h / 2);
      this.canvas.dataset.yticks = "[]";
      this.geometry = null;
      this.cursor.hidden = true;
      return;
    }
    this.cursor.hidden = false;
    // The pool's capacity (the bytes of its blocks, as the pool's title states them), in the scale where the
    // run's peak comes near it: a full pool then shows as lines at the capacity line.
    const poolBytes = replay.bundle.num_blocks * replay.bundle.bytes_per_block;
    this.pool = poolBytes > 0 ? { bytes: poolBytes, peak: top, drawn: top >= POOL_SCALE * poolBytes } : null;
    this.canvas.dataset.pool = this.pool ? JSON.stringify(this.pool) : "";
    if (this.pool && this.pool.drawn) top = Math.max(top, poolBytes);
    const ticks = niceTicks(top);
    const ymax = ticks[ticks.length - 1].value;
    this.canvas.dataset.yticks = JSON.stringify(ticks);
    const padT = PAD.t;
    const padB = PAD.b;
    const x0 = this.padL;
    const pw = w - this.padL - this.padR;
    const ph = h - padT - padB;
    const X = (t) => x0 + (t1 <= t0 ? 0 : ((t - t0) / (t1 - t0)) * pw);
    const Y = (v) => padT + ph - (v / ymax) * ph;
    // Axes and labels.
    ctx.strokeStyle = "rgba(255,255,255,0.12)";
    ctx.lineWidth = 1;
    ctx.fillStyle = "rgba(230,236,245,0.6)";
    ctx.font = "11px ui-sans-serif, system-ui, sans-serif";
    ctx.textAlign = "right";
    for (const t of ticks) {
      const y = Math.round(Y(t.value)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x0, y);
      ctx.lineTo(x0 + pw, y);
      ctx.stroke();
      ctx.fillText(t.label, x0 - 6, Math.min(h - padB, Math.max(padT + 8, y + 4)));
    }
    const [from, to] = timeEnds(t0, t1);
    ctx.textAlign = "left";
    ctx.fillText(`t = ${from}`, x0, h - 3);
    ctx.textAlign = "right";
    ctx.fillText(`t = ${to}`, x0 + pw, h - 3);
    // The y axis's quantity, rotated in the margin left of its tick labels.
    ctx.save();
    ctx.translate(11, padT + ph / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.fillText("KV memory", 0, 0);
    ctx.restore();
    // One point per pixel column at most: the max over the states in force during the instants it covers
    // keeps peaks visible (a state holds from its step's time to the next one's; past a track's end, its
    // last).
    const cols = Math.max(1, Math.min(n + 1, Math.floor(pw)));
    for (const s of series) {
      ctx.beginPath();
      const len = Math.min(s.col.length, s.time.length);
      for (let c = 0; c < cols; c += 1) {
        const a = t0 + ((t1 - t0) * c) / cols;
        const b = t0 + ((t1 - t0) * (c + 1)) / cols;
        // States in force in [a, b): the last at or before a, and those starting before b.
        let k = Math.max(0, upperBound(s.time, a) - 1);
        const end = Math.max(k + 1, upperBound(s.time, c === cols - 1 ? b : b - 1e-12));
        let v = 0;
        for (; k < end && k < len; k += 1) if (s.col[k] > v) v = s.col[k];
        const x = cols === 1 ? x0 : X(a);
        if (c === 0) ctx.moveTo(x, Y(v));
        else ctx.lineTo(x, Y(v));
      }
      if (s.area) {
        ctx.lineTo(X(t1), Y(0));
        ctx.lineTo(x0, Y(0));
        ctx.closePath();
        ctx.globalAlpha = 0.45;
        ctx.fillStyle = s.color;
        ctx.fill();
        ctx.globalAlpha = 1;
        continue;
      }
      ctx.setLineDash(s.dash || []);
      ctx.strokeStyle = s.color;
      ctx.lineWidth = s.width || 1.6;
      // A round join: the default miter's point on a one-step spike pokes past the value (a spike of
      // 293 MiB drew above the 300 MiB grid line).
      ctx.lineJoin = "round";
      ctx.stroke();
    }
    if (this.pool && this.pool.drawn) {
      const y = Math.round(Y(this.pool.bytes)) + 0.5;
      ctx.setLineDash([2, 3]);
      ctx.strokeStyle = POOL_COLOR;
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(x0, y);
      ctx.lineTo(x0 + pw, y);
      ctx.stroke();
    }
    ctx.setLineDash([]);
    this.geometry = { x0, pw, w, padT, ph, ymax, t0, t1 };
    this.moveCursor();
  }

  /** The cursor at the replay's current instant. */
  moveCursor() {
    if (!this.replay || !this.geometry) return;
    const { x0, pw, t0, t1 } = this.geometry;
    const t = this.replay.time ?? t0;
    const x = x0 + (t1 <= t0 ? 0 : ((t - t0) / (t1 - t0)) * pw);
    this.cursor.style.backgroundPositionX = `${x.toFixed(1)}px`;
  }
}
