"""The lab page on hybrid models (vLLM's hybrid KV-cache manager: sliding windows, state layers), at a desktop
window and a phone's viewport: the grid colours each block by its KV-cache group, with a legend naming each
group (kind, window, layers) and the blocks it holds; the block tables show one row per group, the null
block where a window left; scrubbing shows a block leaving the window (freed, the null block in its place)
and coming back when scrubbing back; the derivation gives per-group bytes and the pool's blocks; options
the server would refuse are disabled with the reason; the contiguous side says there is none. Every
number is checked against `kvsim.lab.snapshot` for the same configuration and step."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import LabPage
from .test_lab_page import assert_blocks, assert_cards, python_snapshot

HYBRID = [
    "sliding-window",
    "sliding-window-tier",
    "state-layers",
    "state-layers-caching",
    "state-layers-tier",
]

# The grid canvas's colour at the middle of cell `b` (an [r, g, b] list), and a CSS colour as [r, g, b].
CELL_PIXEL = """(b) => {
  const cell = document.querySelector(`#grid .cell[data-block="${b}"]`);
  const canvas = document.querySelector('#grid canvas.grid-canvas');
  const k = canvas.width / canvas.clientWidth;
  const x = Math.round((cell.offsetLeft + cell.offsetWidth / 2) * k);
  const y = Math.round((cell.offsetTop + cell.offsetHeight * 0.7) * k);
  return Array.from(canvas.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3));
}"""
CSS_RGB = """(css) => {
  const c = document.createElement('canvas'); c.width = c.height = 1;
  const ctx = c.getContext('2d'); ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
  return Array.from(ctx.getImageData(0, 0, 1, 1).data.slice(0, 3));
}"""
GROUP_COLOURS = """async () => {
  const m = await import('/static/js/grid.js');
  return m.groupColors(window.kvlab.replay.groups).map((c) => c.main);
}"""


def tables_shown(lab: LabPage) -> dict[tuple[int, int], list[list[int]]]:
    """Each card's tables, as its data attribute carries them (groups joined by "|")."""
    cards = lab.page.eval_on_selector_all(
        "#seq-list .seq",
        "els => els.map(e => [Number(e.dataset.rid), Number(e.dataset.sample), e.dataset.table])",
    )
    return {
        (rid, sample): [[int(b) for b in t.split(",") if b != ""] for t in text.split("|")]
        for rid, sample, text in cards
    }


def assert_group_tables(lab: LabPage, snap: dict[str, Any]) -> None:
    """The cards' tables (every group's, null blocks in place) and their group rows against the snapshot."""
    shown = tables_shown(lab)
    assert shown, "no block-table card"
    want = {(r["request_id"], r["sample"]): r["block_tables"] for r in snap["requests"]}
    for key, tables in shown.items():
        assert tables == want[key], key
    ngroups = len(snap["groups"])
    rows = lab.page.eval_on_selector_all(
        "#seq-list .seq",
        """els => els.map(e => [Number(e.dataset.rid), [...e.querySelectorAll('.group-row')].map(g =>
             [Number(g.dataset.group), [...g.querySelectorAll('[data-null]')].reduce((n, c) => n + Number(c.dataset.null), 0),
              [...g.querySelectorAll('.chip-map[data-block]')].map(c => Number(c.dataset.block))])])""",
    )
    for rid, groups in rows:
        assert [g for g, _, _ in groups] == list(range(ngroups))
        for g, nulls, chips in groups:
            table = next(t for (r, _), t in shown.items() if r == rid)[g]
            lead = len(table) - len([b for b in table if b != 0])
            assert nulls == lead, (rid, g)
            assert chips == table[lead : lead + len(chips)], (rid, g)


@pytest.mark.parametrize("name", HYBRID)
def test_blocks_are_coloured_by_group_with_a_legend_naming_each(sized_lab: LabPage, name: str) -> None:
    lab = sized_lab
    lab.open(preset=name)
    snap = python_snapshot(lab.query(), lab.step())
    layout = lab.page.evaluate("window.kvlab.replay.bundle.layout")
    # The legend: one entry per group, its kind, window, layers and the blocks it holds at this step.
    items = lab.page.eval_on_selector_all(
        "#grid-groups li",
        """els => els.map(e => ({group: Number(e.dataset.group), kind: e.dataset.kind, window: Number(e.dataset.window),
             layers: Number(e.dataset.layers), held: Number(e.querySelector('[data-group-blocks]').dataset.value),
             text: e.textContent}))""",
    )
    assert [i["group"] for i in items] == list(range(len(layout["groups"])))
    for item, g, info in zip(items, layout["groups"], snap["groups"], strict=True):
        assert (item["kind"], item["window"], item["layers"]) == (g["kind"], g["window"], len(g["layer_ids"]))
        assert item["held"] == info["blocks"]
        assert f"{len(g['layer_ids'])} layers" in item["text"]
        words = {
            "sliding_window": f"sliding window of {g['window']} tokens",
            "full": "full attention",
            "mamba": "state (Mamba / linear attention)",
        }[g["kind"]]
        assert words in item["text"]
    # Each cell's group is the snapshot's; its state, ref count and tokens too.
    cells = lab.page.eval_on_selector_all(
        "#grid .cell", "els => els.map(e => [Number(e.dataset.block), Number(e.dataset.group)])"
    )
    groups = {b["block_id"]: b.get("group") for b in snap["blocks"]}
    assert {b: g for b, g in cells} == {b: -1 if groups[b] is None else groups[b] for b, _ in cells}
    assert_blocks(lab, snap)
    # The drawn colour of a full private block is its group's, and the groups' colours differ (a block a
    # CPU-tier load is filling holds no KV yet: drawn apart, `test_lab_tier.py`).
    colours = [lab.page.evaluate(CSS_RGB, c) for c in lab.page.evaluate(GROUP_COLOURS)]
    assert len({tuple(c) for c in colours}) == len(colours)
    seen = set()
    for b in snap["blocks"]:
        g = b.get("group")
        if b["state"] != "private" or g is None or g in seen or b.get("loading"):
            continue
        size = layout["groups"][g]["block_size"]
        if layout["groups"][g]["kind"] != "mamba" and b["num_tokens"] < size:
            continue
        got = lab.page.evaluate(CELL_PIXEL, b["block_id"])
        assert all(abs(x - y) <= 4 for x, y in zip(got, colours[g], strict=True)), (b, got, colours[g])
        seen.add(g)
    assert seen == set(range(len(layout["groups"]))), seen


@pytest.mark.parametrize("name", HYBRID)
def test_block_tables_show_one_row_per_group(sized_lab: LabPage, name: str) -> None:
    lab = sized_lab
    lab.open(preset=name)
    snap = python_snapshot(lab.query(), lab.step())
    assert_group_tables(lab, snap)
    assert_cards(lab, snap)


def test_scrubbing_shows_a_block_leave_the_window(sized_lab: LabPage) -> None:
    """The first block to leave a sliding window: held in its request's window table at the step before,
    freed with the null block in its place after (the event stream says so), held again scrubbing back."""
    lab = sized_lab
    lab.open(preset="sliding-window")
    ev = lab.page.evaluate(
        """() => { const t = kvlab.replay.paged, code = t.kindNames.indexOf('window');
          for (let i = 0; i < t.numEvents; i += 1) if (t.evKind[i] === code) {
            const e = t.event(i); return {step: e[0], rid: e[3], sample: e[4], block: e[5], group: e[6]}; }
          return null; }"""
    )
    assert ev is not None
    q = lab.query()
    before, after = ev["step"], ev["step"] + 1  # a scheduling event: it belongs to the state after its step
    for k, held in ((before, True), (after, False), (before, True)):
        lab.seek(k)
        snap = python_snapshot(q, k)
        assert_blocks(lab, snap)
        assert_group_tables(lab, snap)
        req = next(r for r in snap["requests"] if r["request_id"] == ev["rid"])
        window = req["block_tables"][ev["group"]]
        cell = lab.page.locator(f'#grid .cell[data-block="{ev["block"]}"]')
        if held:
            i = window.index(ev["block"])
            assert cell.get_attribute("data-state") in ("private", "shared")
            assert cell.get_attribute("data-group") == str(ev["group"])
        else:
            assert ev["block"] not in window
            assert window[i] == 0  # the null block in its place, the table as long as before
            assert cell.get_attribute("data-state") in ("free", "cached")
            lab.page.locator("#ev-list").scroll_into_view_if_needed()
            lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
            texts = lab.page.eval_on_selector_all(
                "#ev-list li.ev-window", "els => els.map(e => e.querySelector('.ev-text').textContent)"
            )
            assert any(f"P_{ev['block']} left" in t and "null block" in t for t in texts), texts


@pytest.mark.parametrize("name", HYBRID)
def test_derivation_gives_per_group_bytes_and_the_pool(sized_lab: LabPage, name: str) -> None:
    lab = sized_lab
    lab.open(preset=name)
    b = lab.page.evaluate(
        "({layout: kvlab.replay.bundle.layout, n: kvlab.replay.bundle.num_blocks, "
        "kv: kvlab.replay.bundle.kv_cache_bytes, bpb: kvlab.replay.bundle.bytes_per_block})"
    )
    lab.page.locator("#derivation").scroll_into_view_if_needed()
    lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
    text = lab.page.locator("#derivation").inner_text()
    layout = b["layout"]
    for g in layout["groups"]:
        assert g["page_formula"] in text
        assert f"({g['bytes_per_block']:,} bytes)" in text
    assert b["bpb"] == layout["bytes_per_block"] == max(g["bytes_per_block"] for g in layout["groups"])
    assert b["n"] == b["kv"] // b["bpb"]
    assert f"= {b['n']} blocks" in text
    for line in layout["unify"]:
        assert line in text
    # The blocks each group holds at this step, and at another.
    for k in (lab.step(), lab.step() + 7):
        lab.seek(k)
        snap = python_snapshot(lab.query(), k)
        lab.page.locator("#derivation").scroll_into_view_if_needed()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        held = lab.page.eval_on_selector_all(
            "#derivation [data-deriv^='group:']", "els => els.map(e => Number(e.dataset.value))"
        )
        assert held == [g["blocks"] for g in snap["groups"]]
        assert sum(held) * b["bpb"] == snap["paged_allocated_bytes"]


def test_hybrid_options_the_server_would_refuse_are_disabled_with_the_reason(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="sliding-window")
    for sel, value, why in (
        ("#c-policy", "reserve", "model gpt-oss-20b needs vllm"),
        ("#c-sampling", "fork-cow", "model gpt-oss-20b needs independent"),
        ("#c-preemption", "swap", "model gpt-oss-20b needs recompute"),
        ("#c-preemption", "auto", "model gpt-oss-20b needs recompute"),
    ):
        option = lab.page.locator(f'{sel} option[value="{value}"]')
        assert option.is_disabled(), (sel, value)
        assert why in option.inner_text()
    assert lab.page.locator("#c-contig").is_disabled()
    # A model with state layers runs with prefix caching on as well (vLLM's Mamba align mode): nothing
    # disables it, and the state-layers preset's switch turns caching on.
    option = lab.page.locator('#c-model option[value="qwen3-next-80b-a3b"]')
    assert not option.is_disabled()
    lab.open(preset="state-layers")
    switch = lab.page.locator("#c-prefix")
    assert not switch.is_disabled()
    assert not switch.is_checked()
    lab.open(preset="state-layers", enable_prefix_caching="true")
    assert lab.page.locator("#c-prefix").is_checked()
    assert lab.query()["enable_prefix_caching"] in (True, "true")
    # And the reverse: fork-cow disables every hybrid model, naming why.
    lab.open(preset="copilot", sampling="fork-cow")
    hybrid = lab.page.evaluate("kvlab.presets.options.hybrid_models")
    assert {"gpt-oss-20b", "gemma-3-27b", "mistral-7b", "qwen3-next-80b-a3b"} <= set(hybrid)
    for model in hybrid:
        option = lab.page.locator(f'#c-model option[value="{model}"]')
        assert option.is_disabled(), model
        assert "needs sampling independent" in option.inner_text()
    # Every model option left enabled runs.
    q = lab.query()
    enabled = lab.page.eval_on_selector_all("#c-model option:not([disabled])", "els => els.map(e => e.value)")
    for model in enabled:
        params = {k: str(v).lower() if isinstance(v, bool) else v for k, v in {**q, "model": model}.items()}
        answer = lab.page.request.get(f"{lab.server.url}api/state", params=params)
        assert answer.status in (200, 413), (model, answer.text())


def test_the_contiguous_side_says_there_is_no_baseline(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="state-layers")
    assert "no baseline" in lab.page.inner_text("#contig-title")
    assert "hybrid KV-cache manager" in (lab.page.text_content("#contig-explain") or "")
    for sel in ("#card-multiplier", "#card-waste", "#contig-reserved"):
        assert lab.value(sel) is None
        assert lab.page.inner_text(sel) == "—"
    assert lab.page.evaluate("kvlab.replay.contig") is None
    assert_cards(lab, python_snapshot(lab.query(), lab.step()))
