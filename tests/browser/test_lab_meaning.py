"""What the lab page says must be true of the state it shows, at a desktop window and at a phone's
viewport: the multiplier and "—" where it has no meaning, each baseline's own panel, the pool's memory
kept across block sizes and models, sequences named per sample, options the server would refuse
disabled or explained, experiment checks that apply only where they can hold (and can fail), and a chart
whose cursor, ticks and lines read right."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import kvsim.lab as lab_api

from .conftest import LabPage
from .test_lab_page import assert_cards, python_snapshot

MIB = 2**20


def running(lab: LabPage) -> tuple[int, int]:
    """The paged and the contiguous panel's running sequences, as the page shows them."""
    return (
        int(lab.page.get_attribute("#paged-batch", "data-running")),
        int(lab.page.get_attribute("#contig-batch", "data-running")),
    )


def test_multiplier_compares_sequences_per_byte_and_says_dash_when_undefined(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="memory-pressure", contiguous_policy="orca-pow2", step=40)
    paged, contiguous = running(lab)
    assert paged > contiguous
    shown = lab.value("#card-multiplier")
    assert shown is not None
    assert shown > 1  # the paged pool runs more sequences in the same memory (it once said 0.92×)
    assert_cards(lab, python_snapshot(lab.query(), 40))
    assert lab.page.inner_text("#card-multiplier") == f"{shown:.2f}×"
    lab.open(preset="copilot", step=0)
    assert lab.value("#card-multiplier") is None
    assert lab.page.inner_text("#card-multiplier") == "—"  # nothing runs: not 0 ÷ 0 = 0.00×
    # Nor is a share of nothing a number: nothing reserved or allocated, no waste, slack or use to speak
    # of (it read "Used 0 B (100.0%)" beside "waste 0.0%").
    for sel in ("#card-waste", "#card-slack", "#contig-internal", "#paged-internal"):
        assert lab.page.inner_text(sel) == "—", sel
    assert lab.page.inner_text("#contig-used") == "0 B (—)"
    assert lab.page.inner_text("#paged-slack") == "0 B (—)"
    lab.seek(int(lab.page.evaluate("window.kvlab.replay.numSteps")))
    assert lab.page.inner_text("#card-multiplier") == "—"
    assert "running sequences" in lab.page.inner_text("#derivation")


def test_each_percentage_says_what_it_is_a_share_of(sized_lab: LabPage) -> None:
    """rev48 #5: the contiguous panel's internal fragmentation (a share of the slots reserved) and external
    fragmentation (a share of the whole pool) sat side by side with nothing saying which; each now names
    its base, and the value is that share of it."""
    lab = sized_lab
    lab.open(preset="memory-pressure", contiguous_policy="orca-pow2", step=60)
    snap = python_snapshot(lab.query(), 60)
    reserved, used = snap["contiguous_reserved_bytes"], snap["contiguous_used_bytes"]
    assert reserved > used > 0
    assert lab.value("#contig-internal") == pytest.approx((reserved - used) / reserved, rel=1e-12)
    assert lab.value("#card-waste") == pytest.approx((reserved - used) / reserved, rel=1e-12)
    pool = lab.page.evaluate("(b => b.contiguous.capacity_tokens * b.bytes_per_token)(kvlab.replay.bundle)")
    external = snap["contiguous_external_bytes"]
    assert 0 < external < reserved  # where a share of the reservation and of the pool differ
    assert lab.value("#contig-external") == pytest.approx(external / pool, rel=1e-12)
    note = lambda sel: lab.page.inner_text(f"{sel} + small")  # noqa: E731
    assert note("#contig-internal").startswith("of the reserved slots")
    assert note("#contig-external").startswith("of the whole pool")
    assert lab.page.inner_text("#card-waste + .card-note").startswith("Of the contiguous reservation")
    assert lab.page.inner_text("#card-slack-note").startswith("Of the paged allocation")


BASELINE_TITLES = {
    "static": "static pre-allocation",
    "orca-max": "prompt + max_tokens",
    "orca-pow2": "power of two",
    "orca-oracle": "exact length",
}
BASELINE_EXPLAINS = {
    "static": "the whole context",
    "orca-max": "the max_tokens its client asked for",
    "orca-pow2": "next power of two of its target",
    "orca-oracle": "exactly the output it will generate",
}


def test_the_contiguous_panel_names_the_baseline_it_shows(sized_lab: LabPage) -> None:
    """Its title and explanation follow the baseline (it read "static pre-allocation" whatever ran), and
    orca-max reserves what the clients ask for, more than orca-oracle (the two once ran the same)."""
    lab = sized_lab
    lab.open(preset="copilot")
    reserved = {}
    for policy, words in BASELINE_TITLES.items():
        if lab.query()["contiguous_policy"] != policy:
            lab.change("#c-contig", policy)
        assert words in lab.page.inner_text("#contig-title")
        for other, other_words in BASELINE_TITLES.items():
            if other != policy:
                assert other_words not in lab.page.inner_text("#contig-title")
        assert BASELINE_EXPLAINS[policy] in lab.page.inner_text("#contig-explain")
        reserved[policy] = lab.value("#contig-reserved")
    assert reserved["orca-max"] > reserved["orca-oracle"]
    assert "max_tokens 128" in lab.page.inner_text("#c-preset-desc")


def test_block_size_and_model_keep_the_memory(sized_lab: LabPage) -> None:
    """As vLLM sizes a pool: the memory stays and the block count follows (block size 32 once doubled the
    pool, 128 MiB to 256 MiB, and the memory pressure went away)."""
    lab = sized_lab
    lab.open(preset="memory-pressure")
    memory = lab.page.input_value("#c-kv-memory")
    pool = float(memory) * MIB
    blocks = len(lab.cells())
    assert f"= {blocks} blocks" in lab.page.inner_text("#c-pool-blocks")
    assert "memory kept" in lab.page.inner_text("#c-bpb")
    lab.change("#c-block-size", 32)
    assert lab.page.input_value("#c-kv-memory") == memory
    assert len(lab.cells()) == blocks // 2
    assert f"= {blocks // 2} blocks" in lab.page.inner_text("#c-pool-blocks")
    b = lab.page.evaluate("({n: kvlab.replay.bundle.num_blocks, bpb: kvlab.replay.bundle.bytes_per_block})")
    assert b["n"] * b["bpb"] == pool
    assert (lab.page.evaluate("kvlab.replay.paged.metrics.preemptions.at(-1)") or 0) > 0  # still pressed
    lab.change("#c-model", "qwen2.5-7b")
    assert lab.page.input_value("#c-kv-memory") == memory
    b = lab.page.evaluate("({n: kvlab.replay.bundle.num_blocks, bpb: kvlab.replay.bundle.bytes_per_block})")
    assert b["n"] == pool // b["bpb"]
    # A new memory is cut into blocks of the current size.
    lab.change("#c-kv-memory", float(memory) * 2)
    assert lab.page.evaluate("kvlab.replay.bundle.num_blocks") == 2 * pool // b["bpb"]


def test_sequences_are_named_per_sample_everywhere(sized_lab: LabPage) -> None:
    """Each sample is named `req-1·s1` in the region map, the inspector and the API alike, and a block's
    "mapped by" lists one pill per block table holding it (ref_cnt of them)."""
    lab = sized_lab
    lab.open(preset="parallel-sampling", step=6)
    snap = python_snapshot(lab.query(), 6)
    labels = lab.page.get_attribute("#contig-map", "data-labels").split(",")
    assert labels
    api_names = {r["name"] for r in snap["contiguous"]["requests"] if r["region"]}
    assert set(labels) <= api_names
    assert len(set(labels)) == len(labels)  # not every region labelled req-1·s0
    shared = max(snap["blocks"], key=lambda b: b["ref_cnt"])
    assert shared["ref_cnt"] > len(shared["request_ids"])  # samples of one request share it
    lab.page.click(f'#grid .cell[data-block="{shared["block_id"]}"]')
    pills = lab.page.locator("#insp-requests .pill").all_inner_texts()
    assert len(pills) == shared["ref_cnt"]
    assert sorted(pills) == sorted(shared["sequences"])
    cards = lab.page.eval_on_selector_all(
        "#seq-list .seq header b.mono", "els => els.map(e => e.textContent)"
    )
    assert set(cards) <= {r["name"] for r in snap["requests"]}


TEXT_FITS = """el => {
  // The width the element's text needs in its own font, against the room it has.
  const cs = getComputedStyle(el);
  const text = el.tagName === "SELECT" ? el.options[el.selectedIndex].text : el.textContent;
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
  const room = el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)
    - (el.tagName === "SELECT" ? 20 : 0);
  return {text, need: ctx.measureText(text).width, room};
}"""


def test_preset_and_sequence_names_are_not_cut(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="parallel-sampling")
    # Every preset's title, as the select would show it when chosen.
    for i in range(lab.page.locator("#c-preset option").count()):
        fit = lab.page.eval_on_selector(
            "#c-preset",
            f"el => {{ const i = el.selectedIndex; el.selectedIndex = {i}; "
            f"const f = ({TEXT_FITS})(el); el.selectedIndex = i; return f; }}",
        )
        assert fit["need"] <= fit["room"], fit  # "Code copilot (shar" once
    for label in lab.page.locator("#seq-list .seq-label").all():
        assert label.evaluate("e => e.scrollWidth <= e.clientWidth"), label.inner_text()


def test_options_the_server_would_refuse_are_disabled_with_the_reason(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="copilot")
    # 128 MiB holds one 72 MiB block of OPT-175B: the server would refuse the pool.
    why = lab.page.get_attribute('#c-model option[value="opt-175b"]', "data-why")
    assert why is not None
    assert "under 2 blocks" in why
    assert lab.page.locator('#c-model option[value="opt-175b"]').is_disabled()
    assert lab.page.locator('#c-model option[value="opt-13b"]').is_enabled()
    lab.change("#c-policy", "reserve")
    for sel, value in (("#c-sampling", "fork-cow"), ("#c-preemption", "swap"), ("#c-preemption", "auto")):
        option = lab.page.locator(f'{sel} option[value="{value}"]')
        assert option.is_disabled(), (sel, value)
        assert "needs policy vllm" in option.inner_text()
    lab.change("#c-policy", "vllm")
    lab.change("#c-sampling", "fork-cow")
    option = lab.page.locator('#c-policy option[value="reserve"]')
    assert option.is_disabled()
    assert "sampling fork-cow needs vllm" in option.inner_text()
    # Every option left enabled runs: the server answers each as the page would ask.
    q = lab.query()
    enabled = lab.page.eval_on_selector_all(
        "#c-model option:not([disabled]), #c-block-size option:not([disabled])",
        "els => els.map(e => [e.parentElement.dataset.param, e.value])",
    )
    for param, value in enabled:
        query = {**q, param: int(value) if param == "block_size" else value}
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
        answer = lab.page.request.get(f"{lab.server.url}api/state", params=query)
        assert answer.status in (200, 413), (param, value, answer.text())
        assert answer.status == 200 or "runs" in answer.json()["error"], (param, value)


def test_a_run_too_long_for_the_page_says_what_to_change(sized_lab: LabPage) -> None:
    """A refused run says in plain words what ran over and a change that runs; following it runs."""
    lab = sized_lab
    lab.problems.expected_status.add(413)
    lab.open(preset="chat", contiguous_policy="orca-max")
    lab.change("#c-kv-memory", 1024)
    text = lab.page.inner_text("#banner")
    assert "the contiguous run (policy 'orca-max') takes" in text
    m = re.search(r"a KV cache of ([\d.]+) GiB runs", text)
    assert m, text
    lab.change("#c-kv-memory", float(m.group(1)) * 1024)
    assert lab.page.locator("#banner").is_hidden()
    assert lab.query()["kv_cache_bytes"] == float(m.group(1)) * 2**30
    lab.problems.console = [c for c in lab.problems.console if "status of 4" not in c]


def verdict(lab: LabPage, exp: str) -> tuple[str, str]:
    el = lab.page.locator(f'[data-check="{exp}"]')
    return el.get_attribute("data-pass") or "", el.text_content() or ""  # off screen: no innerText


def test_experiment_checks_hold_only_where_their_mechanism_is(sized_lab: LabPage) -> None:
    """A check states its condition; where the preset or the step lacks what it checks it gives no verdict
    and says why (Memory pressure once "held" on the copilot preset, where nothing is ever preempted)."""
    lab = sized_lab
    lab.open(preset="copilot")
    assert "Check:" in (lab.page.locator('[data-exp="pressure"]').text_content() or "")
    passed, text = verdict(lab, "pressure")
    assert passed == "null"
    assert "nothing has been preempted" in text
    passed, text = verdict(lab, "sampling")
    assert passed == "null"
    assert "independent" in text
    assert verdict(lab, "prefix")[0] == "true"  # three requests share the system prompt here
    lab.change("#c-prefix", False)
    assert verdict(lab, "prefix")[0] == "null"
    # Memory pressure at a step where a sequence is preempted or swapped out: the check applies and holds.
    lab.open(preset="memory-pressure")
    steps = lab.page.evaluate(
        """() => { const r = kvlab.replay, out = [];
          for (let k = 0; k <= r.numSteps; k += 1) { r.seek(k);
            if (r.paged.sequences().some(({row}) => row[3] === 'preempted' || row[3] === 'swapped')) out.push(k); }
          r.seek(kvlab.step); return out; }"""
    )
    assert steps
    lab.seek(steps[0])
    passed, text = verdict(lab, "pressure")
    assert passed == "true", text
    # And a check can fail: alter the state it reads and it says so.
    lab.open(preset="copilot")
    lab.page.evaluate(
        "kvlab.replay.paged.metrics.prefix_saved_bytes[kvlab.step] += 1; kvlab.experiments.render(kvlab.replay)"
    )
    passed, text = verdict(lab, "prefix")
    assert passed == "false"
    assert "≠" in text


def test_the_block_size_experiment_is_not_offered_where_it_changes_nothing(sized_lab: LabPage) -> None:
    """With state layers the block is raised until it holds a state (544 tokens for Qwen3-Next), so 16 and
    32 run the same: the experiment's button changed nothing and its text said the tables halve."""
    lab = sized_lab
    button = lab.page.locator('[data-apply="block-size"]')
    condition = lab.page.locator('[data-exp="block-size"] .exp-condition')
    lab.open(preset="state-layers-caching")
    assert button.is_disabled()
    assert "not on this model" in (condition.text_content() or "")
    assert "544 tokens" in (condition.text_content() or "")
    lab.open(preset="copilot")
    assert not button.is_disabled()
    assert "⌈tokens / B⌉" in (condition.text_content() or "")


CHART_PIXELS = """(color) => {
  // Opaque pixels of the line colour `color` (within a small tolerance) per column of the chart: a line
  // drawn whole gives about its width; one hidden under another, much less. (A fill is not opaque.)
  const c = document.getElementById('chart');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const [r, g, b] = color;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 200 && Math.abs(d[i] - r) < 24 && Math.abs(d[i + 1] - g) < 24 && Math.abs(d[i + 2] - b) < 24) n += 1;
  }
  return n / c.width;
}"""


def test_chart_cursor_ticks_and_lines(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="chat")
    chart = lab.page.locator("#chart").bounding_box()
    cursor = lab.page.locator("#chart-cursor").bounding_box()
    legend = lab.page.locator("#chart-legend").bounding_box()
    assert chart is not None
    assert cursor is not None
    assert legend is not None
    # The cursor stays over the plot: above the step labels under it and off the legend.
    assert cursor["y"] + cursor["height"] <= chart["y"] + chart["height"] - 16 + 0.5
    assert cursor["y"] + cursor["height"] <= legend["y"]
    # Y ticks at round values: 1, 2 or 5 × a power of ten of one unit, evenly spaced from 0.
    ticks = json.loads(lab.page.get_attribute("#chart", "data-yticks"))
    values = [t["value"] for t in ticks]
    assert values[0] == 0
    assert len(values) >= 3
    step = values[1]
    assert all(v == i * step for i, v in enumerate(values))
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    for t in ticks[1:]:
        number, unit = t["label"].split(" ")
        assert re.fullmatch(r"\d+", number), t  # not 93.75 MiB
        assert int(number) * units[unit] == t["value"], t
    unit = units[ticks[-1]["label"].split(" ")[1]]
    digits = str(step // unit)
    assert step % unit == 0, step
    assert digits[0] in "125", step
    assert set(digits[1:]) <= {"0"}, step
    # Every line is visible: the allocated line is not hidden under the stored one (chat's slack is small).
    allocated = lab.page.evaluate(CHART_PIXELS, [0x4D, 0x8D, 0xFF])
    contiguous = lab.page.evaluate(CHART_PIXELS, [0xFF, 0x5D, 0x73])
    assert allocated > 1.2, allocated  # 0.66 when the stored line was drawn over it
    assert contiguous > 0.3, contiguous


VIEWPORT_FITS = """() => {
  // Elements whose box reaches past the viewport's right edge (outside any scrolling box of their own).
  const w = document.documentElement.clientWidth, out = [];
  for (const el of document.querySelectorAll('main *, header *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= w + 0.5) continue;
    let p = el.parentElement, clipped = false;
    while (p && p !== document.body) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden') { clipped = true; break; }
      p = p.parentElement;
    }
    if (!clipped) out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} right ${Math.round(r.right)}`);
  }
  return {scroll: document.documentElement.scrollWidth, width: w, wide: out.slice(0, 8)};
}"""


@pytest.mark.parametrize("viewport", ["phone", "small-phone"])
@pytest.mark.parametrize("preset", ["copilot", "chat", "memory-pressure"])
def test_the_page_fits_a_phone(browser: Any, lab_server: Any, viewport: str, preset: str) -> None:
    """From 360 px up nothing is wider than the screen (at 390 px the page was 442-489 px wide), the
    scrubber, step label, chart and cards are on screen, the event text has room, and the experiments'
    buttons can be clicked."""
    from .conftest import VIEWPORTS, _lab_page

    pages = _lab_page(browser, lab_server, VIEWPORTS[viewport])
    lab = next(pages)
    try:
        lab.open(preset=preset)
        fits = lab.page.evaluate(VIEWPORT_FITS)
        assert fits["scroll"] <= fits["width"], fits
        assert fits["wide"] == [], fits
        width = fits["width"]
        for sel in ("#r-scrub", "#r-step", "#chart", ".cards", "#c-preset", "#c-contig", "#r-link"):
            box = lab.page.locator(sel).bounding_box()
            assert box is not None, sel
            assert box["x"] >= 0, (sel, box)
            assert box["x"] + box["width"] <= width + 0.5, (sel, box)
        lab.page.locator("#ev-list").scroll_into_view_if_needed()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        text = lab.page.locator("#ev-list .ev-text").first.bounding_box()
        assert text is not None
        assert text["width"] >= 0.6 * width, text  # the event's words, not a 70 px column
        # Scrolled through, the lazily drawn sections still fit.
        fits = lab.page.evaluate(VIEWPORT_FITS)
        assert fits["scroll"] <= fits["width"], fits
        before = lab.runs()
        lab.page.click('[data-apply="block-size"]', timeout=5_000)  # playwright checks it can be clicked
        lab.wait_ready(before + 1)
        assert int(lab.query()["block_size"]) == 32
        fits = lab.page.evaluate(VIEWPORT_FITS)
        assert fits["scroll"] <= fits["width"], fits
    finally:
        next(pages, None)


@pytest.mark.parametrize("name", [p["name"] for p in lab_api.presets() if p.get("available", True)])
def test_every_preset_renders_on_a_phone(browser: Any, lab_server: Any, name: str) -> None:
    from .conftest import PHONE, _lab_page

    pages = _lab_page(browser, lab_server, PHONE)
    lab = next(pages)
    try:
        lab.open(preset=name)
        assert lab.page.locator("#banner").is_hidden()
        assert_cards(lab, python_snapshot(lab.query(), lab.step()))
        fits = lab.page.evaluate(VIEWPORT_FITS)
        assert fits["scroll"] <= fits["width"], fits
    finally:
        next(pages, None)


def test_a_step_in_the_address_outside_the_run_is_said_not_silently_moved(lab: LabPage) -> None:
    """`?step=999` on a run of fewer steps showed its last step, and `?step=abc` its opening step, without
    a word: the banner says which step the page shows instead; a step in range says nothing, and a
    control's rerun that moves the step (a shorter run) is not blamed on the address."""
    lab.open(preset="copilot", step=999)
    n = lab.page.evaluate("kvlab.replay.numSteps")  # (the paged run's: the address's step is its)
    assert lab.page.inner_text("#banner") == (
        f"step 999 in the address is outside the paged run's steps 0–{n}: showing step {n}"
    )
    lab.open(preset="copilot", step="abc")
    text = lab.page.inner_text("#banner")
    assert text.startswith('step "abc" in the address is not a step number: showing the opening step, '), text
    lab.open(preset="copilot", step=3)
    assert lab.page.locator("#banner").is_hidden()


def test_the_chart_marks_the_pools_capacity_and_its_axes(sized_lab: LabPage) -> None:
    """newcomer46 #6, #8: the memory chart draws the pool's capacity as a labelled line, the value the
    pool's title states, so that memory-pressure shows its pool full; a pool far above the run (qwen3 at
    4 GiB) is named with the chart's peak's share of it instead of flattening the lines. The time axis's
    two ends are in one unit, and the y axis names its quantity."""
    lab = sized_lab
    lab.open(preset="memory-pressure")
    bundle = lab.page.evaluate(
        "({n: kvlab.replay.bundle.num_blocks, b: kvlab.replay.bundle.bytes_per_block})"
    )
    pool = json.loads(lab.page.get_attribute("#chart", "data-pool") or "{}")
    assert pool["bytes"] == bundle["n"] * bundle["b"] == 80 * 2**20
    assert pool["drawn"] is True
    title = lab.page.locator("#grid-title").inner_text()
    label = lab.page.locator('#chart-legend [data-series="pool"]').inner_text()
    assert label == "pool capacity 80.00 MiB"
    assert f"{bundle['n']} blocks · 80.00 MiB" in title
    # The line is in the scale (the top tick at or above it), and the run fills the pool but its null block.
    ticks = json.loads(lab.page.get_attribute("#chart", "data-yticks") or "[]")
    assert ticks[-1]["value"] >= pool["bytes"]
    assert pool["peak"] >= pool["bytes"] - bundle["b"]
    # The line's pixels: a dotted row at the pool's height across the plot.
    row = lab.page.evaluate(
        """() => { const c = document.getElementById('chart'), g = kvlab.chart.geometry, dpr = c.width / g.w;
          const y = Math.round((g.padT + g.ph - (kvlab.chart.pool.bytes / g.ymax) * g.ph) * dpr);
          const d = c.getContext('2d').getImageData(0, y - 1, c.width, 3).data;
          let lit = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 60 && d[i] > 150 && d[i + 2] > 150) lit += 1;
          return lit / (g.pw * dpr); }"""
    )
    assert row > 0.2, row
    # Both ends of the time axis in one unit, and a y label (drawn on the canvas: asserted through the
    # functions that draw them).
    ends = lab.page.evaluate(
        "(async () => (await import('/static/js/chart.js')).timeEnds(kvlab.chart.geometry.t0, kvlab.chart.geometry.t1))()"
    )
    assert ends == ["0 ms", "195.0 ms"]
    far = lab.page.evaluate(
        "(async () => { const m = await import('/static/js/chart.js'); return [m.timeEnds(0, 2.5), m.timeEnds(0.25, 0.5)]; })()"
    )
    assert far == [["0 s", "2.500 s"], ["250.0 ms", "500.0 ms"]]
    lab.open(preset="copilot", model="qwen3-30b-a3b", kv_cache_bytes=4 * 2**30)
    pool = json.loads(lab.page.get_attribute("#chart", "data-pool") or "{}")
    assert pool["drawn"] is False
    ticks = json.loads(lab.page.get_attribute("#chart", "data-yticks") or "[]")
    assert ticks[-1]["value"] < pool["bytes"] / 4
    label = lab.page.locator('#chart-legend [data-series="pool"]').inner_text()
    share = 100 * pool["peak"] / pool["bytes"]
    assert label == f"pool capacity 4.00 GiB, above this scale (the chart's peak {share:.1f}% of it)"
