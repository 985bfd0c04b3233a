// The physical block grid: one cell per block (a window of WINDOW blocks past that, with a clickable
// overview of the whole pool), states told apart by fill, pattern, border and glyph, keyboard navigation
// with a roving tabindex. The cells are drawn on one canvas behind the grid's elements, which stay as
// transparent, focusable, clickable stand-ins carrying each block's state for assistive technology (and
// the tests); a step redraws only the cells whose block changed, and changes no element's class, so the
// browser restyles nothing.

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
    // A block a CPU-tier load in flight is filling: the tier panel's "being loaded" colour.
    filling: get("--c-loading", "#f05bcb"),
    bg: get("--c-bg-deep", "#0b0e12"),
  };
}

/** What a cell says of a block a CPU-tier load in flight is filling (its title, and its aria-label's end). */
export const FILLING_TEXT = "being filled by a CPU-tier load in flight: allocated and counted as stored, " +
  "but its KV (a state layer's block: its state) is still on the host link; it takes its prefix key when the " +
  "load lands where its group keeps one (a sliding window's and a state's only where a later hit can end)";

// A hybrid model's KV-cache groups are told apart by colour (a hue per kind: full attention blue, sliding
// window teal, chunked local gold, state layers rose; several groups of a kind in shades of it), the
// block's state by its pattern as without groups (filled to its tokens, striped when shared, a dashed
// outline when cached). State layers were pink (hue 330, three groups 316 to 344): with a CPU tier their
// first group took the hue of the blocks a load is filling (`--c-loading`, 315); rose (346 to 14 for
// three groups) keeps 30 degrees from it.
const KIND_HUES = { full: 218, sliding_window: 150, chunked_local: 45, mamba: 10 };

/** Per group {main, dark, empty} colours (CSS strings). */
export function groupColors(groups) {
  const byKind = new Map();
  for (const g of groups) byKind.set(g.kind, (byKind.get(g.kind) || 0) + 1);
  const seen = new Map();
  return groups.map((g) => {
    const n = byKind.get(g.kind);
    const i = seen.get(g.kind) || 0;
    seen.set(g.kind, i + 1);
    const spread = n > 1 ? (i - (n - 1) / 2) / (n - 1) : 0; // -0.5 .. 0.5
    // Groups of one kind spread over a band of hues (20° apart, at most 100°: gemma-3's six window groups
    // were six greens 28° apart in all) and alternate deep and light, so neighbours differ twice over.
    const hue = (KIND_HUES[g.kind] ?? 0) + spread * Math.min(100, 20 * (n - 1));
    const light = n > 1 ? (i % 2 === 0 ? 52 : 72) : 62;
    return {
      main: `hsl(${hue.toFixed(0)} 78% ${light.toFixed(0)}%)`,
      dark: `hsl(${hue.toFixed(0)} 60% ${(light - 20).toFixed(0)}%)`,
      border: `hsl(${hue.toFixed(0)} 90% ${Math.min(88, light + 14).toFixed(0)}%)`,
      empty: `hsl(${hue.toFixed(0)} 35% 17%)`,
    };
  });
}

// Bottom up; free is the rest (background). "filling": a private block a CPU-tier load is filling.
const STACK = ["private", "filling", "shared", "cached", "null"];
const FREE = STACK.length;
const CACHED_ALPHA = 0.55;

const strips = new WeakMap(); // canvas -> its ImageData, reused while its size holds

// CSS colours as packed RGBA pixels (little-endian, as an ImageData's Uint32 view holds them).
const pixels = new Map();
function pixel(color, alpha = 1, under = null) {
  const key = `${color}|${alpha}|${under}`;
  let v = pixels.get(key);
  if (v === undefined) {
    const probe = document.createElement("canvas");
    probe.width = 1;
    probe.height = 1;
    const ctx = probe.getContext("2d", { willReadFrequently: true });
    if (under) {
      ctx.fillStyle = under;
      ctx.fillRect(0, 0, 1, 1);
    }
    ctx.globalAlpha = alpha;
    ctx.fillStyle = color;
    ctx.fillRect(0, 0, 1, 1);
    const [r, g, b] = ctx.getImageData(0, 0, 1, 1).data;
    v = ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
    pixels.set(key, v);
  }
  return v;
}

/**
 * Draw blocks [0, n) as columns over the canvas width. One block per column while they fit, a private
 * one drawn to the height of its fill; past that each pixel column is an aggregate: its height split
 * between the states of the blocks it covers, in proportion to their counts (free is what is left).
 * Written as one ImageData (a fill per column and state), not as thousands of fillRect calls.
 */
export function drawPoolStrip(canvas, track, colors, windowRange = null) {
  const { ctx, w, h } = prepareCanvas(canvas);
  const W = canvas.width;
  const H = canvas.height;
  const dpr = W / w;
  let img = strips.get(canvas);
  if (!img || img.width !== W || img.height !== H) {
    img = ctx.createImageData(W, H);
    strips.set(canvas, img);
  }
  const buf = new Uint32Array(img.data.buffer);
  buf.fill(pixel(colors.bg));
  const n = track.numBlocks;
  if (n > 0) {
    const bs = track.blockSize;
    const cols = Math.min(Math.floor(w), n);
    const colW = w / cols;
    const gap = colW >= 4 ? 1 : 0;
    // The state of each row's code, as an index into STACK (FREE: free).
    const order = track.stateNames.map((name) => (STACK.includes(name) ? STACK.indexOf(name) : FREE));
    const fills = STACK.map((st) => (st === "cached" ? pixel(colors[st], CACHED_ALPHA, colors.bg) : pixel(colors[st])));
    const freeFill = pixel(colors.free);
    // (a held block's empty slots: its colour dimmed)
    const slots = STACK.map((st) => pixel(colors[st], 0.45, colors.bg));
    const cur = track.blocks.cur;
    const codes = track.blockState;
    const filling = track.filling;
    const FILLING = STACK.indexOf("filling");
    const stackOf = (b) => (cur[b] < 0 ? FREE : filling && filling.has(b) ? FILLING : order[codes[cur[b]]]);
    const count = new Float64Array(FREE + 1);
    const paint = (x0, x1, top, bottom, value) => {
      const a = Math.max(0, Math.round(top * dpr));
      const z = Math.min(H, Math.round(bottom * dpr));
      for (let y = a; y < z; y += 1) {
        const row = y * W;
        for (let x = x0; x < x1; x += 1) buf[row + x] = value; // a few pixels: cheaper than fill()
      }
    };
    for (let c = 0; c < cols; c += 1) {
      const lo = Math.floor((c * n) / cols);
      const hi = Math.max(lo + 1, Math.floor(((c + 1) * n) / cols));
      const x = c * colW;
      const x0 = Math.round(x * dpr);
      if (hi - lo === 1) {
        const k = stackOf(lo);
        const x1 = Math.min(W, Math.round((x + colW - gap) * dpr));
        // A held block's bar is its B token slots: the tokens it holds bright, its empty slots dim (a
        // private block of 1 token read as free); a block being filled: the tokens its load brings.
        const partial = k === 0 || k === FILLING;
        if (partial) paint(x0, x1, 0, h, slots[k]);
        const bh = partial ? Math.max(2, h * (track.tokens[lo] / bs)) : k === FREE ? 3 : h;
        paint(x0, x1, h - bh, h, k === FREE ? freeFill : fills[k]);
        continue;
      }
      count.fill(0);
      for (let b = lo; b < hi; b += 1) count[stackOf(b)] += 1;
      const x1 = Math.min(W, Math.max(x0 + 1, Math.round((x + Math.max(1, colW - gap)) * dpr)));
      let y = h;
      for (let k = 0; k < FREE; k += 1) {
        if (!count[k]) continue;
        const bh = (h * count[k]) / (hi - lo);
        paint(x0, x1, y - bh, y, fills[k]);
        y -= bh;
      }
    }
  }
  ctx.putImageData(img, 0, 0);
  if (windowRange && n > 0) {
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
    this.fresh = true;
    this.pending = new Map();
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
    this.groupColors = track.groups ? groupColors(track.groups) : null;
    const n = track.numBlocks;
    this.windowed = n > WINDOW;
    this.overview.hidden = !this.windowed;
    this.root.className = `grid ${n <= 96 ? "size-l" : n <= 512 ? "size-m" : n <= 1024 ? "size-s" : "size-xs"}`;
    this.start = 0;
    this.deferred = undefined;
    this._build();
    if (this.selected >= n) this.selected = -1;
  }

  _build() {
    const n = this.track.numBlocks;
    const count = Math.min(WINDOW, n - this.start);
    if (count === this.cells.length && this.canvas && this.canvas.parentNode === this.root) {
      this._reuse();
      return;
    }
    const frag = document.createDocumentFragment();
    this.canvas = document.createElement("canvas");
    this.canvas.className = "grid-canvas";
    this.canvas.setAttribute("aria-hidden", "true");
    frag.appendChild(this.canvas);
    this.cells = new Array(count);
    for (let i = 0; i < count; i += 1) {
      const b = this.start + i;
      const cell = document.createElement("div");
      cell.className = "cell";
      cell.dataset.block = String(b);
      cell.setAttribute("role", "option");
      cell.setAttribute("aria-selected", "false");
      cell.tabIndex = -1;
      frag.appendChild(cell);
      this.cells[i] = cell;
    }
    this.root.replaceChildren(frag);
    this._fresh();
  }

  /** The same number of cells as before (a new run, a window moved): the elements are kept, renumbered
   * and described afresh by the next `update` (building 2,048 elements again costs a run ~10 ms, and the
   * browser their style and layout). */
  _reuse() {
    for (let i = 0; i < this.cells.length; i += 1) {
      const cell = this.cells[i];
      cell.dataset.block = String(this.start + i);
      if (cell.classList.contains("selected")) {
        cell.classList.remove("selected");
        cell.setAttribute("aria-selected", "false");
      }
    }
    if (this.tabStop) this.tabStop.tabIndex = -1;
    this._fresh();
  }

  _fresh() {
    const n = this.track.numBlocks;
    const count = this.cells.length;
    this.tabStop = null;
    this.fresh = true;
    this.pending = new Map(); // cell index -> the block it must describe (see `update`)
    this.sigs = new Array(count).fill("");
    this.cols = 0;
    this.geom = null;
    if (this.windowed) {
      this.caption.textContent = `Showing blocks P_${int(this.start)}–P_${int(this.start + count - 1)} of ${int(n)}` +
        " (click the overview, or Page Up / Down past the edge, to move the window)";
    }
  }

  /** Where cell i sits (CSS pixels within the grid), measured once per layout from the elements. */
  _geometry() {
    if (this.geom) return this.geom;
    const c = this.cells;
    if (!c.length) return null;
    const size = c[0].offsetWidth;
    const x0 = c[0].offsetLeft;
    const y0 = c[0].offsetTop;
    const cols = this._columns();
    const dx = c.length > 1 && cols > 1 ? c[1].offsetLeft - x0 : size;
    const dy = c.length > cols ? c[cols].offsetTop - y0 : size;
    const rows = Math.ceil(c.length / cols);
    const w = this.root.clientWidth;
    const h = y0 + (rows - 1) * dy + size + y0;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.width = `${w}px`;
    this.canvas.style.height = `${h}px`;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const cls = this.root.className;
    this.sprites = new Map(); // a cell's look -> its canvas (sizes change with the geometry)
    this.geom = { size, x0, y0, dx, dy, cols, ctx, w, h,
      big: cls.includes("size-l"), medium: cls.includes("size-m"), radius: size >= 20 ? 5 : 2 };
    return this.geom;
  }

  /** Paint a cell's look at (x, y) on ctx: its state's fill, pattern, border, glyph and badge, as the
   * legend shows (the block id label aside: `_drawMany` writes it). Small cells (`!g.big && !g.medium`)
   * free, private and cached are plain squares. */
  _paint(ctx, x, y, blk, g) {
    const { size, radius } = g;
    // A hybrid model's held or cached block takes its group's colours.
    const gc = this.groupColors && blk.group >= 0 ? this.groupColors[blk.group] : null;
    const c = gc ? { ...this.colors, private: gc.main, shared: gc.main, cached: gc.main } : this.colors;
    const st = blk.state;
    if (blk.filling) {
      this._paintFilling(ctx, x, y, blk, g, gc);
      return;
    }
    if (!g.big && !g.medium && (st === "free" || st === "private" || st === "cached")) {
      this._paintSmall(ctx, x, y, blk, size, c, gc);
      return;
    }
    const path = (inset) => {
      ctx.beginPath();
      ctx.roundRect(x + inset, y + inset, size - 2 * inset, size - 2 * inset, Math.max(0, radius - inset));
    };
    const stripes = (a, bColor, period, dir) => {
      ctx.save();
      path(0);
      ctx.clip();
      ctx.fillStyle = a;
      ctx.fillRect(x, y, size, size);
      ctx.strokeStyle = bColor;
      ctx.lineWidth = period / 2;
      ctx.beginPath();
      for (let o = -size; o < 2 * size; o += period) {
        if (dir > 0) {
          ctx.moveTo(x + o, y + size);
          ctx.lineTo(x + o + size, y);
        } else {
          ctx.moveTo(x + o, y);
          ctx.lineTo(x + o + size, y + size);
        }
      }
      ctx.stroke();
      ctx.restore();
    };
    const border = (color, width, dash = null) => {
      ctx.save();
      path(width / 2);
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      if (dash) ctx.setLineDash(dash);
      ctx.stroke();
      ctx.restore();
    };
    const glyph = (text, color) => {
      if (!g.big && !g.medium) return;
      ctx.fillStyle = color;
      ctx.font = `${Math.round(size * 0.45)}px ui-sans-serif, system-ui, sans-serif`;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(text, x + size / 2, y + size / 2 + 1);
    };
    if (st === "private") {
      path(0);
      ctx.fillStyle = gc ? gc.empty : "#1b2b48";
      ctx.fill();
      const fill = this._fill(blk);
      if (fill > 0) {
        ctx.save();
        path(0);
        ctx.clip();
        ctx.fillStyle = c.private;
        ctx.fillRect(x, y + size * (1 - fill), size, size * fill);
        ctx.restore();
      }
      border(gc ? gc.border : "#6f9fff", 1);
      if (gc && this.track.groups[blk.group].kind === "mamba") glyph("S", "#1b1020");
    } else if (st === "shared") {
      stripes(c.shared, gc ? gc.dark : "#8250c9", 10, 1);
      border(gc ? "#ffffff" : "#e3ccff", 2);
    } else if (st === "cached") {
      path(0);
      ctx.fillStyle = gc ? gc.empty : "rgba(227, 168, 43, 0.14)";
      ctx.fill();
      border(c.cached, 2, [3, 2]);
      glyph("↺", c.cached);
    } else if (st === "null") {
      stripes("#3a3f47", "#2a2e34", 6, -1);
      border("#70757d", 1);
      glyph("∅", "#c7ccd4");
    } else {
      path(0);
      ctx.fillStyle = c.free;
      ctx.fill();
      border("#3b4555", 1, [1, 1.5]);
    }
    if (st === "shared" && (g.big || g.medium)) {
      // The ref-count badge.
      const r = 7;
      const bx = x + size - 1 - r;
      const by = y + size - 1 - r;
      ctx.beginPath();
      ctx.arc(bx, by, r, 0, 2 * Math.PI);
      ctx.fillStyle = "#fff";
      ctx.fill();
      ctx.fillStyle = "#3b1a6e";
      ctx.font = "bold 10px ui-sans-serif, system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(String(blk.ref_cnt), bx, by + 1);
    }
  }

  /** A block a CPU-tier load in flight is filling: allocated, but its KV not there yet, so drawn empty
   * (no fill of computed KV), hatched in the loading colour with a solid border of it (a hybrid model's:
   * its group's colour, the group a block belongs to being told by colour) and, on larger cells, a "↓"
   * (arriving over the host link). */
  _paintFilling(ctx, x, y, blk, g, gc) {
    const { size, radius } = g;
    const color = this.colors.filling;
    const round = (inset) => {
      ctx.beginPath();
      ctx.roundRect(x + inset, y + inset, size - 2 * inset, size - 2 * inset, Math.max(0, radius - inset));
    };
    ctx.save();
    round(0);
    ctx.clip();
    ctx.fillStyle = gc ? gc.empty : "#1b2b48";
    ctx.fillRect(x, y, size, size);
    const period = size >= 20 ? 7 : 5;
    ctx.strokeStyle = color;
    ctx.globalAlpha = 0.55;
    ctx.lineWidth = size >= 20 ? 1.5 : 1;
    ctx.beginPath();
    for (let o = -size; o < 2 * size; o += period) {
      ctx.moveTo(x + o, y);
      ctx.lineTo(x + o + size, y + size);
    }
    ctx.stroke();
    ctx.restore();
    const width = size >= 12 ? 2 : 1;
    ctx.save();
    round(width / 2);
    ctx.strokeStyle = gc ? gc.border : color;
    ctx.lineWidth = width;
    ctx.stroke();
    ctx.restore();
    if (g.big || g.medium) {
      // The glyph on a disc of the cell's empty colour, readable over the hatching.
      const r = size * 0.26;
      ctx.beginPath();
      ctx.arc(x + size / 2, y + size / 2, r, 0, 2 * Math.PI);
      ctx.fillStyle = gc ? gc.empty : "#1b2b48";
      ctx.fill();
      ctx.fillStyle = color;
      ctx.font = `bold ${Math.round(size * 0.42)}px ui-sans-serif, system-ui, sans-serif`;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("↓", x + size / 2, y + size / 2 + 1);
    }
  }

  /** How full a block's cell is drawn: its tokens of its group's block size (a state block: full). */
  _fill(blk) {
    const t = this.track;
    if (t.groups && blk.group >= 0 && t.groups[blk.group].kind === "mamba") return 1;
    return Math.max(0, Math.min(1, blk.num_tokens / t.groupBlockSize(blk.group)));
  }

  _paintSmall(ctx, x, y, blk, size, c = this.colors, gc = null) {
    const square = (fill, stroke, width, dash) => {
      ctx.fillStyle = fill;
      ctx.fillRect(x, y, size, size);
      ctx.beginPath();
      ctx.rect(x + width / 2, y + width / 2, size - width, size - width);
      ctx.strokeStyle = stroke;
      ctx.lineWidth = width;
      ctx.setLineDash(dash);
      ctx.stroke();
      ctx.setLineDash([]);
    };
    if (blk.state === "free") square(c.free, "#3b4555", 1, [1, 1.5]);
    else if (blk.state === "cached") {
      ctx.clearRect(x, y, size, size);
      square(gc ? gc.empty : "rgba(227, 168, 43, 0.14)", c.cached, 2, [3, 2]);
    } else {
      ctx.fillStyle = gc ? gc.empty : "#1b2b48";
      ctx.fillRect(x, y, size, size);
      const f = this._fill(blk);
      if (f > 0) {
        ctx.fillStyle = c.private;
        ctx.fillRect(x, y + size * (1 - f), size, size * f);
      }
      ctx.beginPath();
      ctx.rect(x + 0.5, y + 0.5, size - 1, size - 1);
      ctx.strokeStyle = gc ? gc.border : "#6f9fff";
      ctx.lineWidth = 1;
      ctx.stroke();
    }
  }

  /** The look of a cell as a small canvas, drawn once per distinct look (state, tokens held when
   * private, ref count when its badge shows) and then copied: one blit per changed cell instead of its
   * paths, clips, dashes and text, which a software canvas rasterizes slowly. */
  _sprite(blk, g) {
    const st = blk.state;
    const badge = st === "shared" && (g.big || g.medium);
    const key = `${st}|${st === "private" && !blk.filling ? this._fill(blk) : ""}|${badge ? blk.ref_cnt : ""}|` +
      `${blk.group ?? -1}|${blk.filling ? "filling" : ""}`;
    let sprite = this.sprites.get(key);
    if (sprite === undefined) {
      const dpr = window.devicePixelRatio || 1;
      const side = g.size + 2;
      sprite = document.createElement("canvas");
      sprite.width = Math.round(side * dpr);
      sprite.height = Math.round(side * dpr);
      const ctx = sprite.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      this._paint(ctx, 1, 1, blk, g);
      this.sprites.set(key, sprite);
    }
    return sprite;
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

  /** Remember the blocks that changed (a Set of ids, or null: all) for a later `update`: the grid is off
   * screen, so a scrub need not draw it. */
  defer(changed) {
    if (this.deferred === undefined) this.deferred = changed === null ? null : new Set(changed);
    else if (this.deferred !== null) {
      if (changed === null) this.deferred = null;
      else for (const b of changed) this.deferred.add(b);
    }
  }

  /** Whether `defer` holds changes the canvas does not show yet. */
  hasDeferred() {
    return this.deferred !== undefined;
  }

  /** Draw what `defer` kept. */
  catchUp() {
    if (this.deferred !== undefined) this.update(new Set());
  }

  /** Redraw the cells of the changed blocks (a Set of ids), or every cell (null); with what `defer`
   * kept. */
  update(changed) {
    if (this.deferred !== undefined) {
      const kept = this.deferred;
      this.deferred = undefined;
      if (kept === null || changed === null) changed = null;
      else for (const b of kept) changed.add(b);
    }
    const t = this.track;
    const bs = t.blockSize;
    const todo = [];
    const paint = (b) => {
      const i = b - this.start;
      if (i < 0 || i >= this.cells.length) return;
      // What the cell shows, read from the replay's columns (no row built).
      const st = t.stateOf(b);
      const blk = { block_id: b, state: st, ref_cnt: t.refOf(b), num_tokens: t.tokens[b], group: t.groupOf(b),
        filling: t.isFilling(b) };
      // Touch the canvas and the element only where the block really changed (a jump marks every block).
      const sig = `${st}|${blk.ref_cnt}|${blk.num_tokens}|${blk.group}|${blk.filling}`;
      if (this.sigs[i] === sig) return;
      this.sigs[i] = sig;
      todo.push(blk);
      if (fresh) this._describe(i, blk);
      else this.pending.set(i, blk);
    };
    // A new bundle's (or window's) cells get their descriptions now; while scrubbing they follow in
    // `syncCells`, once it pauses (the canvas shows each step at once).
    const fresh = this.fresh;
    this.fresh = false;
    if (changed === null) {
      this.geom = null; // a full redraw re-measures (after a new bundle, a resize, a window move)
      this.sigs.fill("");
      for (let i = 0; i < this.cells.length; i += 1) paint(this.start + i);
    } else {
      for (const b of changed) paint(b);
    }
    this._drawMany(todo);
    if (fresh) this.pending.clear();
    if (this.windowed && (changed === null || changed.size !== 0)) {
      drawPoolStrip(this.overviewCanvas, t, this.colors, [this.start, this.start + this.cells.length]);
    }
    this._ensureTabStop();
  }

  /** Cell i's element describes its block: data-state, data-ref, data-tokens, data-filling, the
   * aria-label, and a title on a block a CPU-tier load is filling. */
  _describe(i, blk) {
    const cell = this.cells[i];
    cell.dataset.state = blk.state;
    cell.dataset.ref = String(blk.ref_cnt);
    cell.dataset.tokens = String(blk.num_tokens);
    cell.dataset.filling = String(blk.filling);
    if (blk.filling) cell.title = `P_${blk.block_id}: ${FILLING_TEXT}`;
    else if (cell.title) cell.removeAttribute("title");
    const filling = blk.filling ? `, ${FILLING_TEXT}` : "";
    const groups = this.track.groups;
    if (groups) {
      cell.dataset.group = String(blk.group);
      const g = blk.group >= 0 ? groups[blk.group] : null;
      const what = g === null ? "" : `group ${blk.group} (${g.label}), `;
      const tokens = g && g.kind === "mamba" ? `a state of ${blk.num_tokens} tokens`
        : `${blk.num_tokens} of ${this.track.groupBlockSize(blk.group)} tokens`;
      cell.setAttribute("aria-label", `P_${blk.block_id}: ${what}${blk.state}, ref ${blk.ref_cnt}, ${tokens}${filling}`);
      return;
    }
    cell.setAttribute("aria-label",
      `P_${blk.block_id}: ${blk.state}, ref ${blk.ref_cnt}, ${blk.num_tokens} of ${this.track.blockSize} tokens${filling}`);
  }

  /** Whether some cell's element still describes an earlier step. */
  hasPending() {
    return this.pending.size > 0;
  }

  /** Bring the cells' elements up to the step the canvas shows. */
  syncCells() {
    for (const [i, blk] of this.pending) this._describe(i, blk);
    this.pending.clear();
  }

  /** Draw cells: each its look's sprite (`_sprite`), then, on large cells, its block id. */
  _drawMany(blocks) {
    const g = this._geometry();
    if (!g || !blocks.length) return;
    const { ctx, size } = g;
    const side = size + 2;
    for (const blk of blocks) {
      const i = blk.block_id - this.start;
      const x = g.x0 + (i % g.cols) * g.dx;
      const y = g.y0 + Math.floor(i / g.cols) * g.dy;
      ctx.clearRect(x - 1, y - 1, side, side);
      ctx.drawImage(this._sprite(blk, g), x - 1, y - 1, side, side);
    }
    if (g.big) {
      ctx.fillStyle = "rgba(255, 255, 255, 0.75)";
      ctx.font = "10px ui-monospace, SFMono-Regular, Menlo, monospace";
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      for (const blk of blocks) {
        const i = blk.block_id - this.start;
        ctx.fillText(String(blk.block_id), g.x0 + (i % g.cols) * g.dx + 3, g.y0 + Math.floor(i / g.cols) * g.dy + 2);
      }
    }
  }

  _ensureTabStop() {
    const i = this.selected >= this.start && this.selected < this.start + this.cells.length
      ? this.selected - this.start : 0;
    const stop = this.cells[i];
    if (stop === this.tabStop) return;
    if (this.tabStop) this.tabStop.tabIndex = -1;
    if (stop) stop.tabIndex = 0;
    this.tabStop = stop;
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
    }
    this.selected = b;
    const cell = this.cells[b - this.start];
    if (cell) {
      cell.classList.add("selected");
      cell.setAttribute("aria-selected", "true");
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
    this.geom = null;
  }
}
