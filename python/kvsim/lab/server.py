"""The lab's HTTP server: a Starlette app over `kvsim.lab.bundle` (DESIGN.md §Lab), served by uvicorn.

Routes: `/` (the page), `/static/...`, `/api/presets`, `/api/run` (a bundle), `/api/state` (a snapshot),
`/pd`, `/api/pd` and `/api/pd/state` (the disaggregated fleet, `kvsim.lab.pd`), `/openapi.json`. Every
bad parameter is answered 400 (or 413 for a run past the caps) with `{"error": "<field> <value> ...", "field": "<field>"}`;
Starlette's own 404 and 405 (an unknown path, a file not under `/static/`, a wrong method) answer JSON in
the same shape (`http_error`); nothing else is caught, so a 5xx is a bug (the API tests fuzz for one).
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import webbrowser
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import (
    LIMITS,
    MAX_KV_CACHE_BYTES,
    TooLarge,
    bundle_from,
    encode,
    options,
    resolve,
    run_tracks,
    snapshot_from,
)
from kvsim.lab.presets import names as preset_names
from kvsim.lab.state import gc_paused

STATIC = Path(__file__).parent / "static"
# Query parameters: name -> (type, description). `preset` and `step` besides the overrides.
PARAMS: dict[str, tuple[str, str]] = {
    "preset": ("string", "workload preset (GET /api/presets lists them)"),
    "model": ("string", "model preset (kvsim.models)"),
    "block_size": ("integer", "tokens per block"),
    "kv_cache_bytes": (
        "integer",
        "KV cache memory in bytes (default: the preset's); the blocks are cut from it, as vLLM sizes them",
    ),
    "num_blocks": ("integer", "GPU blocks, vLLM's null block 0 included (instead of kv_cache_bytes)"),
    "enable_prefix_caching": ("boolean", "prefix caching on or off"),
    "policy": ("string", "the paged track's policy (vllm, reserve)"),
    "sampling": ("string", "fork-cow or independent"),
    "preemption": ("string", "recompute, swap or auto"),
    "contiguous_policy": ("string", "the contiguous track's policy"),
    "placement": ("string", "first-fit or buddy"),
    "kv_offloading_bytes": (
        "integer",
        "CPU tier (vLLM's native KV offloading) in bytes of host memory, 0 for none (default: the preset's)",
    ),
    "async_scheduling": (
        "boolean",
        "vLLM's asynchronous scheduling (its default) on the paged track, or synchronous (default: the preset's)",
    ),
}
# /api/state's: which state of each track (the two at one instant: `bundle.snapshot_from`).
STEP_PARAMS: dict[str, tuple[str, str]] = {
    "step": ("integer", "the paged track's state after this many steps"),
    "contiguous_step": (
        "integer",
        "the contiguous track's state after this many steps (with step: one in force at the same instant)",
    ),
}
# Sizes in bytes, bounded by the page's caps (`query.resolve`), not by the integers' range.
MEMORY_PARAMS = ("kv_cache_bytes", "kv_offloading_bytes")
CACHE_SIZE = 8
# A query value's most characters (the longest a valid one takes is a few dozen), and what an integer is.
MAX_VALUE_CHARS = 256
# A memory field's size (`MEMORY_PARAMS`) may be longer, up to this many digits: the page sends a size typed
# as 1e300 MiB as its 307 digits of bytes, and the field's own check refuses it with the range it takes
# (`kvsim.lab.query.sized` shows such a size by its length). A finite double has at most 309 digits (the
# page sends Number.MAX_VALUE for a size past it); more would overflow the tier's size in GiB, a float.
MAX_SIZE_DIGITS = 309
INTEGER = re.compile(r"-?[0-9]+")


def _encode(content: Any) -> bytes:
    """JSON bytes (`kvsim.lab.bundle.encode`: orjson when installed, numpy arrays as typed columns)."""
    return encode(content)


class Json(JSONResponse):
    """A JSON response encoded by `_encode`."""

    def render(self, content: Any) -> bytes:
        return _encode(content)


class BadParameter(Exception):
    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field, self.message, self.status = field, message, status


def _parse(request: Request, allowed: dict[str, tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in request.query_params:
        if not allowed:
            raise BadParameter(name, f"parameter {name!r}: {request.url.path} takes no parameters")
        if name not in allowed:
            raise BadParameter(name, f"parameter {name!r} is not one of {', '.join(map(repr, allowed))}")
        values = request.query_params.getlist(name)
        if len(values) != 1:
            raise BadParameter(name, f"{name} given {len(values)} times")
        raw, kind = values[0], allowed[name][0]
        long_size = name in MEMORY_PARAMS and len(raw) <= MAX_SIZE_DIGITS and raw.isascii() and raw.isdigit()
        if len(raw) > MAX_VALUE_CHARS and not long_size:  # (an error would echo it: refused without it)
            raise BadParameter(name, f"{name} is {len(raw):,} characters long, more than any value takes")
        if kind == "integer":
            # (plain ASCII digits only: Python's int() also reads '1_0', ' 1', '+1' and other scripts' digits)
            if not INTEGER.fullmatch(raw):
                raise BadParameter(name, f"{name} {raw!r} must be an integer (digits 0-9, a leading -)")
            out[name] = int(raw, 10)
            # (the memory fields' caps refuse any size past them, saying the size that runs: user53 #6)
            if abs(out[name]) > 2**62 and name not in MEMORY_PARAMS:
                raise BadParameter(name, f"{name} {raw} is out of range")
        elif kind == "boolean":
            if raw not in ("true", "false", "1", "0"):
                raise BadParameter(name, f"{name} {raw!r} must be true or false")
            out[name] = raw in ("true", "1")
        else:
            out[name] = raw
    return out


def _field_of(message: str, given: Iterable[str] = ()) -> str:
    """The parameter an error is about: the message's first word if the client gave it; else a parameter
    the client gave that the message names (a combination refused for a value the preset set names the
    one the client changed); else the first word if it is a parameter at all."""
    first = message.split(" ", 1)[0].strip("'\"")
    given = [g for g in given if g not in ("preset", "step", "contiguous_step")]
    if first in given:
        return first
    named = [g for g in given if re.search(rf"\b{re.escape(g)}\b", message)]
    if named:
        return named[0]
    return (
        first
        if first in PARAMS or first in ("step", "contiguous_step", "steps", "events", "requests")
        else "query"
    )


_cache: OrderedDict[tuple[Any, ...], tuple[Any, ...]] = OrderedDict()
_bodies: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()  # the encoded bundles of the runs in _cache
_lock = threading.Lock()


def _key(params: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
    """The resolved query's cache key, and the resolved query."""
    query = {k: v for k, v in params.items() if k not in STEP_PARAMS}
    preset = query.pop("preset", "copilot")
    r = resolve(preset, **query)
    return tuple(sorted(r.query.items())), r


def _remember(store: OrderedDict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    with _lock:
        store[key] = value
        while len(store) > CACHE_SIZE:
            store.popitem(last=False)


def _tracks(params: dict[str, Any], resolved: tuple[tuple[Any, ...], Any] | None = None) -> tuple[Any, ...]:
    """Resolves and runs a query (the last few are kept: the page asks for states of the run it has)."""
    key, r = resolved or _key(params)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    paged, contiguous = run_tracks(r)
    value = (r, paged, contiguous)
    _remember(_cache, key, value)
    return value


def _error(e: BadParameter) -> JSONResponse:
    return JSONResponse({"error": e.message, "field": e.field}, status_code=e.status)


def _invalid(e: InvalidArgumentError, given: Iterable[str] = ()) -> BadParameter:
    message = str(e)
    if isinstance(e, TooLarge):
        return BadParameter(e.field, message, 413)
    return BadParameter(_field_of(message, given), message, 400)


async def index(request: Request) -> Response:
    page = STATIC / "index.html"
    if not page.exists():
        return JSONResponse(
            {"error": "the page is not installed (python/kvsim/lab/static)", "field": "/"}, 404
        )
    return FileResponse(page)


async def api_presets(request: Request) -> Response:
    try:
        _parse(request, {})
    except BadParameter as e:
        return _error(e)
    from kvsim.lab import presets as list_presets  # the package's function, not the module

    rows = await run_in_threadpool(list_presets)
    return JSONResponse({"presets": rows, "options": options(), "limits": LIMITS})


async def api_run(request: Request) -> Response:
    try:
        params = _parse(request, PARAMS)
        # Built and encoded in the worker thread: a bundle is megabytes, the event loop stays free.
        body = await run_in_threadpool(_run_payload, params)
        return Response(body, media_type="application/json")
    except BadParameter as e:
        return _error(e)
    except InvalidArgumentError as e:
        return _error(_invalid(e, request.query_params))


def _run_payload(params: dict[str, Any]) -> bytes:
    """The encoded bundle; a run asked for again is sent as the bytes encoded before."""
    resolved = _key(params)
    key = resolved[0]
    with _lock:
        body = _bodies.get(key)
        if body is not None:
            _bodies.move_to_end(key)
            return body
    with gc_paused():  # one pause over the replays, the payload and its encoding (`state.gc_paused`)
        r, paged, contiguous = _tracks(params, resolved)
        body = _encode(bundle_from(r, paged, contiguous))
    _remember(_bodies, key, body)
    return body


async def api_state(request: Request) -> Response:
    try:
        params = _parse(request, {**PARAMS, **STEP_PARAMS})
        return Json(await run_in_threadpool(_state_payload, params))
    except BadParameter as e:
        return _error(e)
    except InvalidArgumentError as e:
        return _error(_invalid(e, request.query_params))


def _state_payload(params: dict[str, Any]) -> dict[str, Any]:
    r, paged, contiguous = _tracks(params)
    return snapshot_from(r, paged, contiguous, params.get("step"), params.get("contiguous_step"))


async def pd_page(request: Request) -> Response:
    return FileResponse(STATIC / "pd.html")


def _pd_params(request: Request, with_instant: bool) -> dict[str, Any]:
    allowed = {"preset": ("string", "a disaggregated preset (default: disaggregated)")}
    if with_instant:
        allowed["instant"] = ("integer", "the instant's index (0-based)")
    return _parse(request, allowed)


async def api_pd(request: Request) -> Response:
    """The disaggregated fleet's page payload: every instant's snapshot (`kvsim.lab.pd.timeline`)."""
    from kvsim.lab import pd

    try:
        params = _pd_params(request, False)
        return Json(await run_in_threadpool(pd.timeline, params.get("preset", "disaggregated")))
    except BadParameter as e:
        return _error(e)
    except InvalidArgumentError as e:
        return _error(BadParameter(_pd_field(str(e)), str(e)))


async def api_pd_state(request: Request) -> Response:
    """One instant's snapshot of the disaggregated fleet (`kvsim.lab.pd.snapshot`)."""
    from kvsim.lab import pd

    try:
        params = _pd_params(request, True)
        if "instant" not in params:
            raise BadParameter("instant", "instant is required (an integer index into the run's instants)")

        def state() -> dict[str, Any]:
            return pd.snapshot(pd.preset_run(params.get("preset", "disaggregated")), params["instant"])

        return Json(await run_in_threadpool(state))
    except BadParameter as e:
        return _error(e)
    except InvalidArgumentError as e:
        return _error(BadParameter(_pd_field(str(e)), str(e)))


def _pd_field(message: str) -> str:
    first = message.split(" ", 1)[0]
    return first if first in ("preset", "instant") else "query"


def openapi() -> dict[str, Any]:
    """The API's OpenAPI 3 schema (parameters with their types and allowed values)."""
    opts = options()
    enums = {
        "preset": preset_names(),
        "model": opts["models"],
        "policy": opts["policies"],
        "sampling": opts["samplings"],
        "preemption": opts["preemptions"],
        "contiguous_policy": opts["contiguous_policies"],
        "placement": opts["placements"],
    }
    limits = LIMITS
    ranges = {
        "block_size": (1, limits["max_block_size"]),
        "num_blocks": (2, limits["max_blocks"]),
        "kv_cache_bytes": (1, MAX_KV_CACHE_BYTES),
        "kv_offloading_bytes": (0, MAX_KV_CACHE_BYTES),
    }

    def params(extra: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
        out = []
        for name, (kind, desc) in {**PARAMS, **extra}.items():
            schema: dict[str, Any] = {"type": kind}
            if name in enums:
                schema["enum"] = enums[name]
            if name in ranges:
                schema["minimum"], schema["maximum"] = ranges[name]
            if name in STEP_PARAMS:
                schema["minimum"] = 0
            out.append(
                {"name": name, "in": "query", "required": False, "description": desc, "schema": schema}
            )
        return out

    error = {
        "description": "a bad parameter: the message names the field and the value",
        "content": {"application/json": {"schema": {"type": "object", "required": ["error", "field"]}}},
    }
    from kvsim.lab.pd import PD_PRESETS

    pd_preset = {
        "name": "preset",
        "in": "query",
        "required": False,
        "description": "a disaggregated preset (default: disaggregated)",
        "schema": {"type": "string", "enum": list(PD_PRESETS)},
    }
    ok = {"description": "JSON", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "kvsim lab", "version": "1", "description": "DESIGN.md §Lab"},
        "paths": {
            "/api/presets": {
                "get": {"summary": "presets, options and caps", "responses": {"200": ok, "400": error}}
            },
            "/api/run": {
                "get": {
                    "summary": "a run's bundle (both tracks)",
                    "parameters": params({}),
                    "responses": {"200": ok, "400": error, "413": error},
                }
            },
            "/api/state": {
                "get": {
                    "summary": "the snapshot at an instant (each track's state then)",
                    "parameters": params(STEP_PARAMS),
                    "responses": {"200": ok, "400": error, "413": error},
                }
            },
            "/api/pd": {
                "get": {
                    "summary": "a disaggregated fleet's snapshots at every instant (kvsim.lab.pd)",
                    "parameters": [pd_preset],
                    "responses": {"200": ok, "400": error},
                }
            },
            "/api/pd/state": {
                "get": {
                    "summary": "a disaggregated fleet's snapshot at one instant",
                    "parameters": [
                        pd_preset,
                        {
                            "name": "instant",
                            "in": "query",
                            "required": True,
                            "description": "the instant's index (0-based)",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                    ],
                    "responses": {"200": ok, "400": error},
                }
            },
        },
    }


async def api_openapi(request: Request) -> Response:
    try:
        _parse(request, {})  # (no parameters, as /api/presets)
    except BadParameter as e:
        return _error(e)
    return JSONResponse(openapi())


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors (an unknown path or a missing file under `/static/`, a wrong method):
    JSON like every other answer, `{"error": ..., "field": "path" | "method"}`."""
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    path = request.url.path
    field = "path"
    if code == 404:
        if path.startswith("/api/") or path == "/openapi.json":
            detail = f"path {path!r}: no such endpoint (see /openapi.json)"
        elif path.startswith("/static/"):
            detail = f"path {path!r}: no such file of the page"
        else:
            detail = f"path {path!r}: no such page (the lab is at /, its API under /api/: see /openapi.json)"
    elif code == 405:
        field = "method"
        detail = f"method {request.method!r} is not allowed on {path!r}"
    # (a 405 keeps starlette's Allow header, which HTTP requires of it)
    headers = getattr(exc, "headers", None)
    return JSONResponse({"error": detail, "field": field}, status_code=code, headers=headers)


def create_app() -> Starlette:
    """The lab's ASGI app."""
    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/api/presets", api_presets),
        Route("/api/run", api_run),
        Route("/api/state", api_state),
        Route("/pd", pd_page),
        Route("/api/pd", api_pd),
        Route("/api/pd/state", api_pd_state),
        Route("/openapi.json", api_openapi),
    ]
    if STATIC.is_dir():
        routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _json_400_protocol() -> type:
    """uvicorn's HTTP/1.1 protocol (h11), answering a request it cannot parse as the lab answers every
    error: a JSON body `{"error": ..., "field": "request"}` (uvicorn wrote "Invalid HTTP request received."
    as text/plain, the one error of the server that was not JSON)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class JsonErrorH11Protocol(H11Protocol):  # type: ignore[misc]
        def send_400_response(self, msg: str) -> None:
            body = json.dumps({"error": msg, "field": "request"}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ]
            for event in (
                h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return JsonErrorH11Protocol


def serve(host: str = "127.0.0.1", port: int = 0, open_browser: bool = False) -> None:
    """Serves the lab on `host:port` (0: a free port) until Ctrl-C; prints the URL first."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InvalidArgumentError(f"host {host!r} port {port}: cannot listen there ({e.strerror})") from None
    bound = sock.getsockname()[1]
    if host not in LOOPBACK:  # said once the address is known to be one this machine can listen on
        print(
            f"WARNING: kvsim lab is listening on {host}, not loopback: anyone who can reach this machine "
            "can use it (it has no authentication)",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    try:
        # Ctrl-C at any moment from here on stops the server quietly (uvicorn shuts down gracefully on it,
        # then re-raises it).
        print(f"kvsim lab: {url}  (Ctrl-C stops it)", flush=True)
        if open_browser:
            threading.Timer(0.5, webbrowser.open, args=(url,)).start()
        config = uvicorn.Config(create_app(), log_level="warning", lifespan="off", http=_json_400_protocol())
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    print("kvsim lab: stopped", flush=True)
