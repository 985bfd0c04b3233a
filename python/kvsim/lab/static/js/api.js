// The lab server's JSON API (DESIGN.md "Lab"): presets and runs. Errors come back as 4xx with
// {"error": "...", "field": "..."}; they surface as an Error whose message is the server's.

/** Where the last request's time went: until the response's headers (the server's work), then until its
 * body was read and parsed (transfer and JSON.parse). */
export const lastFetch = { headers_ms: 0, body_ms: 0, bytes: 0 };

async function getJson(url, signal) {
  const t0 = performance.now();
  const res = await fetch(url, { signal, headers: { Accept: "application/json" } });
  const t1 = performance.now();
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  lastFetch.headers_ms = t1 - t0;
  lastFetch.body_ms = performance.now() - t1;
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
    if (v !== undefined && v !== null && v !== "" && !Number.isNaN(v)) params.set(k, String(v));
  }
  return getJson(`api/run?${params.toString()}`, inflight.signal);
}
