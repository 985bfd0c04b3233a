// Formatting of the bundle's numbers for display (units, percentages, ids). No arithmetic model lives
// here: values arrive computed by Python; this only chooses how to print them.

const KIB = 1024;
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** Bytes in binary units with three significant digits: 8388608 -> "8.00 MiB". */
export function bytes(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  let x = Math.abs(v);
  let u = 0;
  while (x >= KIB && u < UNITS.length - 1) {
    x /= KIB;
    u += 1;
  }
  const sign = v < 0 ? "−" : "";
  if (u === 0) return `${sign}${x} B`;
  const digits = x >= 100 ? 1 : 2;
  return `${sign}${x.toFixed(digits)} ${UNITS[u]}`;
}

/** A fraction as a percentage: 0.4375 -> "43.8%". */
export function pct(f, digits = 1) {
  if (f === null || f === undefined || Number.isNaN(f)) return "—";
  return `${(f * 100).toFixed(digits)}%`;
}

/** A ratio: 2.1875 -> "2.19×"; infinite (nothing allocated yet) -> "—". */
export function times(m) {
  if (m === null || m === undefined || !Number.isFinite(m)) return "—";
  return `${m.toFixed(m >= 10 ? 1 : 2)}×`;
}

const NUMBER = new Intl.NumberFormat("en-US"); // one formatter: toLocaleString builds one per call

/** An integer with thousands separators (as Number#toLocaleString("en-US") writes it). */
export function int(n) {
  if (n === null || n === undefined) return "—";
  const x = Number(n);
  if (Number.isSafeInteger(x)) {
    const digits = String(Math.abs(x)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return x < 0 ? `-${digits}` : digits;
  }
  return NUMBER.format(x);
}

/** A byte offset in hex, padded to the pool's width: 0x00200000. */
export function hex(v, width = 8) {
  return `0x${Math.round(v).toString(16).toUpperCase().padStart(width, "0")}`;
}

/** Seconds, short. */
export function secs(t) {
  if (t === null || t === undefined) return "—";
  if (t === 0) return "0 s";
  if (t < 1) return `${(t * 1000).toFixed(1)} ms`;
  return `${t.toFixed(3)} s`;
}

/** What a run's times are (the bundle's `time_model`): under "ticks" (no GPU named) every engine step
 * lasts a fixed tick, so a time counts steps and is not a GPU's time. */
export function clockNote(tm) {
  if (!tm) return "";
  if (tm.name === "ticks") {
    return `ticks: ${secs(tm.step_s).replace(".0 ms", " ms")} a step, not a GPU’s time`;
  }
  return `the ${tm.name} time model${tm.gpu ? ` of ${tm.gpu}` : ""}`;
}

/** HTML-escape a string for innerHTML templates. */
export function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

/** Format one metric by the suffix of its name (the bundle's naming convention). */
export function metric(name, v) {
  if (name.endsWith("_bytes")) return bytes(v);
  if (name.endsWith("_fraction") || name.endsWith("_fragmentation")) return pct(v);
  if (name === "concurrency_multiplier") return times(v);
  if (name.endsWith("_s")) return secs(v);
  return int(v);
}
