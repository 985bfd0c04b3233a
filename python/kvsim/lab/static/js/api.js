// The lab server's JSON API (DESIGN.md "Lab"): presets and runs. Errors come back as 4xx with
// {"error": "...", "field": "..."}; they surface as an Error whose message is the server's.

/** Where the last request's time went: until the response's headers (the server's work), then until its
 * body was read (transfer_ms) and parsed, its typed columns decoded (body_ms, both). */
export const lastFetch = { headers_ms: 0, body_ms: 0, transfer_ms: 0, bytes: 0 };

// A typed column (DESIGN.md "Lab", the bundle): {"dtype": ..., "base64": little-endian bytes}.
const ARRAYS = { int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, int32: Int32Array,
  float64: Float64Array };

function bytesOf(text) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
  return out;
}

/** The column as a TypedArray of its dtype. */
export function column(c) {
  const Ctor = ARRAYS[c.dtype];
  const raw = bytesOf(c.base64); // a fresh buffer: aligned for any element size
  return new Ctor(raw.buffer, raw.byteOffset, raw.byteLength / Ctor.BYTES_PER_ELEMENT);
}

function isColumn(v) {
  return v !== null && typeof v === "object" && typeof v.base64 === "string" && v.dtype in ARRAYS;
}

/** Every typed column among the values of the JSON's objects, as a TypedArray (in place). */
export function typedColumns(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  for (const [k, v] of Object.entries(value)) {
    if (isColumn(v)) value[k] = column(v);
    else if (v !== null && typeof v === "object" && !Array.isArray(v)) typedColumns(v);
  }
  return value;
}

async function getJson(url, signal) {
  const t0 = performance.now();
  const res = await fetch(url, { signal, headers: { Accept: "application/json" } });
  const t1 = performance.now();
  let body = null;
  let t2 = t1;
  try {
    const text = await res.text();
    t2 = performance.now();
    body = typedColumns(JSON.parse(text));
  } catch {
    body = null;
  }
  lastFetch.headers_ms = t1 - t0;
  lastFetch.body_ms = performance.now() - t1;
  lastFetch.transfer_ms = t2 - t1;
  lastFetch.bytes = Number(res.headers.get("content-length") || 0);
  if (!res.ok) {
    const msg = body && body.error ? body.error : `${res.status} ${res.statusText}`;
    const err = new Error(msg);
    err.field = body ? body.field : undefined;
    err.status = res.status;
    throw err;
  }
  return body;
}

export function fetchPresets() {
  return getJson("api/presets");
}

let inflight = null;

/** Run a configuration (the preset's values for every parameter left out); cancels a run in flight. */
export function fetchRun(query) {
  if (inflight) inflight.abort();
  inflight = new AbortController();
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    // (a whole number in digits, as the API reads one: String(1e21) is "1e+21")
    if (v !== undefined && v !== null && v !== "" && !Number.isNaN(v)) {
      params.set(k, Number.isInteger(v) ? BigInt(v).toString() : String(v));
    }
  }
  return getJson(`api/run?${params.toString()}`, inflight.signal);
}
