// The time-series chart: the bundle's per-step metric columns (allocated, stored, slack, and what the
// contiguous baseline reserves) drawn once per bundle; the cursor at the current step is a separate
// element, so scrubbing moves it without redrawing the lines. Click or drag on the chart to seek.

import { bytes } from "./format.js";
import { prepareCanvas } from "./grid.js";

export const SERIES = [
  { name: "paged_allocated_bytes", label: "paged allocated", color: "#4d8dff", fill: true },
  { name: "paged_stored_bytes", label: "paged stored", color: "#35c28a" },
  { name: "paged_tail_slack_bytes", label: "tail slack", color: "#ff9f43" },
  { name: "contiguous_reserved_bytes", label: "contiguous reserved", color: "#ff5d73", dash: [5, 4] },
];

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
      this.onSeek(Math.round(x * this.replay.numSteps));
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
    this.padL = 64;
    this.padR = 8;
  }

  setReplay(replay) {
    this.replay = replay;
    this.draw();
    this.legend.innerHTML = SERIES.filter((s) => replay.hasMetric(s.name)).map((s) =>
      `<span><i style="background:${s.color}"></i>${s.label}</span>`).join("");
  }

  draw() {
    const replay = this.replay;
    if (!replay) return;
    const { ctx, w, h } = prepareCanvas(this.canvas);
    ctx.clearRect(0, 0, w, h);
    const n = replay.numSteps;
    const series = SERIES.map((s) => ({ ...s, col: replay.paged.metrics[s.name] || replay.contig.metrics[s.name] }))
      .filter((s) => s.col);
    let ymax = 0;
    for (const s of series) for (const v of s.col) if (v > ymax) ymax = v;
    if (ymax <= 0) ymax = 1;
    const padT = 8;
    const padB = 16;
    const x0 = this.padL;
    const pw = w - this.padL - this.padR;
    const ph = h - padT - padB;
    const X = (k) => x0 + (n === 0 ? 0 : (k / n) * pw);
    const Y = (v) => padT + ph - (v / ymax) * ph;
    // Axes and labels.
    ctx.strokeStyle = "rgba(255,255,255,0.12)";
    ctx.lineWidth = 1;
    ctx.fillStyle = "rgba(230,236,245,0.6)";
    ctx.font = "11px ui-sans-serif, system-ui, sans-serif";
    ctx.textAlign = "right";
    for (const f of [0, 0.5, 1]) {
      const y = Math.round(Y(ymax * f)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x0, y);
      ctx.lineTo(x0 + pw, y);
      ctx.stroke();
      ctx.fillText(bytes(ymax * f), x0 - 6, y + 4);
    }
    ctx.textAlign = "left";
    ctx.fillText("step 0", x0, h - 3);
    ctx.textAlign = "right";
    ctx.fillText(`step ${n}`, x0 + pw, h - 3);
    // One point per pixel column at most: the max over the steps it covers keeps peaks visible.
    const cols = Math.max(1, Math.min(n + 1, Math.floor(pw)));
    for (const s of series) {
      ctx.beginPath();
      for (let c = 0; c < cols; c += 1) {
        const lo = Math.floor((c * (n + 1)) / cols);
        const hi = Math.max(lo + 1, Math.floor(((c + 1) * (n + 1)) / cols));
        let v = 0;
        for (let k = lo; k < hi && k < s.col.length; k += 1) if (s.col[k] > v) v = s.col[k];
        const x = cols === 1 ? x0 : X(lo);
        if (c === 0) ctx.moveTo(x, Y(v));
        else ctx.lineTo(x, Y(v));
      }
      ctx.setLineDash(s.dash || []);
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 1.6;
      ctx.stroke();
      if (s.fill) {
        ctx.lineTo(X(n), Y(0));
        ctx.lineTo(x0, Y(0));
        ctx.closePath();
        ctx.globalAlpha = 0.12;
        ctx.fillStyle = s.color;
        ctx.fill();
        ctx.globalAlpha = 1;
      }
    }
    ctx.setLineDash([]);
    this.geometry = { x0, pw, w };
    this.moveCursor(replay.step);
  }

  moveCursor(k) {
    if (!this.replay || !this.geometry) return;
    const n = this.replay.numSteps;
    const { x0, pw } = this.geometry;
    const x = x0 + (n === 0 ? 0 : (k / n) * pw);
    this.cursor.style.backgroundPositionX = `${x.toFixed(1)}px`;
  }
}
