"""The lab page in chromium: it loads cleanly, its numbers are kvsim.lab.snapshot's for the same
configuration and step, the inspector and the block tables show the replayed state, scrubbing (forward
and back) shows the state the event log implies, every preset renders, and a link reproduces the view."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

import kvsim.lab as lab_api
from kvsim.lab.screenshots import SETTLED

from .conftest import LabPage

# Card / panel element -> the snapshot key it shows.
CARDS = {
    "#card-multiplier": "concurrency_multiplier",
    "#card-prefix": "prefix_saved_bytes",
    "#card-waste": "contiguous_waste_fraction",
    "#card-slack": "paged_tail_slack_fraction",
    "#contig-reserved": "contiguous_reserved_bytes",
    "#contig-external": "contiguous_external_fragmentation",
    "#paged-allocated": "paged_allocated_bytes",
    "#paged-stored": "paged_stored_bytes",
    "#paged-slack": "paged_tail_slack_bytes",
}
SEQ_STATUS_SHOWN = ("running", "swapped", "preempted", "waiting", "finished", "rejected")


def python_snapshot(query: dict[str, Any], step: int) -> dict[str, Any]:
    """kvsim.lab.snapshot for the configuration the page ran (its resolved query) at `step`."""
    q = dict(query)
    return lab_api.snapshot(q.pop("preset"), step=step, **q)


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def assert_cards(lab: LabPage, snap: dict[str, Any]) -> None:
    shown = {sel: lab.value(sel) for sel in CARDS}
    want = {sel: None if snap[key] is None else float(snap[key]) for sel, key in CARDS.items()}
    bad = {sel: (shown[sel], want[sel]) for sel in CARDS if not same(shown[sel], want[sel])}
    assert bad == {}, f"cards differ from the snapshot at step {snap['step']}"
    # An undefined value (the multiplier while a side runs nothing) reads "—", not a number.
    for sel in CARDS:
        if want[sel] is None:
            assert lab.page.inner_text(sel) == "—", sel


def assert_blocks(lab: LabPage, snap: dict[str, Any]) -> None:
    """Every drawn cell against the snapshot's block of the same id (its state, ref count, tokens, and
    whether it is drawn as being filled by a CPU-tier load in flight: the snapshot's `loading`)."""
    want = {b["block_id"]: b for b in snap["blocks"]}
    cells = lab.cells()
    assert cells, "no cell drawn"
    diff = []
    for c in cells:
        b = want[c["block_id"]]
        got = (c["state"], c["ref_cnt"], c["num_tokens"], c["filling"])
        exp = (b["state"], b["ref_cnt"], b["num_tokens"], bool(b.get("loading")))
        if got != exp:
            diff.append((c["block_id"], got, exp))
    assert diff == [], f"blocks differ from the snapshot at step {snap['step']}: (id, page, snapshot)"


def assert_tables(lab: LabPage, snap: dict[str, Any]) -> None:
    """The block-table cards (the ones shown) against the snapshot's requests."""
    cards = lab.page.eval_on_selector_all(
        "#seq-list .seq",
        """els => els.map(e => ({rid: Number(e.dataset.rid), sample: Number(e.dataset.sample),
             status: e.dataset.status, ctx: Number(e.dataset.ctx),
             table: e.dataset.table ? e.dataset.table.split(',').map(Number) : []}))""",
    )
    assert cards or not snap["requests"], "no block-table card drawn"
    by_id = {(r["request_id"], r.get("sample", 0)): r for r in snap["requests"]}
    for card in cards:
        req = by_id[card["rid"], card["sample"]]
        assert card["status"] == req["status"], card
        assert card["ctx"] == req["context_tokens"], card
        assert card["table"] == list(req["block_table"]), card


def test_loads_without_console_error_or_failed_request(lab: LabPage) -> None:
    lab.open()
    assert lab.page.title().startswith("kvsim lab")
    assert lab.query()["preset"] == "copilot"
    assert lab.page.locator("#banner").is_hidden()
    # The opening step (after all four prompts are prefilled) and the pool of 64 blocks.
    _, _, step = lab_api.preset("copilot")
    assert lab.step() == step
    assert len(lab.cells()) == 64
    # The fixture asserts no console error, exception or failed request when the test ends.


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"#c-block-size": 32},
        {"#c-prefix": False},
        {"#c-block-size": 32, "#c-prefix": False},
    ],
    ids=["copilot", "block-32", "no-prefix-cache", "block-32-no-prefix-cache"],
)
def test_cards_equal_snapshot(lab: LabPage, changes: dict[str, Any]) -> None:
    lab.open(preset="copilot")
    for selector, value in changes.items():
        lab.change(selector, value)
    q = lab.query()
    if "#c-block-size" in changes:
        assert int(q["block_size"]) == 32
    if "#c-prefix" in changes:
        assert q["enable_prefix_caching"] in (False, "false")
    snap = python_snapshot(q, lab.step())
    assert_cards(lab, snap)
    assert_blocks(lab, snap)
    assert_tables(lab, snap)


def test_prefix_caching_off_saves_nothing(lab: LabPage) -> None:
    """The toggle changes the engine's run, not the page's arithmetic: with caching off nothing is shared."""
    lab.open(preset="copilot")
    on = lab.value("#card-prefix")
    lab.change("#c-prefix", False)
    assert on is not None
    assert on > 0
    assert lab.value("#card-prefix") == 0
    assert all(c["state"] != "shared" for c in lab.cells())


def test_clicking_a_shared_block_shows_ref_count_and_requests(lab: LabPage) -> None:
    lab.open(preset="copilot")
    snap = python_snapshot(lab.query(), lab.step())
    shared = [b for b in snap["blocks"] if b["state"] == "shared"]
    assert shared, "the copilot preset's opening step has shared blocks"
    block = shared[0]
    lab.page.click(f'#grid .cell[data-block="{block["block_id"]}"]')
    insp = lab.page.locator("#inspector")
    assert insp.locator("#insp-id").inner_text() == f"P_{block['block_id']}"
    assert insp.locator("#insp-state").get_attribute("data-state") == "shared"
    assert int(insp.locator("#insp-ref").get_attribute("data-ref")) == block["ref_cnt"] == 3
    ids = [int(x) for x in insp.locator("#insp-requests").get_attribute("data-requests").split(",")]
    assert sorted(ids) == sorted(block["request_ids"])
    names = {r["request_id"]: r["name"] for r in snap["requests"]}
    text = insp.locator("#insp-requests").inner_text()
    for rid in block["request_ids"]:
        assert names[rid] in text
    assert names[block["request_ids"][0]] in ("req-1", "req-2", "req-3")
    assert int(insp.locator("#insp-occupancy").get_attribute("data-tokens")) == block["num_tokens"]
    assert block["prefix_key"] is not None
    assert insp.locator("#insp-key").inner_text() == str(block["prefix_key"])
    assert insp.locator("#insp-key").inner_text().startswith("sys-coding-agent-v1:block-")
    if "offset_bytes" in block:
        assert int(insp.locator("#insp-offset").get_attribute("data-offset")) == block["offset_bytes"]
    # The block tables mark the chips of the selected block; clicking a chip selects its block.
    assert lab.page.locator(f'.chip-map.sel[data-block="{block["block_id"]}"]').count() == block["ref_cnt"]
    other = next(b for b in snap["blocks"] if b["state"] == "private")
    lab.page.click(f'.chip-map[data-block="{other["block_id"]}"]')
    assert insp.locator("#insp-id").inner_text() == f"P_{other['block_id']}"


@pytest.mark.parametrize("name", ["copilot", "parallel-sampling", "memory-pressure"])
def test_scrubbing_shows_the_state_the_event_log_implies(lab: LabPage, name: str) -> None:
    lab.open(preset=name)
    n = int(lab.page.evaluate("window.kvlab.replay.numSteps"))
    q = lab.query()
    # Forward, to the end, then back (undoing rows, and from a keyframe), then forward again.
    for k in [0, 1, 2, n // 3, n // 2, n, n - 1, 3, 0, n // 2 + 1]:
        k = max(0, min(n, k))
        lab.seek(k)
        snap = python_snapshot(q, k)
        assert snap["step"] == k
        assert_cards(lab, snap)
        assert_blocks(lab, snap)
        assert_tables(lab, snap)


def test_step_buttons_and_play(lab: LabPage) -> None:
    lab.open(preset="copilot")
    k = lab.step()
    lab.page.click("#r-next")
    assert lab.step() == k + 1
    lab.page.click("#r-prev")
    assert lab.step() == k
    lab.page.select_option("#r-speed", "10")
    lab.page.click("#r-play")
    assert lab.page.get_attribute("#r-play", "aria-label") == "Pause"
    lab.page.wait_for_function(f"Number(document.body.dataset.step) > {k + 2}", timeout=10_000)
    lab.page.click("#r-play")
    assert lab.page.get_attribute("#r-play", "aria-label") == "Play"
    stopped = lab.step()
    assert stopped < int(lab.page.evaluate("window.kvlab.replay.numSteps"))
    lab.page.wait_for_timeout(300)
    assert lab.step() == stopped


def test_keyboard_moves_through_the_grid(lab: LabPage) -> None:
    lab.open(preset="copilot")
    lab.page.click('#grid .cell[data-block="5"]')
    lab.page.keyboard.press("ArrowRight")
    assert lab.page.locator("#insp-id").inner_text() == "P_6"
    assert lab.page.evaluate("document.activeElement.dataset.block") == "6"
    lab.page.keyboard.press("ArrowLeft")
    lab.page.keyboard.press("ArrowLeft")
    assert lab.page.locator("#insp-id").inner_text() == "P_4"
    lab.page.keyboard.press("ArrowDown")
    below = int(lab.page.evaluate("document.activeElement.dataset.block"))
    assert below > 4
    lab.page.keyboard.press("Home")
    assert lab.page.locator("#insp-id").inner_text() == "P_0"
    assert lab.page.locator("#insp-state").get_attribute("data-state") == "null"


def test_url_round_trip(lab: LabPage, browser: Any) -> None:
    lab.open(preset="copilot")
    lab.change("#c-block-size", 32)
    lab.change("#c-prefix", False)
    lab.seek(5)
    lab.page.wait_for_function("new URLSearchParams(location.search).get('step') === '5'", timeout=5_000)
    url = lab.page.url
    q = parse_qs(urlparse(url).query)
    assert q["block_size"] == ["32"]
    assert q["enable_prefix_caching"] == ["false"]
    cards = {sel: lab.value(sel) for sel in CARDS}
    cells = lab.cells()
    # A fresh page on the link shows the same view.
    other = LabPage(page=lab.page.context.new_page(), server=lab.server, problems=lab.problems)
    other.page.goto(url)
    other.wait_ready()
    assert other.step() == 5
    assert other.query() == lab.query()
    assert other.page.locator("#c-block-size").input_value() == "32"
    assert not other.page.locator("#c-prefix").is_checked()
    assert {sel: other.value(sel) for sel in CARDS} == cards
    assert other.cells() == cells


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"preset": "copilot", "block_size": "seven"}, "block_size"),
        ({"preset": "copilot", "model": "no-such-model"}, "model"),
        ({"preset": "copilot", "num_blocks": 1}, "num_blocks"),
    ],
    ids=["wrong-type", "unknown-name", "out-of-range"],
)
def test_a_bad_parameter_shows_the_servers_message(lab: LabPage, query: dict[str, Any], field: str) -> None:
    lab.problems.expected_status.update({400, 413, 422})
    lab.open(**query)
    banner = lab.page.locator("#banner")
    assert banner.is_visible()
    assert field in banner.inner_text()
    # Chromium logs the 4xx answer itself as a console error; only that one is expected here.
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]


def test_an_unknown_preset_in_a_link_falls_back_to_the_default(sized_lab: LabPage) -> None:
    """newcomer46 #5: `?preset=pressure` (the name is memory-pressure) left every control empty, the
    scrubber at "step 0 / 0" and no way back but the URL. The page now shows the default preset, its
    dropdown filled, and says in one banner why and what it shows instead; the link is rewritten to it."""
    lab = sized_lab
    lab.problems.expected_status.add(400)
    lab.open(preset="pressure")
    default = lab_api.presets()[0]["name"]
    banner = lab.page.locator("#banner")
    assert banner.is_visible()
    text = banner.inner_text()
    assert text.startswith("preset 'pressure' is not one of ")
    assert "'memory-pressure'" in text
    assert text.endswith(f". Showing the default preset ({default}) instead.")
    assert lab.query()["preset"] == default
    assert lab.page.locator("#c-preset").input_value() == default
    assert lab.page.locator("#c-preset option").count() == len(lab_api.presets())
    assert lab.page.locator("#c-model").input_value() != ""
    assert lab.cells()
    # (Chromium logs the 400 itself as a console error: the one expected here)
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]
    lab.page.wait_for_function(
        f"new URLSearchParams(location.search).get('preset') === '{default}'", timeout=5_000
    )
    # A change made then runs as any other, and clears the banner.
    lab.change("#c-preset", "memory-pressure")
    assert not banner.is_visible()


def test_a_refusal_and_what_the_page_still_shows_are_two_sentences(lab: LabPage) -> None:
    """newcomer46 #7: the server's refusal, which ends without a full stop, ran into "The page still
    shows the previous run" ("...a smaller block size or model The page ..."): a full stop between."""
    lab.problems.expected_status.update({400, 422})
    lab.open(preset="copilot", model="qwen3-30b-a3b")
    before = lab.runs()
    lab.page.locator("#c-kv-memory").fill("1")
    lab.page.locator("#c-kv-memory").dispatch_event("change")
    lab.wait_ready(before + 1)
    text = lab.page.locator("#banner").inner_text()
    assert "The page still shows the previous run" in text
    head = text.split(" The page still shows the previous run")[0]
    assert head.endswith("."), text
    assert ".." not in text
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]


def preset_names() -> list[str]:
    return [p["name"] for p in lab_api.presets() if p.get("available", True)]


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_renders(lab: LabPage, name: str) -> None:
    lab.open(preset=name)
    assert lab.page.locator("#banner").is_hidden()
    q = lab.query()
    assert q["preset"] == name
    info = lab.page.evaluate(
        "({n: window.kvlab.replay.numBlocks, steps: window.kvlab.replay.numSteps, "
        "seqs: document.querySelectorAll('#seq-list .seq').length})"
    )
    assert info["steps"] > 0
    assert len(lab.cells()) == min(info["n"], 2048)
    # The cards show the snapshot's numbers at the opening step, and the drawn blocks its blocks.
    snap = python_snapshot(q, lab.step())
    assert_cards(lab, snap)
    assert_blocks(lab, snap)
    # Every experiment shows a verdict on the current state, none of them a failed invariant.
    verdicts = lab.page.eval_on_selector_all("[data-check]", "els => els.map(e => e.dataset.pass)")
    assert verdicts
    assert "false" not in verdicts
    assert lab.page.locator("#ev-list li").count() >= 1


def test_side_by_side_tracks_at_the_same_step(lab: LabPage) -> None:
    """Each panel counts its own run's running sequences at the step: the snapshot's paged and contiguous."""
    lab.open(preset="memory-pressure")
    for k in (0, lab.step(), int(lab.page.evaluate("window.kvlab.replay.numSteps")) // 2):
        lab.seek(k)
        snap = python_snapshot(lab.query(), k)
        paged = sum(r["status"] == "running" for r in snap["requests"])
        contiguous = sum(r["status"] == "running" for r in snap["contiguous"]["requests"])
        assert int(lab.page.get_attribute("#paged-batch", "data-running")) == paged
        assert int(lab.page.get_attribute("#contig-batch", "data-running")) == contiguous


def test_event_stream_filters(lab: LabPage) -> None:
    lab.open(preset="copilot")
    lab.seek(int(lab.page.evaluate("window.kvlab.replay.numSteps")))
    kinds = set(lab.page.eval_on_selector_all("#ev-list li.ev", "els => els.map(e => e.dataset.kind)"))
    assert "free" in kinds
    lab.page.click('#ev-kinds [data-kind="free"]')
    kinds = set(lab.page.eval_on_selector_all("#ev-list li.ev", "els => els.map(e => e.dataset.kind)"))
    assert kinds
    assert "free" not in kinds
    snap = python_snapshot(lab.query(), lab.step())
    rid = next(r["request_id"] for r in snap["requests"] if r["name"] == "req-2")
    lab.page.fill("#ev-request", "req-2")
    rids = set(lab.page.eval_on_selector_all("#ev-list li.ev", "els => els.map(e => Number(e.dataset.rid))"))
    assert rids == {rid}
    # Clicking a request's name in the stream filters by it.
    lab.page.fill("#ev-request", "")
    lab.page.click('#ev-list li.ev .who[data-filter="req-3"] >> nth=0')
    assert lab.page.input_value("#ev-request") == "req-3"
    rid3 = next(r["request_id"] for r in snap["requests"] if r["name"] == "req-3")
    rids = set(lab.page.eval_on_selector_all("#ev-list li.ev", "els => els.map(e => Number(e.dataset.rid))"))
    assert rids == {rid3}
    lab.page.fill("#ev-request", "req-2")
    # Newest first: the steps never increase down the list.
    steps = lab.page.eval_on_selector_all(
        "#ev-list li.ev", "els => els.map(e => Number(e.querySelector('.ev-when').textContent.split(' ')[1]))"
    )
    assert steps == sorted(steps, reverse=True)


def test_experiment_sets_up_its_preset(lab: LabPage) -> None:
    lab.open(preset="copilot")
    before = lab.runs()
    lab.page.click('[data-apply="pressure"]')
    lab.wait_ready(before + 1)
    assert lab.query()["preset"] == "memory-pressure"
    lab.page.click('[data-apply="block-size"]')
    lab.wait_ready(before + 2)
    assert int(lab.query()["block_size"]) == 32
    assert lab.query()["preset"] == "memory-pressure"


def test_a_large_pool_is_shown_through_a_window(lab: LabPage) -> None:
    """Past 2,048 blocks the grid shows a window with an overview; moving past its edge moves it."""
    big = [p for p in lab_api.presets() if p.get("available", True) and p["num_requests"] >= 2000]
    assert big, "a preset of 2,000 requests"
    lab.open(preset=big[0]["name"])
    n = int(lab.page.evaluate("window.kvlab.replay.numBlocks"))
    assert n > 2048
    assert lab.page.locator("#grid-overview").is_visible()
    lab.page.click('#grid .cell[data-block="1"]')
    lab.page.keyboard.press("End")
    assert lab.page.locator("#insp-id").inner_text() == f"P_{n - 1}"
    ids = [c["block_id"] for c in lab.cells()]
    assert ids[-1] == n - 1
    assert ids[0] >= n - 2048
    assert_blocks(lab, python_snapshot(lab.query(), lab.step()))


def test_a_run_past_the_caps_is_refused_and_changes_nothing(lab: LabPage) -> None:
    big = next(p["name"] for p in lab_api.presets() if p.get("available", True) and p["num_requests"] >= 2000)
    lab.problems.expected_status.update({400, 413})
    lab.open(preset=big)
    shown = lab.cells()
    before = lab.runs()
    cap = int(lab.page.evaluate("window.kvlab.presets.limits.max_blocks"))
    mib = (cap + 1) * int(lab.page.evaluate("window.kvlab.replay.bundle.bytes_per_block")) / 2**20
    shown_memory = lab.page.locator("#c-kv-memory").input_value()
    lab.page.locator("#c-kv-memory").fill(str(mib))
    lab.page.locator("#c-kv-memory").dispatch_event("change")
    lab.wait_ready(before + 1)
    assert lab.page.locator("#banner").is_visible()
    text = lab.page.locator("#banner").inner_text()
    # (in the field's words and MiB: the API's parameter and bytes are not what the user typed)
    assert text.startswith(f"KV cache memory (MiB) {mib} MiB"), text
    assert "kv_cache_bytes" not in text
    assert f"more than the page draws (max_blocks {cap:,})" in text
    assert text.endswith("The page still shows the previous run; its settings are back in the controls.")
    assert lab.query()["preset"] == big
    assert lab.cells() == shown
    assert lab.page.locator("#c-kv-memory").input_value() == shown_memory
    assert float(shown_memory) * 2**20 == lab.query()["kv_cache_bytes"]
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]


def test_a_trace_preset_without_its_trace_says_so(
    lab: LabPage, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The Mooncake preset with no traces folder: listed as unavailable, and choosing it shows why."""
    monkeypatch.setenv("KVSIM_TRACES", str(tmp_path))  # the server runs in this process
    lab.problems.expected_status.update({400, 404, 413, 422})
    lab.open(preset="copilot")
    label = lab.page.locator('#c-preset option[value="mooncake"]').inner_text()
    assert "unavailable" in label
    before = lab.runs()
    lab.page.select_option("#c-preset", "mooncake")
    lab.wait_ready(before + 1)
    banner = lab.page.locator("#banner")
    assert banner.is_visible()
    assert "KVSIM_TRACES" in banner.inner_text()
    # The refused run changed nothing: the copilot run is still shown, its preset still selected.
    assert lab.query()["preset"] == "copilot"
    assert lab.page.locator("#c-preset").input_value() == "copilot"
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]


def test_clicking_the_chart_seeks(lab: LabPage) -> None:
    lab.open(preset="copilot")
    n = int(lab.page.evaluate("window.kvlab.replay.numSteps"))
    box = lab.page.locator("#chart").bounding_box()
    assert box is not None
    # The plot spans the canvas from its 64-pixel axis gutter to 8 pixels before the right edge.
    x = box["x"] + 64 + (box["width"] - 72) * 0.5
    lab.page.mouse.click(x, box["y"] + box["height"] / 2)
    lab.page.wait_for_function(f"Math.abs(Number(document.body.dataset.step) - {n // 2}) <= 1", timeout=5_000)
    lab.page.wait_for_function(SETTLED, timeout=10_000)  # the panels' detail below the fold follows
    snap = python_snapshot(lab.query(), lab.step())
    assert_cards(lab, snap)


@pytest.mark.parametrize("model", ["llama-3-8b", "opt-13b", "deepseek-v3"], ids=["gqa", "mha", "mla"])
def test_model_switch_shows_its_own_bytes_and_formula(lab: LabPage, model: str) -> None:
    """The derivation is the bundle's formula for the chosen model (GQA counts KV heads, MLA its latent) and
    the cards follow the engine's run with that model's bytes per token."""
    lab.open(preset="copilot")
    if lab.query()["model"] != model:
        lab.change("#c-model", model)
    bundle_model = lab.page.evaluate("window.kvlab.replay.bundle.model")
    assert bundle_model["name"] == model
    text = lab.page.locator("#derivation").inner_text()
    assert bundle_model["formula"] in text
    if bundle_model["kv_lora_rank"]:
        assert "MLA" in text
    elif bundle_model["num_kv_heads"] < bundle_model["num_heads"]:
        assert f"{bundle_model['num_kv_heads']} KV heads" in text
    snap = python_snapshot(lab.query(), lab.step())
    assert snap["bytes_per_token"] == bundle_model["bytes_per_token"]
    assert_cards(lab, snap)
    # rev48 #4: B is the block's tokens everywhere (the control, ⌈tokens / B⌉, B − 1); bytes are spelled out.
    bs, bpt, bpb = lab.page.evaluate(
        "(b => [b.block_size, b.bytes_per_token ?? b.model.bytes_per_token, b.bytes_per_block])(kvlab.replay.bundle)"
    )
    assert bpb == bs * bpt
    assert f"B = {bs} tokens a block × {bpt:,} bytes a token = " in text
    assert f"({bpb:,} bytes)" in text
    assert lab.page.text_content("label[for=c-block-size]") == "Block size B (tokens)"


@pytest.mark.parametrize(
    ("selector", "value"),
    [
        ("#c-policy", "reserve"),
        ("#c-preemption", "swap"),
        ("#c-sampling", "fork-cow"),
        ("#c-contig", "static"),
        ("#c-contig", "orca-max"),
        ("#c-contig", "orca-pow2"),
        ("#c-placement", "buddy"),
    ],
)
def test_each_control_reruns_the_engine(lab: LabPage, selector: str, value: str) -> None:
    lab.open(preset="copilot")
    lab.change(selector, value)
    assert lab.page.locator("#banner").is_hidden()
    assert lab.page.locator(selector).input_value() == value
    q = lab.query()
    assert value in q.values()
    lab.seek(int(lab.page.evaluate("window.kvlab.replay.numSteps")) // 2)
    # The server's /api/state for the page's own query and step ...
    params = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in q.items()}
    answer = lab.page.request.get(f"{lab.server.url}api/state?{urlencode({**params, 'step': lab.step()})}")
    assert answer.ok
    assert_cards(lab, answer.json())
    assert_blocks(lab, answer.json())
    # ... and kvsim.lab.snapshot from Python.
    snap = python_snapshot(q, lab.step())
    assert_cards(lab, snap)
    assert_blocks(lab, snap)


# The width the longest option a <select> can show (an enabled one: a disabled option's reason is read in the
# open list only) takes in the select's own font, against the room its box leaves for text (its width less its
# padding and the native arrow).
FITS = """sel => {
  const style = getComputedStyle(sel);
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const names = [...sel.options].filter(o => !o.disabled).map(o => o.textContent);
  const widest = Math.max(...names.map(n => ctx.measureText(n).width));
  const room = sel.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 20;
  return [widest, room, names.sort((a, b) => b.length - a.length)[0]];
}"""


def test_the_model_select_shows_every_name_whole(sized_lab: LabPage) -> None:
    """A newcomer read "qwen3-next-80b-a3b" cut to "qwen3-next-80b-a" in the Model select at 1,400 px: the
    control is two columns wide (the whole row on a phone), room for the longest preset's name."""
    sized_lab.open()
    widest, room, name = sized_lab.page.eval_on_selector("#c-model", FITS)
    assert name  # the options are there
    assert widest <= room, f"{name!r} takes {widest:.0f} px of a {room:.0f} px select"
