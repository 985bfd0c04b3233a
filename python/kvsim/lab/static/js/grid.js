// The physical block grid: one cell per block (a window of WINDOW blocks past that, with a clickable
// overview of the whole pool), states told apart by fill, pattern, border and glyph, keyboard navigation
// with a roving tabindex. Redraws only the cells whose block changed at this step.

import { int } from "./format.js";

export const WINDOW = 2048;

// Canvas sizes in CSS pixels, measured once (and again after a resize): reading layout while drawing
// a step would force the browser to lay out the whole page between the views' DOM writes.
const sizes = new WeakMap();
export function canvasSize(canvas) {
  let s = sizes.get(canvas);
  if (!s || s.w <= 1) {
    s = { w: Math.max(1, canvas.clientWidth), h: Math.max(1, canvas.clientHeight) };
    sizes.set(canvas, s);
  }
  return s;
}
export function forgetCanvasSizes(...canvases) {
  for (const c of canvases) sizes.delete(c);
}

/** Size a canvas's backing store to its CSS size times the device pixel ratio; returns the 2D context. */
export function prepareCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const { w, h } = canvasSize(canvas);
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, w, h };
}
export const STATES = ["free", "private", "shared", "cached", "null"];

/** Colours of the states, read once from the stylesheet's custom properties. */
export function stateColors() {
  const css = getComputedStyle(document.documentElement);
  const get = (n, d) => css.getPropertyValue(n).trim() || d;
  return {
    free: get("--c-free", "#262c36"),
    private: get("--c-private", "#4d8dff"),
    shared: get("--c-shared", "#b47cff"),
    cached: get("--c-cached", "#e3a82b"),
    null: get("--c-null", "#555"),
    bg: get("--c-bg-deep", "#0b0e12"),
  };
}

const STACK = ["private", "shared", "cached", "null"]; // bottom up; free is the rest (background)

/**
 * Draw blocks [0, n) as columns over the canvas width. One block per column while they fit, a private
 * one drawn to the height of its fill; past that each pixel column is an aggregate: its height split
 * between the states of the blocks it covers, in proportion to their counts (free is what is left).
 */
export function drawPoolStrip(canvas, track, colors, windowRange = null) {
  const { ctx, w, h } = prepareCanvas(canvas);
  ctx.fillStyle = colors.bg;
  ctx.fillRect(0, 0, w, h);
  const n = track.numBlocks;
  if (n === 0) return;
  const bs = track.blockSize;
  const cols = Math.min(Math.floor(w), n);
  const colW = w / cols;
  const gap = colW >= 4 ? 1 : 0;
  const count = { private: 0, shared: 0, cached: 0, null: 0, free: 0 };
  for (let c = 0; c < cols; c += 1) {
    const lo = Math.floor((c * n) / cols);
    const hi = Math.max(lo + 1, Math.floor(((c + 1) * n) / cols));
    const x = c * colW;
    if (hi - lo === 1) {
      const st = track.stateOf(lo);
      ctx.fillStyle = colors[st];
      const bh = st === "private" ? Math.max(3, h * (track.tokens[lo] / bs)) : st === "free" ? 3 : h;
      if (st === "cached") ctx.globalAlpha = 0.55;
      ctx.fillRect(x, h - bh, colW - gap, bh);
      ctx.globalAlpha = 1;
      continue;
    }
    for (const k in count) count[k] = 0;
    for (let b = lo; b < hi; b += 1) {
      count[track.stateOf(b)] += 1;
    }
    let y = h;
    for (const st of STACK) {
      if (!count[st]) continue;
      const bh = (h * count[st]) / (hi - lo);
      ctx.fillStyle = colors[st];
      if (st === "cached") ctx.globalAlpha = 0.55;
      ctx.fillRect(x, y - bh, Math.max(1, colW - gap), bh);
      ctx.globalAlpha = 1;
      y -= bh;
    }
  }
  if (windowRange) {
    const [a, b] = windowRange;
    ctx.strokeStyle = "#ffffff";
    ctx.lineWidth = 2;
    ctx.strokeRect((a / n) * w + 1, 1, ((b - a) / n) * w - 2, h - 2);
  }
}

export class BlockGrid {
  constructor({ root, overview, overviewCanvas, caption, onSelect }) {
    this.root = root;
    this.overview = overview;
    this.overviewCanvas = overviewCanvas;
    this.caption = caption;
    this.onSelect = onSelect;
    this.cells = [];
    this.start = 0;
    this.selected = -1;
    this.track = null;
    this.colors = null;
    root.addEventListener("click", (ev) => {
      const cell = ev.target.closest(".cell");
      if (cell) this.select(Number(cell.dataset.block), true);
    });
    root.addEventListener("keydown", (ev) => this._key(ev));
    overviewCanvas.addEventListener("click", (ev) => {
      const rect = overviewCanvas.getBoundingClientRect();
      const b = Math.floor(((ev.clientX - rect.left) / rect.width) * this.track.numBlocks);
      this.showWindowAround(b);
      this.select(b, false);
    });
  }

  /** Build the cells for a new bundle. */
  reset(track) {
    this.track = track;
    this.colors = stateColors();
    const n = track.numBlocks;
    this.windowed = n > WINDOW;
    this.overview.hidden = !this.windowed;
    this.root.className = `grid ${n <= 96 ? "size-l" : n <= 512 ? "size-m" : n <= 1024 ? "size-s" : "size-xs"}`;
    this.start = 0;
    this._build();
    if (this.selected >= n) this.selected = -1;
  }

  _build() {
    const n = this.track.numBlocks;
    const count = Math.min(WINDOW, n - this.start);
    const frag = document.createDocumentFragment();
    this.cells = new Array(count);
    for (let i = 0; i < count; i += 1) {
      const b = this.start + i;
      const cell = document.createElement("div");
      cell.className = "cell";
      cell.dataset.block = String(b);
      cell.setAttribute("role", "option");
      cell.setAttribute("aria-selected", "false");
      cell.tabIndex = -1;
      cell.innerHTML = `<span class="lbl">${b}</span><i class="badge"></i>`;
      frag.appendChild(cell);
      this.cells[i] = cell;
    }
    this.root.replaceChildren(frag);
    this.sigs = new Array(count).fill("");
    this.cols = 0;
    if (this.windowed) {
      this.caption.textContent = `Showing blocks P_${int(this.start)}–P_${int(this.start + count - 1)} of ${int(n)}` +
        " (click the overview, or Page Up / Down past the edge, to move the window)";
    }
  }

  showWindowAround(b) {
    if (!this.windowed) return;
    const n = this.track.numBlocks;
    const start = Math.max(0, Math.min(n - WINDOW, Math.floor(b / WINDOW) * WINDOW));
    if (start === this.start) return;
    this.start = start;
    this._build();
    this.update(null);
  }

  /** Redraw the cells of the changed blocks (a Set of ids), or every cell (null). */
  update(changed) {
    const t = this.track;
    const paint = (b) => {
      const i = b - this.start;
      if (i < 0 || i >= this.cells.length) return;
      const cell = this.cells[i];
      const blk = t.block(b);
      const st = blk.state;
      // Touch the DOM only where the block really changed (a jump marks every block as changed).
      const sig = `${st}|${blk.ref_cnt}|${blk.num_tokens}|${b === this.selected}`;
      if (this.sigs[i] === sig) return;
      this.sigs[i] = sig;
      const cls = `cell s-${st}${b === this.selected ? " selected" : ""}${blk.num_tokens > 0 && blk.num_tokens < t.blockSize ? " partial" : ""}`;
      if (cell.className !== cls) cell.className = cls;
      cell.dataset.state = st;
      cell.dataset.ref = String(blk.ref_cnt);
      cell.dataset.tokens = String(blk.num_tokens);
      cell.style.setProperty("--fill", String(blk.num_tokens / t.blockSize));
      cell.lastChild.textContent = st === "shared" ? String(blk.ref_cnt) : "";
      cell.setAttribute("aria-label",
        `P_${b}: ${st}, ref ${blk.ref_cnt}, ${blk.num_tokens} of ${t.blockSize} tokens`);
    };
    if (changed === null) {
      for (let i = 0; i < this.cells.length; i += 1) paint(this.start + i);
    } else {
      for (const b of changed) paint(b);
    }
    if (this.windowed) {
      drawPoolStrip(this.overviewCanvas, t, this.colors, [this.start, this.start + this.cells.length]);
    }
    this._ensureTabStop();
  }

  _ensureTabStop() {
    const i = this.selected >= this.start && this.selected < this.start + this.cells.length
      ? this.selected - this.start : 0;
    for (const c of this.root.querySelectorAll('.cell[tabindex="0"]')) c.tabIndex = -1;
    if (this.cells[i]) this.cells[i].tabIndex = 0;
  }

  /** Select block b (and tell the page); focus it when asked (keyboard). */
  select(b, focus) {
    const n = this.track ? this.track.numBlocks : 0;
    if (b < 0 || b >= n) return;
    if (this.windowed && (b < this.start || b >= this.start + this.cells.length)) this.showWindowAround(b);
    const old = this.selected - this.start;
    if (this.cells[old]) {
      this.cells[old].classList.remove("selected");
      this.cells[old].setAttribute("aria-selected", "false");
      this.sigs[old] = "";
    }
    this.selected = b;
    const cell = this.cells[b - this.start];
    if (cell) {
      cell.classList.add("selected");
      cell.setAttribute("aria-selected", "true");
      this.sigs[b - this.start] = "";
      this._ensureTabStop();
      if (focus) cell.focus({ preventScroll: false });
    }
    this.onSelect(b);
  }

  _columns() {
    if (this.cols) return this.cols;
    const top = this.cells[0] ? this.cells[0].offsetTop : 0;
    let c = 0;
    while (c < this.cells.length && this.cells[c].offsetTop === top) c += 1;
    this.cols = Math.max(1, c);
    return this.cols;
  }

  _key(ev) {
    if (!this.track) return;
    const cur = this.selected < 0 ? this.start : this.selected;
    const cols = this._columns();
    const moves = {
      ArrowRight: 1, ArrowLeft: -1, ArrowDown: cols, ArrowUp: -cols,
      Home: -cur, End: this.track.numBlocks - 1 - cur,
      PageDown: cols * 8, PageUp: -cols * 8,
    };
    if (ev.key in moves) {
      ev.preventDefault();
      const b = Math.max(0, Math.min(this.track.numBlocks - 1, cur + moves[ev.key]));
      this.select(b, true);
    } else if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      this.select(cur, true);
    }
  }

  /** Forget the cached column count (after a resize). */
  relayout() {
    this.cols = 0;
  }
}
