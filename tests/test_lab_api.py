"""The lab's HTTP API (kvsim.lab.server) through Starlette's test client: every route, every class of bad
parameter answered 4xx with a JSON message naming the field, a fuzz over the OpenAPI schema's parameters
that finds no 5xx, and `kvsim lab` started and stopped with Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import warnings

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import kvsim.lab

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from kvsim.lab.bundle import COLUMN_DTYPES, column, decode, encode
from kvsim.lab.server import create_app, openapi


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def test_presets_route(client):
    r = client.get("/api/presets")
    assert r.status_code == 200
    body = r.json()
    names = [p["name"] for p in body["presets"]]
    assert names[:4] == ["copilot", "chat", "parallel-sampling", "memory-pressure"]
    assert "mooncake" in names
    assert set(body["limits"]) >= {"max_requests", "max_blocks", "max_events", "max_steps"}
    assert "vllm" in body["options"]["policies"]
    assert 16 in body["options"]["block_sizes"]
    # Each preset says what its clients ask for (what orca-max reserves).
    asks = {p["name"]: p.get("max_tokens") for p in body["presets"] if p["available"]}
    assert asks["copilot"] == "max_tokens 128 each"
    assert "2,048 − prompt" in asks["chat"]
    # The presets in the page's order: the hybrid models' after the others, the CPU tier's beside their kin.
    assert names == [
        "copilot",
        "chat",
        "parallel-sampling",
        "memory-pressure",
        "cpu-tier",
        "mooncake",
        "sliding-window",
        "sliding-window-tier",
        "state-layers",
        "state-layers-caching",
        "state-layers-tier",
    ]


def test_run_route_is_the_bundle(client):
    r = client.get(
        "/api/run", params={"preset": "copilot", "block_size": "32", "enable_prefix_caching": "false"}
    )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = decode(r.content)
    assert body["query"]["block_size"] == 32
    assert body["query"]["enable_prefix_caching"] is False
    expected = kvsim.lab.bundle("copilot", block_size=32, enable_prefix_caching=False)
    for key in ("num_steps", "requests", "model", "bytes_per_block"):
        assert body[key] == expected[key]
    for group in ("metrics", "events", "blocks", "seqs"):
        got, want = body["paged"][group], expected["paged"][group]
        assert set(got) == set(want), group
        for name, values in want.items():
            assert np.array_equal(got[name], np.asarray(values), equal_nan=True), (group, name)
    # The same run again is the same bytes (the server keeps the encoded bundle).
    again = client.get(
        "/api/run", params={"preset": "copilot", "enable_prefix_caching": "false", "block_size": "32"}
    )
    assert again.content == r.content


def test_bundle_columns_are_typed_and_narrow(client):
    """Numbers arrive as typed columns ({"dtype", "base64"} of little-endian bytes), each in the
    narrowest dtype that holds it; integers past int32 as float64, exactly."""
    raw = json.loads(client.get("/api/run", params={"preset": "copilot"}).content)
    cols = raw["paged"]["events"]
    assert set(cols) >= {"step", "kind", "seq", "block", "count"}
    for c in cols.values():
        assert set(c) == {"dtype", "base64"}
        assert c["dtype"] in COLUMN_DTYPES
    assert cols["kind"]["dtype"] in ("int8", "uint8")
    b = kvsim.lab.bundle("copilot")
    big = raw["paged"]["metrics"]["paged_allocated_bytes"]
    assert big["dtype"] == "int32"  # 64 blocks of 16 tokens of 128 KiB: under 2**31 bytes
    assert (
        decode(json.dumps(big)).tolist()
        == np.asarray(b["paged"]["metrics"]["paged_allocated_bytes"]).tolist()
    )
    with pytest.raises(ValueError, match="past float64"):
        column(np.array([2**60], np.int64))
    past = json.loads(encode(np.array([-1, 2**31], np.int64)))
    assert past["dtype"] == "float64"
    assert decode(json.dumps(past)).tolist() == [-1, 2**31]


def test_state_route_is_the_snapshot(client):
    r = client.get("/api/state", params={"preset": "copilot", "step": "1"})
    assert r.status_code == 200
    assert r.json() == json.loads(json.dumps(kvsim.lab.snapshot("copilot", step=1)))


@pytest.mark.parametrize("preset", ["copilot", "memory-pressure"])
def test_state_without_a_step_is_the_opening_step(client, preset):
    """`/api/state` with no step answers for the step the page opens on, not the run's end (where every
    preset has finished and every number is 0)."""
    opening = kvsim.lab.preset(preset)[2]
    body = client.get("/api/state", params={"preset": preset}).json()
    assert body["step"] == opening
    assert body["paged_allocated_bytes"] > 0
    assert body == json.loads(json.dumps(kvsim.lab.snapshot(preset, step=opening)))


def test_a_contiguous_baseline_given_as_policy_is_refused(client):
    """`policy` is the paged track's: a contiguous baseline there is refused, naming the parameter that
    takes it (it once became the contiguous_policy silently)."""
    r = client.get("/api/run", params={"preset": "copilot", "policy": "orca-max"})
    assert r.status_code == 400
    body = r.json()
    assert body["field"] == "policy"
    assert "contiguous_policy=orca-max" in body["error"]
    assert client.get("/api/presets").json()["options"]["policies"] == ["vllm", "reserve"]


def test_a_run_too_long_for_the_page_says_what_runs(client):
    """A run past a cap answers 413 in plain words with a change that runs, and that change does run."""
    gib = 2**30
    r = client.get(
        "/api/run", params={"preset": "chat", "kv_cache_bytes": str(gib), "contiguous_policy": "orca-max"}
    )
    assert r.status_code == 413
    body = r.json()
    assert body["field"] == "steps"
    assert "the contiguous run (policy 'orca-max') takes" in body["error"]
    assert "more than the 50,000 the page replays" in body["error"]
    m = re.search(r"a KV cache of ([\d.]+) GiB runs", body["error"])
    assert m, body["error"]
    fixed = {
        "preset": "chat",
        "kv_cache_bytes": str(int(float(m.group(1)) * gib)),
        "contiguous_policy": "orca-max",
    }
    assert client.get("/api/state", params=fixed).status_code == 200


def test_openapi_and_page(client):
    schema = client.get("/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    names = {p["name"] for p in schema["paths"]["/api/state"]["get"]["parameters"]}
    assert {"preset", "block_size", "step", "enable_prefix_caching"} <= names
    page = client.get("/")
    assert page.status_code in (200, 404)  # the page is the frontend's; 404 JSON if absent
    if page.status_code == 404:
        assert "error" in page.json()


@pytest.mark.parametrize(
    ("params", "field", "status"),
    [
        ({"preset": "nope"}, "preset", 400),  # unknown preset
        ({"blocksize": "16"}, "blocksize", 400),  # unknown name
        ({"block_size": "sixteen"}, "block_size", 400),  # wrong type
        ({"enable_prefix_caching": "maybe"}, "enable_prefix_caching", 400),
        ({"block_size": "0"}, "block_size", 400),  # out of range
        ({"block_size": "99999999999999999999999"}, "block_size", 400),
        ({"num_blocks": "1"}, "num_blocks", 400),
        ({"num_blocks": "1000000"}, "num_blocks", 400),  # more blocks than the lab's cap
        ({"kv_cache_bytes": "4194303"}, "kv_cache_bytes", 400),  # under 2 blocks of 2 MiB
        ({"kv_cache_bytes": str(2**40)}, "kv_cache_bytes", 400),  # more blocks than the lab's cap
        ({"kv_cache_bytes": str(2**27), "num_blocks": "64"}, "num_blocks", 400),  # both size the pool
        ({"model": "gpt-9"}, "model", 400),
        ({"policy": "lru"}, "policy", 400),
        ({"policy": "reserve", "preemption": "swap"}, "preemption", 400),  # invalid combination
        ({"policy": "orca-max", "contiguous_policy": "static"}, "policy", 400),
        ({"block_size": "16", "preset": "copilot", "step": "-1"}, "step", 400),  # step out of range
        ({"step": "51"}, "step", 400),
        ({"step": "x"}, "step", 400),
        ({"preset": ["copilot", "chat"]}, "preset", 400),  # given twice
        ({"preset": "chat", "block_size": "1"}, "events", 413),  # a run too large for the page
        # A CPU tier where the engine does not model one, or of no chunk: refused naming the tier.
        ({"kv_offloading_bytes": str(2**26), "policy": "reserve"}, "kv_offloading_bytes", 400),
        ({"preset": "memory-pressure", "kv_offloading_bytes": str(2**26)}, "kv_offloading_bytes", 400),
        ({"preset": "state-layers", "kv_offloading_bytes": str(2**26)}, "kv_offloading_bytes", 400),
        # (the field the client changed, not the preset's tier it conflicts with)
        ({"preset": "cpu-tier", "enable_prefix_caching": "false"}, "enable_prefix_caching", 400),
        ({"kv_offloading_bytes": "4096"}, "kv_offloading_bytes", 400),  # under one 2 MiB chunk
        ({"kv_offloading_bytes": "-1"}, "kv_offloading_bytes", 400),
        ({"kv_offloading_bytes": "1.5"}, "kv_offloading_bytes", 400),
        # Integers are ASCII digits: Python's int() read '1_0' as 10, '+1' and ' 1' as 1, Arabic-Indic ٣ as 3.
        ({"step": "1_0"}, "step", 400),
        ({"step": "+1"}, "step", 400),
        ({"step": " 1"}, "step", 400),
        ({"step": "\u0663"}, "step", 400),
        ({"num_blocks": "\uff18"}, "num_blocks", 400),
        ({"preset": "A" * 10_000}, "preset", 400),  # refused without echoing it
        # A combination refused names the field the client gave, not the preset's value it conflicts with.
        ({"preset": "sliding-window", "sampling": "fork-cow"}, "sampling", 400),
        ({"preset": "memory-pressure", "policy": "reserve"}, "policy", 400),
    ],
)
def test_bad_parameters_answer_4xx_naming_the_field(client, params, field, status):
    route = "/api/state" if "step" in params else "/api/run"
    r = client.get(route, params=params)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["field"] == field
    assert isinstance(body["error"], str)
    assert "Traceback" not in r.text


@pytest.mark.parametrize("given", [2**50 + 1, 10**17, 2**62 + 1, 10**40])
def test_a_memory_past_the_page_is_refused_by_the_bound_that_applies(client, given):
    """A pool or tier far past the page's caps is refused by the cap that applies, naming the size that
    runs ("give it at most 128.0 GiB"), not by the schema's 2**50 bytes (which the page quoted, rounded, as
    "between 0 MiB and 1073740000 MiB", user53 #6) nor as "out of range" past 2**62."""
    from kvsim.lab.query import LIMITS, MAX_TIER_CHUNKS, layout, resolve
    from kvsim.model.units import fmt_bytes

    cfg = resolve("copilot").paged
    chunk = cfg.kv_offloading_chunk_bytes
    block = layout(cfg.model, cfg.block_size).bytes_per_block
    for field, says in (
        ("kv_offloading_bytes", f"more than the page draws ({MAX_TIER_CHUNKS:,}): give it at most "
         f"{fmt_bytes(MAX_TIER_CHUNKS * chunk)}"),
        ("kv_cache_bytes", f"more than the page draws (max_blocks {LIMITS['max_blocks']:,}): give the KV cache "
         f"at most {fmt_bytes(LIMITS['max_blocks'] * block)}"),
    ):  # fmt: skip
        r = client.get("/api/run", params={"preset": "copilot", field: str(given)})
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["field"] == field
        assert body["error"].startswith(f"{field} {given} ("), body["error"]
        assert says in body["error"], body["error"]
        assert "between" not in body["error"]


@pytest.mark.parametrize("digits", [100, 307, 309])
def test_a_memory_of_hundreds_of_digits_is_refused_by_its_cap_and_shown_by_its_length(client, digits):
    """The page sends a size typed as 1e300 MiB as its 307 digits of bytes: refused by the cap that applies
    (it read "kv_offloading_bytes is 307 characters long, more than any value takes", which the page showed
    as it was), the size and its count shown by their length, not echoed; past `MAX_SIZE_DIGITS` digits, or
    any other parameter past `MAX_VALUE_CHARS`, the value is refused by its length."""
    from kvsim.lab.query import MAX_TIER_CHUNKS
    from kvsim.lab.server import MAX_SIZE_DIGITS, MAX_VALUE_CHARS

    assert MAX_VALUE_CHARS < 307 <= MAX_SIZE_DIGITS
    given = "1" + "0" * (digits - 1)
    for field, says in (
        ("kv_offloading_bytes", f"more than the page draws ({MAX_TIER_CHUNKS:,}): give it at most "),
        ("kv_cache_bytes", "give the KV cache at most "),
    ):
        r = client.get("/api/run", params={"preset": "copilot", field: given})
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["field"] == field
        assert body["error"].startswith(f"{field} 100000... (a {digits}-digit size"), body["error"]
        assert " holds over 10^" in body["error"], body["error"]
        assert says in body["error"], body["error"]
        assert len(r.text) < 400
    too_long = client.get("/api/run", params={"kv_offloading_bytes": "1" * (MAX_SIZE_DIGITS + 1)})
    assert (
        too_long.json()["error"]
        == f"kv_offloading_bytes is {MAX_SIZE_DIGITS + 1} characters long, more than any value takes"
    )
    other = client.get("/api/run", params={"num_blocks": "1" * 300})
    assert other.json()["error"] == "num_blocks is 300 characters long, more than any value takes"


def test_a_run_past_the_caps_is_413(client, monkeypatch):
    from kvsim.lab import bundle as _  # noqa: F401

    caps = sys.modules["kvsim.lab.bundle"].LIMITS
    monkeypatch.setitem(caps, "max_events", 10)
    # A configuration no other test asks for: the server keeps recent runs, checked when they ran.
    r = client.get("/api/run", params={"preset": "memory-pressure", "placement": "buddy"})
    assert r.status_code == 413
    assert "max_events" in r.json()["error"]


def _schema_params() -> dict[str, dict]:
    ops = openapi()["paths"]["/api/state"]["get"]["parameters"]
    return {p["name"]: p["schema"] for p in ops}


SCHEMA = _schema_params()
FAST_PRESETS = ["copilot", "parallel-sampling", "memory-pressure", "cpu-tier"]  # the fuzz stays quick


def _value(name: str, schema: dict) -> st.SearchStrategy[str]:
    junk = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
    if name == "preset":
        return st.one_of(st.sampled_from(FAST_PRESETS), junk)
    if name == "kv_offloading_bytes":  # CPU tiers of a few chunks of a 16-token Llama-3-8B block, and junk
        return st.one_of(st.sampled_from([0, 2**21, 2**23, 2**26]).map(str), junk)
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), junk)
    if schema["type"] == "integer":
        lo, hi = schema.get("minimum", -5), schema.get("maximum", 100)
        hi = min(hi, 4096)  # valid sizes, kept small so that a run stays fast
        return st.one_of(st.integers(lo - 3, hi + 3).map(str), st.integers().map(str), junk)
    if schema["type"] == "boolean":
        return st.one_of(st.sampled_from(["true", "false", "1", "0"]), junk)
    return junk


queries = st.fixed_dictionaries({}, optional={name: _value(name, s) for name, s in SCHEMA.items()})


@settings(max_examples=int(os.environ.get("KVSIM_LAB_FUZZ", "60")), deadline=None)
@given(queries, st.sampled_from(["/api/run", "/api/state"]))
def test_fuzz_finds_no_5xx(client, query, route):
    if route == "/api/run":
        query.pop("step", None)
    r = client.get(route, params=query)
    assert r.status_code < 500, (query, r.text[:300])
    if r.status_code >= 400:
        body = r.json()
        assert body["field"]
        assert body["error"]


def _start(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvsim.cli", "lab", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"http://\S+/", line)
    assert m, line
    # The URL is printed before uvicorn has started (and taken over Ctrl-C): wait until it answers, so that a
    # test's Ctrl-C meets the running server (on a loaded machine it once met the start-up: exit -2).
    local = m.group(0).replace("0.0.0.0", "127.0.0.1")
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(local + "api/presets", timeout=5) as r:
                r.read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.1)
    return proc, m.group(0)


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("kvsim lab did not stop within 30 s of Ctrl-C")
    assert proc.returncode == 0, err
    return out, err


def test_kvsim_lab_serves_and_stops_on_ctrl_c():
    proc, url = _start("--port", "0")
    try:
        assert url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "api/presets", timeout=10) as r:
                    body = json.load(r)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert body["presets"][0]["name"] == "copilot"
    finally:
        out, err = _stop(proc)
    assert "stopped" in out
    assert "Traceback" not in err


def test_kvsim_lab_warns_off_loopback_and_refuses_bad_ports():
    proc, url = _start("--host", "0.0.0.0", "--port", "0")
    assert url.startswith("http://0.0.0.0:")
    _, err = _stop(proc)
    assert "WARNING" in err
    assert "not loopback" in err
    bad = subprocess.run(
        [sys.executable, "-m", "kvsim.cli", "lab", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0
    assert "port 70000" in bad.stderr


def test_unknown_endpoints_and_methods_answer_json(client: TestClient) -> None:
    """Starlette's own 404 and 405 under /api/ are JSON with the error and the field, like kvsim's."""
    r = client.get("/api/no-such-thing")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["field"] == "path"
    assert "/api/no-such-thing" in r.json()["error"]
    r = client.delete("/api/presets")
    assert r.status_code == 405
    assert r.json()["field"] == "method"
    assert "DELETE" in r.json()["error"]
    assert set(r.headers["allow"].split(", ")) == {"GET", "HEAD"}  # (HTTP requires a 405 to say what is)
    r = client.get("/no-such-page")
    assert r.status_code == 404
    assert r.json() == {"error": r.json()["error"], "field": "path"}
    assert "/no-such-page" in r.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "status", "field"),
    [
        ("GET", "/static/nope.js", 404, "path"),
        ("GET", "/static/", 404, "path"),
        ("GET", "/static/js", 404, "path"),  # a folder, not a file
        ("DELETE", "/static/x", 405, "method"),
        ("POST", "/static/index.html", 405, "method"),
    ],
)
def test_static_errors_answer_json(
    client: TestClient, method: str, path: str, status: int, field: str
) -> None:
    """The mounted StaticFiles' 404 and 405 were text/plain "Not Found"; they are JSON like the API's."""
    r = client.request(method, path)
    assert r.status_code == status
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["field"] == field
    assert path in body["error"]
    r = client.get("/static", follow_redirects=True)  # redirected to /static/, a folder
    assert r.status_code == 404
    assert r.json()["field"] == "path"


def test_an_error_is_short_and_names_the_block_a_state_layer_sets(client: TestClient) -> None:
    """A value too long for any parameter is refused without echoing it back; a KV cache too small for a
    hybrid model with state layers names its engine's block (544 tokens for Qwen3-Next at block_size 16,
    which no smaller block size changes), not the 16 asked for."""
    r = client.get("/api/state", params={"preset": "x" * 5000})
    assert r.status_code == 400
    assert len(r.text) < 300
    r = client.get("/api/state", params={"preset": "state-layers", "kv_cache_bytes": "1"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "blocks of 544 tokens (block_size 16 raised to hold a state layer's page)" in err, err
    assert err.endswith("or choose a smaller model"), err


def test_presets_takes_no_parameters(client: TestClient) -> None:
    r = client.get("/api/presets?x=1")
    assert r.status_code == 400
    assert r.json() == {"error": "parameter 'x': /api/presets takes no parameters", "field": "x"}
    r = client.get("/openapi.json?x=1")  # (it answered 200, ignoring it)
    assert r.status_code == 400
    assert r.json() == {"error": "parameter 'x': /openapi.json takes no parameters", "field": "x"}


def test_an_address_that_cannot_be_listened_on_warns_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """A host that cannot be bound is one error, without the not-loopback warning first."""
    from kvsim.errors import InvalidArgumentError
    from kvsim.lab.server import serve

    with pytest.raises(InvalidArgumentError, match=r"999\.1\.1\.1"):
        serve("999.1.1.1", 0)
    assert "WARNING" not in capsys.readouterr().err


def test_every_model_the_page_offers_runs():
    """The page's model list holds only models the lab can draw: Gemma 4 (attention groups of 16- and
    32-token blocks at every block size) was offered and then refused whenever chosen."""
    from kvsim.lab.bundle import options, resolve

    models = options()["models"]
    assert "gemma-3-12b" in models
    assert not [m for m in models if m.startswith("gemma-4")]
    for m in models:
        resolve("copilot", model=m, kv_cache_bytes=2**31)  # (raises for one it cannot draw)


def test_a_request_the_server_cannot_parse_is_answered_in_json():
    """uvicorn answered a malformed request with text/plain "Invalid HTTP request received."; every other
    error of the lab is a JSON object with the error and the field."""
    import socket

    proc, url = _start("--port", "0")
    try:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while True:  # (the URL is printed before uvicorn listens)
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with sock:
            sock.sendall(b"GET /api/presets HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    finally:
        _stop(proc)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"content-type: application/json" in head.lower()
    answer = json.loads(body)
    assert answer["field"] == "request"
    assert "Invalid HTTP request" in answer["error"]


def test_a_static_baseline_reserves_the_longest_request_not_the_models_context():
    """The page's contiguous baseline reserves max_model_len a request under `static`: the one the paged
    track was given, else the workload's longest request. With max_model_len defaulting to the model's
    context, it read 131,072 tokens a request for Llama-3.1-8B (a pool of 2 GiB holds 1 / 8 of one): the
    user's max_model_len, not the default, is what the baseline takes."""
    import kvsim
    from kvsim.lab.query import _contiguous_track
    from kvsim.workloads import synthetic

    w = synthetic(50, arrival_rate=5, seed=1)
    paged = kvsim.SimConfig(model="llama-3.1-8b", kv_cache_bytes="2GiB")
    assert paged.max_model_len == 131_072
    longest = int((w.prompt_len + w.output_len).max())
    track = _contiguous_track(paged, w, "static")
    assert track is not None
    assert track.max_model_len == longest < 131_072
    track = _contiguous_track(paged.replace(max_model_len=4096), w, "static")
    assert track is not None
    assert track.max_model_len == 4096
