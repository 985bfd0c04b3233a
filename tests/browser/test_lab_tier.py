"""The lab page with a CPU tier (vLLM's native KV offloading, DESIGN.md §CPU tier), at a desktop window and a
phone's viewport: the tier drawn beside the GPU pool, its chunks by state read back from the canvas's
pixels and its counters equal `kvsim.lab.snapshot` (itself checked against the reference engine's tier,
tests/test_lab_tier.py) at steps forward and back; the transfers of a step named from the log; the request
held for its load shown as held (not running) in the tier panel, the batch line and its card; the tier
control runs a tier (on a model with state layers too) and a refused one changes nothing, the server's reason on
the page."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import LabPage
from .test_lab_hybrid import assert_group_tables
from .test_lab_page import assert_blocks, python_snapshot

# gpt-oss-20b (a 128-token sliding window beside full attention) in the CPU-tier preset's traffic, with a
# GPU pool of 12 MiB (32 blocks): req-8 loads its document into both groups (tests/test_lab_tier.py).
HYBRID_TIER = {"preset": "cpu-tier", "model": "gpt-oss-20b", "kv_cache_bytes": 12 * 2**20}

# The tier canvas's cells, each classified by the nearest of the four state colours at its middle.
CHUNKS_DRAWN = """() => {
  const canvas = document.querySelector('#tier-canvas');
  const cell = Number(canvas.dataset.cell);
  const k = canvas.width / canvas.clientWidth;
  const cols = Math.max(1, Math.floor(canvas.clientWidth / cell));
  const n = Number(document.querySelector('#tier-panel').dataset.chunks);
  const css = getComputedStyle(document.documentElement);
  const rgb = (name) => {
    const c = document.createElement('canvas'); c.width = c.height = 1;
    const x = c.getContext('2d'); x.fillStyle = css.getPropertyValue(name).trim(); x.fillRect(0, 0, 1, 1);
    return Array.from(x.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };
  const ref = {loading: rgb('--c-tier-loading'), ready: rgb('--c-tier-ready'), pending: rgb('--c-tier-pending'),
    free: rgb('--c-free')};
  const mark = rgb('--c-text');
  const ctx = canvas.getContext('2d');
  const near = (p, c) => (p[0] - c[0]) ** 2 + (p[1] - c[1]) ** 2 + (p[2] - c[2]) ** 2;
  const out = {loading: 0, ready: 0, pending: 0, free: 0, outlined_loading: 0, outlined_pending: 0};
  for (let i = 0; i < n; i += 1) {
    const x0 = (i % cols) * cell, y0 = Math.floor(i / cols) * cell;
    const p = ctx.getImageData(Math.floor((x0 + cell * 0.45) * k), Math.floor((y0 + cell * 0.45) * k), 1, 1).data;
    let best = null, dist = Infinity;
    for (const [name, c] of Object.entries(ref)) {
      const d = near(p, c);
      if (d < dist) { dist = d; best = name; }
    }
    out[best] += 1;
    // An outline (this step's transfer) at the cell's edge: the mark's colour, not the fill's.
    const e = ctx.getImageData(Math.floor((x0 + 1) * k), Math.floor((y0 + 1) * k), 1, 1).data;
    if (near(e, mark) < near(e, ref[best])) out[`outlined_${best}`] = (out[`outlined_${best}`] || 0) + 1;
  }
  return out;
}"""
STATS = ("cpu_hit_tokens", "cpu_loads", "cpu_stores", "cpu_evictions")


def assert_tier(lab: LabPage, snap: dict[str, Any]) -> None:
    """The tier panel at this step against the snapshot: the chunks drawn by state (pixels), the counters,
    the requests held for their loads."""
    tier = snap["tier"]
    want = {
        "loading": tier["cpu_loading_chunks"],
        "ready": tier["ready_chunks"],
        "pending": tier["cpu_pending_chunks"],
        "free": tier["free_chunks"],
    }
    drawn = lab.page.evaluate(CHUNKS_DRAWN)
    # This step's transfers outlined: the chunks its stores and loads planned (as the log counts them).
    k = snap["step"]
    q = lab.query()
    prev = python_snapshot(q, k - 1)["tier"] if k > 0 else None
    stored = tier["cpu_stored_chunks"] - (prev["cpu_stored_chunks"] if prev else 0)
    loaded = tier["cpu_loaded_chunks"] - (prev["cpu_loaded_chunks"] if prev else 0)
    want["outlined_pending"] = min(stored, tier["cpu_pending_chunks"])
    want["outlined_loading"] = min(loaded, tier["cpu_loading_chunks"])
    assert {name: drawn.get(name, 0) for name in want} == want, f"chunks drawn at step {k}"
    assert sum(drawn.get(f"outlined_{s}", 0) for s in ("ready", "free")) == 0
    for name in STATS:
        assert lab.value(f'[data-tier-stat="{name}"]') == tier[name], name
    assert lab.value('[data-tier-stat="used"]') == tier["cpu_chunks"]
    assert lab.value('[data-tier-stat="stores_failed"]') == tier["stores_failed"]
    held = sorted(r["name"] for r in snap["requests"] if r["status"] in ("loading", "loaded"))
    assert lab.value('[data-tier-stat="num_held"]') == len(held) == snap["num_held"]
    text = lab.page.inner_text("#tier-held") if held else ""
    for name in held:
        assert name in text
    # The batch line counts them apart from the running ones.
    batch = lab.page.inner_text("#paged-batch")
    assert (f"{len(held)} held for CPU-tier loads" in batch) == bool(held)


def walk(lab: LabPage, q: dict[str, Any], steps: tuple[int, ...], groups: bool) -> None:
    """The page at each of `steps` in turn (a seek as a user's drag) is the Python snapshot's: the tier, the
    blocks and (`groups`) each request's table per group; and nothing is wider than the screen."""
    for step in steps:
        if step != lab.step():
            lab.seek(step)
        snap = python_snapshot(q, step)
        assert_tier(lab, snap)
        assert_blocks(lab, snap)
        if groups:
            assert_group_tables(lab, snap)
    assert lab.fits(), lab.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_the_tier_drawn_is_the_snapshots_forward_and_back(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="cpu-tier")
    assert lab.page.locator("#tier-panel").is_visible()
    q = lab.query()
    # The opening step (req-8 loading), the first stores pending, the tier full with an eviction, the load
    # landing, the end; then back.
    walk(lab, q, (lab.step(), 1, 5, 24, 25, 43, 44, 56, 41, 4, 0), groups=False)


def test_a_held_request_is_shown_neither_running_nor_computing(lab: LabPage) -> None:
    lab.open(preset="cpu-tier", step=41)
    q = lab.query()
    snap = python_snapshot(q, 41)
    req8 = next(r for r in snap["requests"] if r["name"] == "req-8")
    assert req8["status"] == "loading"
    card = lab.page.locator('#seq-list .seq[data-rid="7"]')
    assert card.get_attribute("data-status") == "loading"
    assert "Loading from CPU" in (card.text_content() or "")
    # Its context does not grow while it is held: the same at the next step.
    ctx = int(card.get_attribute("data-ctx") or -1)
    assert ctx == req8["context_tokens"]
    lab.seek(42)
    assert int(lab.page.locator('#seq-list .seq[data-rid="7"]').get_attribute("data-ctx") or -1) == ctx
    # A block the load is filling has no key until the load lands (step 43), then the snapshot's.
    block = req8["block_table"][1]
    for step, loading in ((41, True), (43, False)):
        lab.seek(step)
        lab.page.locator(f'#grid .cell[data-block="{block}"]').click()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        want = next(b for b in python_snapshot(q, step)["blocks"] if b["block_id"] == block)
        assert bool(want.get("loading")) == loading
        key = lab.page.inner_text("#insp-key")
        assert (want["prefix_key"] is None) == loading
        assert ("none yet" in key) if loading else (key == want["prefix_key"])
        assert lab.page.get_attribute("#insp-held", "data-filling") == ("true" if loading else "false")
        # Its tokens count as stored from the load's admission (the engine's accounting): the occupancy
        # says so while they are on the link.
        assert ("on the link" in lab.page.inner_text("#insp-occupancy")) == loading
        # The paged panel's "Stored" says how much of it is still on the link: req-8's 6 chunks of one
        # 2 MiB block while the load is in flight, nothing once it has landed.
        stored = lab.page.inner_text("#paged-stored")
        assert stored.endswith("(12.00 MiB of it still on the link from the CPU tier)") == loading, stored
    # The step that admitted the load (state 41) names the transfer and the tokens it spares.
    lab.seek(41)
    flows = lab.page.eval_on_selector_all(
        "#tier-flows [data-flow]", "els => els.map(e => [e.dataset.flow, e.textContent])"
    )
    kinds = [k for k, _ in flows]
    assert "load" in kinds
    assert "hit" in kinds
    load = next(t for k, t in flows if k == "load")
    assert "6 chunks" in load
    assert "req-8" in load
    # And the event stream has the engine's rows.
    lab.page.locator("#ev-list").scroll_into_view_if_needed()
    lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
    text = lab.page.text_content("#ev-list") or ""
    assert "Load of 6 chunks CPU → GPU for req-8" in text


def test_the_tier_control_runs_a_tier_and_a_refused_one_changes_nothing(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.problems.expected_status.add(400)
    lab.open(preset="copilot")
    assert lab.page.locator("#tier-panel").is_hidden()
    lab.change("#c-tier", 64)
    assert lab.query()["kv_offloading_bytes"] == 64 * 2**20
    assert lab.page.locator("#tier-panel").is_visible()
    assert "= 32 chunks" in lab.page.inner_text("#c-tier-chunks")
    snap = python_snapshot(lab.query(), lab.step())
    assert snap["tier"]["chunks"] == 32
    assert_tier(lab, snap)
    # With a tier, the values it does not run with are offered disabled, saying why.
    why = lab.page.get_attribute('#c-policy option[value="reserve"]', "data-why")
    assert why == "the CPU tier needs policy vllm"
    assert (
        lab.page.get_attribute('#c-preemption option[value="swap"]', "data-why")
        == "the CPU tier needs preemption recompute"
    )
    assert lab.page.is_disabled("#c-prefix")
    assert "the CPU tier needs prefix caching on" in lab.page.inner_text("#c-prefix-why")
    # 0 turns the tier off; then a policy it does not run with, then a tier: the server's reason on the
    # page, the run as it was.
    lab.change("#c-tier", 0)
    assert lab.page.locator("#tier-panel").is_hidden()
    lab.change("#c-policy", "reserve")
    before = lab.query()
    assert "needs policy vllm" in lab.page.inner_text("#c-tier-chunks")
    lab.change("#c-tier", 64)
    banner = lab.page.locator("#banner")
    assert banner.is_visible()
    assert banner.inner_text().startswith("CPU tier (MiB) 64 MiB")  # (the field's words, not the API's)
    assert "needs policy 'vllm'" in banner.inner_text()
    assert lab.query() == before
    assert lab.page.input_value("#c-policy") == "reserve"
    assert lab.page.input_value("#c-tier") == "0"
    assert lab.page.locator("#tier-panel").is_hidden()
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]


@pytest.mark.parametrize("preset", ["memory-pressure", "state-layers", "sliding-window"])
def test_the_control_says_what_a_tier_needs(lab: LabPage, preset: str) -> None:
    lab.open(preset=preset)
    hint = lab.page.inner_text("#c-tier-chunks")
    if preset == "memory-pressure":
        assert "0: no tier; a tier needs preemption recompute" in hint
    elif preset == "state-layers":  # (a model with state layers takes a tier with prefix caching on)
        assert hint == "0: no tier; a tier needs prefix caching on", hint
    else:  # a hybrid model of attention groups takes a tier
        assert hint == "0: no tier", hint


def test_the_control_says_what_of_the_size_a_tier_cannot_use(lab: LabPage) -> None:
    """vLLM's tier holds whole chunks: 65 MiB is 32 chunks of 2 MiB, its last MiB unused, and the hint
    says so (it said 32 chunks of 2 MiB alone, 64 MiB, beside the 65 typed)."""
    lab.open(preset="cpu-tier", kv_offloading_bytes=65 * 2**20)
    hint = lab.page.inner_text("#c-tier-chunks")
    assert hint.startswith("= 32 chunks of 2.00 MiB"), hint
    assert hint.endswith("; 1.00 MiB left over, unused"), hint
    lab.open(preset="cpu-tier", kv_offloading_bytes=64 * 2**20)
    assert "left over" not in lab.page.inner_text("#c-tier-chunks")


def test_a_tier_of_many_chunks_is_one_bar_of_their_states(lab: LabPage) -> None:
    """Past 2,048 chunks (a cell each would be a few pixels) the tier is one bar of the states' shares: its
    pixels, left to right, are the snapshot's counts in the cells' order."""
    lab.open(preset="copilot", kv_offloading_bytes=4098 * 2**20, step=3)
    snap = python_snapshot(lab.query(), 3)
    tier = snap["tier"]
    assert tier["chunks"] == 2049
    assert lab.page.get_attribute("#tier-canvas", "data-mode") == "bar"
    assert lab.page.locator("#tier-fresh-legend").is_hidden()
    shares = lab.page.evaluate(
        """() => {
      const canvas = document.querySelector('#tier-canvas');
      const ctx = canvas.getContext('2d');
      const css = getComputedStyle(document.documentElement);
      const rgb = (name) => {
        const c = document.createElement('canvas'); c.width = c.height = 1;
        const x = c.getContext('2d'); x.fillStyle = css.getPropertyValue(name).trim(); x.fillRect(0, 0, 1, 1);
        return Array.from(x.getImageData(0, 0, 1, 1).data.slice(0, 3));
      };
      const ref = {ready: rgb('--c-tier-ready'), free: rgb('--c-free')};
      const row = ctx.getImageData(0, Math.floor(canvas.height / 2), canvas.width, 1).data;
      const out = {ready: 0, free: 0, width: canvas.width};
      for (let x = 0; x < canvas.width; x += 1) {
        const p = row.slice(4 * x, 4 * x + 3);
        for (const [name, c] of Object.entries(ref)) {
          if (Math.abs(p[0] - c[0]) + Math.abs(p[1] - c[1]) + Math.abs(p[2] - c[2]) < 12) out[name] += 1;
        }
      }
      return out;
    }"""
    )
    assert tier["cpu_pending_chunks"] == 0
    assert tier["cpu_loading_chunks"] == 0
    # Each state's share of the bar's pixels is its share of the chunks (within a pixel at each edge).
    assert abs(shares["ready"] - shares["width"] * tier["ready_chunks"] / 2049) <= 2
    assert abs(shares["free"] - shares["width"] * tier["free_chunks"] / 2049) <= 2
    assert tier["ready_chunks"] > 0


def test_the_charts_stored_area_says_it_includes_loads_in_flight(lab: LabPage) -> None:
    """With a CPU tier the chart's "paged stored" counts a block a load is still filling from the load's
    admission (the engine's accounting, as the panel and the inspector say): its legend entry says so and
    explains it on hover; without a tier it reads as before."""
    entry = '#chart-legend [data-series="paged_stored_bytes"]'
    lab.open(preset="cpu-tier", step=41)
    assert lab.page.inner_text(entry).strip() == "paged stored (loads in flight included)"
    assert "still filling" in (lab.page.get_attribute(entry, "title") or "")
    lab.open(preset="copilot", step=3)
    assert lab.page.inner_text(entry).strip() == "paged stored"
    assert lab.page.get_attribute(entry, "title") is None


def test_a_hybrid_models_tier_drawn_is_the_snapshots_forward_and_back(sized_lab: LabPage) -> None:
    """A hybrid model's tier: the chunks drawn, the counters and the held request equal `snapshot` at
    steps forward and back, with the grid's blocks and every group's table; req-8 held loading (states 46
    and 47) then loaded (48) with a table per group, a block the load fills keyless until it lands."""
    lab = sized_lab
    lab.open(**HYBRID_TIER)
    assert lab.page.locator("#tier-panel").is_visible()
    assert lab.page.locator("#grid-groups li").count() == 2
    q = lab.query()
    walk(lab, q, (lab.step(), 1, 20, 46, 47, 48, 49, 58, 47, 5, 0), groups=True)


def test_a_hybrid_models_held_request_and_its_filling_blocks(lab: LabPage) -> None:
    """req-8's card says it is loading, with a table per group; a block of its window group the load is
    filling has no key (the inspector says it is being filled) until the load lands (state 48); the step
    that admits the load (state 46) names it, 12 chunks (6 a group); with a tier on, every model is offered,
    those with state layers included."""
    lab.open(**HYBRID_TIER, step=47)
    q = lab.query()
    snap = python_snapshot(q, 47)
    req8 = next(r for r in snap["requests"] if r["name"] == "req-8")
    assert req8["status"] == "loading"
    card = lab.page.locator('#seq-list .seq[data-rid="7"]')
    assert card.get_attribute("data-status") == "loading"
    assert "Loading from CPU" in (card.text_content() or "")
    assert card.locator(".group-row").count() == 2
    block = req8["block_tables"][0][-1]  # (the window group's)
    for step, loading in ((47, True), (48, False)):
        lab.seek(step)
        lab.page.locator(f'#grid .cell[data-block="{block}"]').click()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        want = next(b for b in python_snapshot(q, step)["blocks"] if b["block_id"] == block)
        assert bool(want.get("loading")) == loading
        assert lab.page.get_attribute("#insp-group", "data-group") == "0"
        assert lab.page.get_attribute("#insp-held", "data-filling") == ("true" if loading else "false")
        key = lab.page.inner_text("#insp-key")
        assert ("none yet" in key) if loading else (key == want["prefix_key"])
    lab.seek(46)  # (the state after the step that admitted the load)
    assert python_snapshot(q, 45)["tier"]["cpu_loads"] == 0
    flows = lab.page.eval_on_selector_all(
        "#tier-flows [data-flow]", "els => els.map(e => [e.dataset.flow, e.textContent])"
    )
    load = next(t for k, t in flows if k == "load")
    assert "12 chunks" in load
    assert "req-8" in load
    # (a model whose block does not fit the 12 MiB is disabled for that reason alone, not the tier's)
    for model in ("qwen3-next-80b-a3b", "granite-4.0-h-tiny", "gpt-oss-20b"):
        why = lab.page.get_attribute(f'#c-model option[value="{model}"]', "data-why") or ""
        assert "tier" not in why, (model, why)
        assert "state" not in why, (model, why)
    assert lab.page.get_attribute('#c-model option[value="gpt-oss-20b"]', "data-why") is None


def test_the_sliding_window_tier_preset_drawn_is_the_snapshots(sized_lab: LabPage) -> None:
    """The `sliding-window-tier` preset (gpt-oss-120b, a sliding window beside full attention, with a CPU
    tier; tests/test_lab_tier.py checks its meaning against the engines) opens with req-8's load of turn 1
    in flight: its card says so, with a row per group, the window's 8 leading null blocks (the tokens its
    window skips, none loaded, as their chip's title says) and the full group's 16 blocks; the step names the load of 24 chunks. The
    tier drawn, the grid and every group's table equal `snapshot` at steps forward and back (req-1's
    stores, the load in flight and landed, req-9's second load, the end)."""
    lab = sized_lab
    lab.open(preset="sliding-window-tier")
    opening = lab.step()
    assert opening == 39
    assert lab.page.locator("#tier-panel").is_visible()
    assert lab.page.locator("#grid-groups li").count() == 2
    q = lab.query()
    snap = python_snapshot(q, opening)
    req8 = next(r for r in snap["requests"] if r["name"] == "req-8")
    assert req8["status"] == "loading"
    card = lab.page.locator('#seq-list .seq[data-rid="7"]')
    assert card.get_attribute("data-status") == "loading"
    assert "Loading from CPU" in (card.text_content() or "")
    rows = card.locator(".group-row")
    assert rows.count() == 2
    nulls = rows.nth(0).locator("[data-null]")
    assert nulls.get_attribute("data-null") == "8"
    # (its title says why: never held, the load started past them; the chip's "left" alone read as if
    # req-8 had held them)
    assert "were never held (a prefix hit or a CPU-tier load started past them)" in (
        nulls.get_attribute("title") or ""
    )
    assert rows.nth(1).locator("[data-null]").count() == 0
    flows = lab.page.eval_on_selector_all(
        "#tier-flows [data-flow]", "els => els.map(e => [e.dataset.flow, e.textContent])"
    )
    load = next(t for k, t in flows if k == "load")
    assert "24 chunks" in load
    assert "req-8" in load
    walk(lab, q, (opening, 1, 2, 38, 40, 41, 42, 47, 49, snap["num_steps"], 39, 12, 0), groups=True)


def test_the_state_layers_tier_preset_drawn_is_the_snapshots(sized_lab: LabPage) -> None:
    """The `state-layers-tier` preset (Qwen3-Next-80B-A3B, three groups of state layers beside full
    attention, with a CPU tier; tests/test_lab_tier.py checks its meaning against the engines) opens with
    req-6's load in flight: its card says so, with a row per group, each state group's row the null block
    (no earlier state: the load brings the one it resumes from) then the state being loaded; the step names
    the load of 5 chunks and the tier's caption what a state's chunk is. The inspector on a state being
    loaded says so (a state of 1,088 tokens on the link, no key yet); once landed, the state holds its
    tokens, keyless (the GPU keys a state only where a later hit can end). The tier drawn, the grid and
    every group's table equal `snapshot` at steps forward and back (req-1's states stored, the load in
    flight and landed, req-6's own states stored, the end)."""
    lab = sized_lab
    lab.open(preset="state-layers-tier")
    opening = lab.step()
    assert opening == 91
    assert lab.page.locator("#tier-panel").is_visible()
    assert lab.page.locator("#grid-groups li").count() == 4
    assert "a state group’s chunk is one block" in lab.page.inner_text("#tier-caption")
    q = lab.query()
    snap = python_snapshot(q, opening)
    req6 = next(r for r in snap["requests"] if r["name"] == "req-6")
    assert req6["status"] == "loading"
    card = lab.page.locator('#seq-list .seq[data-rid="5"]')
    assert card.get_attribute("data-status") == "loading"
    assert "Loading from CPU" in (card.text_content() or "")
    rows = card.locator(".group-row")
    assert rows.count() == 4
    for g in range(3):
        nulls = rows.nth(g).locator("[data-null]")
        assert nulls.get_attribute("data-null") == "1"
        assert "a CPU-tier load from the state it brings" in (nulls.get_attribute("title") or "")
    assert rows.nth(3).locator("[data-null]").count() == 0
    flows = lab.page.eval_on_selector_all(
        "#tier-flows [data-flow]", "els => els.map(e => [e.dataset.flow, e.textContent])"
    )
    load = next(t for k, t in flows if k == "load")
    assert "5 chunks" in load
    assert "req-6" in load
    hit = next(t for k, t in flows if k == "hit")
    assert "1,088 tokens" in hit
    # A state being loaded (group 0's), in the inspector: while the load is in flight, then landed.
    state = req6["block_tables"][0][1]
    for step, loading in ((opening, True), (93, False)):
        if step != lab.step():
            lab.seek(step)
        lab.page.locator(f'#grid .cell[data-block="{state}"]').click()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        want = next(b for b in python_snapshot(q, step)["blocks"] if b["block_id"] == state)
        assert (bool(want.get("loading")), want["group"], want["num_tokens"]) == (loading, 0, 1088)
        assert want["prefix_key"] is None
        assert lab.page.get_attribute("#insp-state", "data-filling") == ("true" if loading else "false")
        assert ("BEING LOADED" in lab.page.inner_text("#insp-state")) == loading
        occupancy = lab.page.inner_text("#insp-occupancy")
        assert "a state of 1,088 tokens" in occupancy
        assert ("the state is on the link" in occupancy) == loading
        key = lab.page.inner_text("#insp-key")
        assert ("none yet" in key and "where its group keeps one" in key) if loading else ("none" in key)
    walk(lab, q, (opening, 1, 2, 11, 12, 90, 92, 93, 94, 95, snap["num_steps"], 91, 5, 0), groups=True)


# Per grid cell, the share of its canvas pixels in the loading colour's hue (magenta: saturated, hue 285 to
# 340 degrees; the blocks' other colours are blue, teal, gold, rose, purple and greys) and the share close to the
# colour of computed KV (a private block's fill, or a hybrid model's group colour).
CELL_LOOKS = """async () => {
  const m = await import('/static/js/grid.js');
  const replay = window.kvlab.replay;
  const kv = replay.groups ? m.groupColors(replay.groups).map((c) => c.main) : null;
  const rgb = (css) => {
    const c = document.createElement('canvas'); c.width = c.height = 1;
    const x = c.getContext('2d'); x.fillStyle = css; x.fillRect(0, 0, 1, 1);
    return Array.from(x.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };
  const privateRgb = rgb(getComputedStyle(document.documentElement).getPropertyValue('--c-private').trim());
  const kvRgb = kv ? kv.map(rgb) : null;
  const canvas = document.querySelector('#grid canvas.grid-canvas');
  const k = canvas.width / canvas.clientWidth;
  const ctx = canvas.getContext('2d');
  const out = {};
  for (const cell of document.querySelectorAll('#grid .cell')) {
    const x0 = Math.round(cell.offsetLeft * k), y0 = Math.round(cell.offsetTop * k);
    const w = Math.max(1, Math.round(cell.offsetWidth * k)), h = Math.max(1, Math.round(cell.offsetHeight * k));
    const px = ctx.getImageData(x0, y0, w, h).data;
    const g = Number(cell.dataset.group ?? -1);
    const fill = kvRgb ? (g >= 0 ? kvRgb[g] : null) : privateRgb;
    let magenta = 0, computed = 0;
    for (let i = 0; i < px.length; i += 4) {
      const [r, gg, b] = [px[i], px[i + 1], px[i + 2]];
      const hi = Math.max(r, gg, b), lo = Math.min(r, gg, b);
      if (hi - lo > 50) {
        let hue = hi === r ? 60 * (((gg - b) / (hi - lo)) % 6) : hi === gg ? 60 * ((b - r) / (hi - lo) + 2)
          : 60 * ((r - gg) / (hi - lo) + 4);
        if (hue < 0) hue += 360;
        if (hue >= 285 && hue <= 340) magenta += 1;
      }
      if (fill && Math.abs(r - fill[0]) + Math.abs(gg - fill[1]) + Math.abs(b - fill[2]) < 24) computed += 1;
    }
    const n = px.length / 4;
    out[cell.dataset.block] = {magenta: magenta / n, computed: computed / n};
  }
  return out;
}"""


def _state_groups(lab: LabPage) -> list[int]:
    """The indices of the run's state (Mamba) groups (none without groups)."""
    return lab.page.evaluate(
        "(window.kvlab.replay.groups || []).flatMap((g, i) => (g.kind === 'mamba' ? [i] : []))"
    )


def assert_filling_drawn(lab: LabPage, filling: set[int]) -> None:
    """The grid draws exactly `filling` as blocks a load in flight is filling: their cells say so (data,
    title, label), their pixels are in the loading colour's hatching, none in the colour of computed KV;
    no other cell has a pixel of the loading colour (but for a state block's edge: rose antialiased over
    the page's dark blue passes through magenta hues, under 2 % of its pixels)."""
    cells = {c["block_id"]: c for c in lab.cells()}
    assert {b for b, c in cells.items() if c["filling"]} == filling
    looks = lab.page.evaluate(CELL_LOOKS)
    states = _state_groups(lab)
    for b in cells:
        look = looks[str(b)]
        if b in filling:
            assert look["magenta"] > 0.08, (b, look)
            assert look["computed"] < 0.01, (b, look)
            cell = lab.page.locator(f'#grid .cell[data-block="{b}"]')
            assert "being filled by a CPU-tier load in flight" in (cell.get_attribute("title") or "")
            assert "being filled by a CPU-tier load in flight" in (cell.get_attribute("aria-label") or "")
        else:
            edge = 0.02 if lab.page.evaluate(f"window.kvlab.replay.paged.groupOf({b})") in states else 0
            assert look["magenta"] <= edge, (b, look)
            assert lab.page.locator(f'#grid .cell[data-block="{b}"]').get_attribute("title") is None


@pytest.mark.parametrize(
    ("preset", "landed", "loader"),
    [("cpu-tier", 43, 7), ("sliding-window-tier", 41, 7), ("state-layers-tier", 93, 5)],
)
def test_the_grid_draws_the_blocks_a_load_fills_as_filling_until_it_lands(
    sized_lab: LabPage, preset: str, landed: int, loader: int
) -> None:
    """At the opening step a load is in flight (req-8's; req-6's, states included, on `state-layers-tier`):
    the grid draws the blocks it fills (the snapshot's `loading` blocks, the loader's blocks) in a style of
    their own, named in the legend, hatched in the tier panel's "being loaded" colour with no fill of
    computed KV, titled so; the loader's chips say so too. From the state its load lands on, no block is
    drawn so (nor any pixel of that colour), and scrubbing back draws them again."""
    lab = sized_lab
    lab.open(preset=preset)
    opening = lab.step()
    q = lab.query()
    snap = python_snapshot(q, opening)
    filling = {b["block_id"] for b in snap["blocks"] if b.get("loading")}
    (held,) = [r for r in snap["requests"] if r["status"] == "loading"]
    assert held["name"] == f"req-{loader + 1}"
    tables = held.get("block_tables") or [held["block_table"]]
    assert filling == {b for t in tables for b in t if b} != set()
    legend = lab.page.locator("#grid-filling-legend")
    assert legend.is_visible()
    assert "Being filled by a CPU-tier load" in legend.inner_text()
    assert "still on the host link" in (legend.get_attribute("title") or "")
    # The legend's cell (its glyph) and the tier panel's "being loaded" cell are in the same colour, the
    # grid's hatching.
    colours = lab.page.evaluate(
        """() => [getComputedStyle(document.querySelector('#grid-filling-legend .cell'), '::after').color,
             getComputedStyle(document.querySelector('#tier-legend .cell.t-loading')).backgroundColor]"""
    )
    assert colours[0] == colours[1], colours
    for step, want in ((opening, filling), (landed, set()), (opening, filling)):
        if step != lab.step():
            lab.seek(step)
        assert {b["block_id"] for b in python_snapshot(q, step)["blocks"] if b.get("loading")} == want
        assert_filling_drawn(lab, want)
        card = lab.page.locator(f'#seq-list .seq[data-rid="{loader}"]')
        chips = card.locator('.chip-map[data-filling="true"]')
        assert {int(chips.nth(i).get_attribute("data-block") or -1) for i in range(chips.count())} <= want
        assert (chips.count() > 0) == bool(want)
        if want:
            assert "being filled by the CPU-tier load in flight" in (
                chips.first.get_attribute("aria-label") or ""
            )
        # The paged panel's map says how many private blocks are being filled; the derivation, how much of
        # what it counts stored is still on the link.
        caption = lab.page.inner_text("#paged-map-caption")
        assert (f"({len(want)} of them being filled by a CPU-tier load)" in caption) == bool(want), caption
        derivation = lab.page.inner_text("#derivation")
        assert ("of it still on the link from the CPU tier" in derivation) == bool(want)
        # The inspector's state line on one of the loader's blocks: being loaded while the load is in flight.
        block = min(filling)
        lab.page.locator(f'#grid .cell[data-block="{block}"]').click()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        assert lab.page.get_attribute("#insp-state", "data-filling") == ("true" if want else "false")
        assert ("BEING LOADED" in lab.page.inner_text("#insp-state")) == bool(want)


def test_no_filling_style_without_a_tier(lab: LabPage) -> None:
    lab.open(preset="copilot")
    assert lab.page.locator("#grid-filling-legend").is_hidden()
    assert lab.page.locator("#paged-map-filling").is_hidden()
    assert not any(c["filling"] for c in lab.cells())
