// The lab server's JSON API (DESIGN.md "Lab"): presets and runs. Errors come back as 4xx with
// {"error": "...", "field": "..."}; they surface as an Error whose message is the server's.

async function getJson(url, signal) {
  const res = await fetch(url, { signal, headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
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
