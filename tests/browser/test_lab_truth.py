"""What the page says must be true of the state it describes (a review's findings, each checked against
`kvsim.lab.snapshot` or the bundle): prefix-cache anchors only on full blocks of shared content, the tick
clock named as such, the event stream's step convention and count line, a swapped-out sequence's blocks in
the CPU swap space, the pool strip's null block, the window chips' "left" against "never held", the
inspector's group colour, the legends kept whole on a phone and the chart's line under its top tick."""

from __future__ import annotations

from typing import Any

import kvsim.lab as lab_api
from kvsim.lab import pd

from .conftest import LabPage
from .test_lab_page import python_snapshot
from .test_lab_pd import open_pd

EVENTS = """k => Array.from(document.querySelectorAll('#ev-list li.ev')).map(e => ({
  kind: e.dataset.kind, state: Number(e.querySelector('.ev-when').dataset.state),
  when: e.querySelector('.ev-when').textContent, text: e.querySelector('.ev-text').textContent,
  block: e.querySelector('.ev-text [data-block]') ? Number(e.querySelector('.ev-text [data-block]').dataset.block) : -1}))"""


def text(lab: LabPage, selector: str) -> str:
    """An element's text, whitespace collapsed (off-screen sections skip rendering: no inner_text)."""
    return " ".join((lab.page.text_content(selector) or "").split())


def segment_names(preset: str) -> set[str]:
    return set(lab_api._presets.get(preset).segment_names.values())


def test_prefix_cache_anchors_are_full_blocks_of_shared_content(sized_lab: LabPage) -> None:
    """An allocation is called "the prefix-cache anchor of" a key only when, at the state the event made,
    the block carries that key (full) and the key names a shared segment, not a request's or a sample's
    own tokens (with samples it once named `req-2·s2:block-2` on a partial block, 21 of 24 times)."""
    lab = sized_lab
    lab.open(preset="parallel-sampling", step=0)
    q = lab.query()
    shared = segment_names("parallel-sampling")
    anchors = plain = 0
    for k in range(1, lab.page.evaluate("kvlab.replay.numSteps") + 1):
        lab.seek(k)
        snap = python_snapshot(q, k)
        keys = {b["block_id"]: b["prefix_key"] for b in snap["blocks"]}
        for ev in lab.page.evaluate(EVENTS, k):
            if ev["kind"] != "allocate" or ev["state"] != k:
                continue
            key = keys[ev["block"]]
            want = key is not None and key.rsplit(":block-", 1)[0] in shared
            claimed = "prefix-cache anchor" in ev["text"]
            assert claimed == want, (k, ev, key)
            if claimed:
                assert ev["text"].endswith(f"anchor of {key}"), (k, ev, key)
                anchors += 1
            else:
                plain += 1
    assert anchors > 0  # (both cases met)
    assert plain > 0


def test_step_convention_and_count_line(sized_lab: LabPage) -> None:
    """ "step k" is the state after k engine steps: the events listed at step k are those that made it
    (finishes included), the newest reads the scrubber's step, and the count line says events, not steps."""
    lab = sized_lab
    lab.open(preset="copilot", step=0)
    total = lab.page.evaluate("kvlab.replay.paged.numEvents")
    for k in (1, 5, 20, 40, lab.page.evaluate("kvlab.replay.numSteps")):
        lab.seek(k)
        evs = lab.page.evaluate(EVENTS, k)
        n = lab.page.evaluate(f"kvlab.replay.paged.eventCount({k})")
        made = n - lab.page.evaluate(f"kvlab.replay.paged.eventCount({k - 1})")
        assert sum(ev["state"] == k for ev in evs) == min(made, 100)
        assert all(ev["state"] <= k for ev in evs)
        assert all(ev["when"].startswith(f"step {ev['state']} ·") for ev in evs)
        if made:
            assert evs[0]["when"].startswith(f"step {k} ·")
        count = lab.page.text_content("#ev-count") or ""
        assert count.startswith(f"{n} of {total} events happened by step {k}"), count
    assert "the state after k engine steps" in text(lab, "#ev-convention")


def test_times_are_labelled_with_their_clock(sized_lab: LabPage) -> None:
    """The presets name no GPU: their times are ticks (1 ms a step), and the page says so beside the
    clock, as the bundle's time model says; the P/D page too, beside its link's real figures."""
    lab = sized_lab
    for preset in ("mooncake", "chat"):
        lab.open(preset=preset)
        tm = lab.page.evaluate("kvlab.replay.bundle.time_model")
        assert tm == {"name": "ticks", "step_s": 0.001, "gpu": None}
        assert "ticks: 1 ms a step, not a GPU’s time" in text(lab, "#r-clock")
        assert lab.page.get_attribute("#r-clock", "data-time-model") == "ticks"
        t = lab.page.evaluate("kvlab.replay.metric('time_s')")
        step = lab.step()
        assert t == step * tm["step_s"] or t >= step * tm["step_s"]  # (a tick a step; idle waits may skip)
    open_pd(lab)
    tm = pd.timeline("disaggregated")["time_model"]
    assert tm["name"] == "ticks"
    assert "ticks: 1 ms a step, not a GPU’s time" in text(lab, "#pd-clock")
    spec = text(lab, "#pd-link-spec")
    assert "the replicas’ steps are ticks of 1 ms, not a GPU’s step time" in spec, spec


def test_a_swapped_out_sequence_holds_its_blocks_in_the_cpu_swap_space(sized_lab: LabPage) -> None:
    """memory-pressure under swap: req-10 swapped out at step 28 has its 4 blocks in the CPU swap space
    (it read "0 blocks", "no blocks"), as the snapshot's `swapped_blocks` says; the batch line sums them."""
    lab = sized_lab
    lab.open(preset="memory-pressure", step=0)
    q = lab.query()
    assert q["preemption"] == "swap"
    seen = 0
    for k in (28, 40, 60, 76, 80):
        lab.seek(k)
        snap = python_snapshot(q, k)
        swapped = [r for r in snap["requests"] if r["status"] == "swapped"]
        for r in swapped:
            card = lab.page.locator(
                f'#seq-list .seq[data-rid="{r["request_id"]}"][data-sample="{r["sample"]}"]'
            )
            got = card.locator(".swapped-count")
            assert int(got.get_attribute("data-swapped") or -1) == r["swapped_blocks"] > 0
            assert f"{r['swapped_blocks']} blocks in the CPU swap space" in " ".join(
                (card.text_content() or "").split()
            )
            seen += 1
        batch = lab.page.get_attribute("#paged-batch", "data-swap-blocks")
        used = sum(r["swapped_blocks"] for r in swapped)
        assert int(batch or 0) == used == snap["swap_space"]["used_blocks"]
        if swapped:
            cap = snap["swap_space"]["capacity_blocks"]
            assert f"{used} block{'s' if used != 1 else ''} in the CPU swap space, of its {cap}" in text(
                lab, "#paged-batch"
            )
    assert seen > 0


def test_prefix_caching_is_not_called_copy_on_write(sized_lab: LabPage) -> None:
    """vLLM v1's prefix caching shares full blocks and never copies: the toggle, the header and the
    experiment do not call it copy-on-write, and the inspector on a full shared block says it is never
    written; copy-on-write is said of a partial block forked samples share (fork-cow)."""
    lab = sized_lab
    lab.open(preset="copilot")
    assert text(lab, "#c-prefix-label") == "Prefix caching"
    assert "prefix caching with copy-on-write" not in text(lab, "header")
    assert "copy-on-write" not in text(lab, '[data-exp="prefix"] h3')
    snap = python_snapshot(lab.query(), lab.step())
    full = next(b for b in snap["blocks"] if b["state"] == "shared" and b["num_tokens"] == snap["block_size"])
    lab.page.locator(f'#grid .cell[data-block="{full["block_id"]}"]').click()
    lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
    note = text(lab, "#insp-note")
    assert "never written again" in note, note
    assert "never copies" in note, note
    assert "copy-on-write" not in note, note
    lab.open(preset="parallel-sampling", step=1)
    q = lab.query()
    assert q["sampling"] == "fork-cow"
    snap = python_snapshot(q, 1)
    partial = next(
        b for b in snap["blocks"] if b["state"] == "shared" and b["num_tokens"] < snap["block_size"]
    )
    lab.page.locator(f'#grid .cell[data-block="{partial["block_id"]}"]').click()
    lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
    note = text(lab, "#insp-note")
    assert "copy-on-write" in note, note
    assert f"Shared by {partial['ref_cnt']} forked samples" in note, note


def test_pool_strip_counts_add_up_with_the_null_block(sized_lab: LabPage) -> None:
    """The strip's caption counts vLLM's null block: its parts sum to the pool (it read 64 blocks of which
    63 were counted), and the legend names the null block's colour."""
    lab = sized_lab
    lab.open(preset="copilot", step=0)
    for k in (0, 1, 10, 30):
        lab.seek(k)
        caption = text(lab, "#paged-map-caption")
        total, *parts = caption.split(" · ")
        counts = {p.split(" ")[1]: int(p.split(" ")[0]) for p in parts}
        snap = python_snapshot(lab.query(), k)
        want: dict[str, int] = {}
        for b in snap["blocks"]:
            want[b["state"]] = want.get(b["state"], 0) + 1
        assert counts == {st: want.get(st, 0) for st in ("null", "private", "shared", "cached", "free")}, (
            caption
        )
        assert int(total.split(" ")[0]) == sum(counts.values()) == len(snap["blocks"])
    assert "null (vLLM’s block 0" in text(lab, ".track-paged .map-legend")


LEGEND_ENTRIES = """() => Array.from(document.querySelectorAll('.usage-legend .lg, .map-legend .lg'))
  .filter(e => e.getClientRects().length > 0).map(e => {
    const r = e.getBoundingClientRect(), sw = e.querySelector('.sw').getBoundingClientRect();
    const line = parseFloat(getComputedStyle(e).lineHeight) || 18;
    return {text: e.textContent.trim(), height: r.height, line, swTop: sw.top - r.top, swBottom: r.bottom - sw.bottom,
      lines: e.getClientRects().length};
  })"""


def test_legend_entries_keep_their_swatch_label_and_value_together(sized_lab: LabPage) -> None:
    """Each legend entry (swatch, label, value) is one unbroken line: on a phone the row wraps between
    entries, never inside one (it split "shared ■" / "cached")."""
    lab = sized_lab
    lab.open(preset="memory-pressure", step=40)
    entries = lab.page.evaluate(LEGEND_ENTRIES)
    assert len(entries) >= 9
    for e in entries:
        assert e["lines"] == 1, e
        assert e["height"] <= 1.5 * max(e["line"], 16), e
        assert e["swTop"] >= -0.5, e
        assert e["swBottom"] >= -0.5, e


def window_left(bundle: dict[str, Any], seq: int, group: int, k: int) -> int:
    """Blocks of `seq`'s group table that left its window by state k: its window events since its latest
    preemption, from the engine's log (as the bundle carries it)."""
    t = bundle["paged"]
    kinds = t["event_kinds"]
    ev = t["events"]
    n = int(t["event_upto"][k])
    left = 0
    for i in range(n):
        if int(ev["seq"][i]) != seq:
            continue
        kind = kinds[int(ev["kind"][i])]
        if kind == "preempt":
            left = 0
        elif kind == "window" and int(ev["count"][i]) == group:
            left += 1
    return left


def test_window_chips_tell_blocks_left_from_blocks_never_held(sized_lab: LabPage) -> None:
    """A window table's leading null blocks: those it never held (req-8's load started past its first 8)
    say so, apart from those that left the window (it said "L_0–L_7→∅ (left)"), as the log's window
    events count them."""
    lab = sized_lab
    lab.open(preset="sliding-window-tier")
    q = lab.query()
    overrides = {key: v for key, v in q.items() if key != "preset"}
    bundle = lab_api.bundle(q["preset"], **overrides)
    seq_of = {
        (int(r), int(s)): i
        for i, (r, s) in enumerate(
            zip(bundle["paged"]["seq_request_id"], bundle["paged"]["seq_sample"], strict=True)
        )
    }
    card = lab.page.locator('#seq-list .seq[data-rid="7"]')
    row = card.locator(".group-row").nth(0)
    assert row.locator("[data-never]").get_attribute("data-never") == "8"
    assert row.locator("[data-left]").count() == 0
    assert "(never held)" in (row.text_content() or "")
    checked = lefts = 0
    for k in (39, 42, 49, 55, bundle["num_steps"]):
        lab.seek(k)
        snap = python_snapshot(q, k)
        for r in snap["requests"]:
            sel = f'#seq-list .seq[data-rid="{r["request_id"]}"][data-sample="{r["sample"]}"] .group-row'
            if lab.page.locator(sel).count() == 0:
                continue
            for g, table in enumerate(r["block_tables"]):
                lead = next((i for i, b in enumerate(table) if b != 0), len(table))
                left = min(lead, window_left(bundle, seq_of[(r["request_id"], r["sample"])], g, k))
                grow = lab.page.locator(sel).nth(g)
                never_el, left_el = grow.locator("[data-never]"), grow.locator("[data-left]")
                assert (
                    int(never_el.get_attribute("data-never") or 0) if never_el.count() else 0
                ) == lead - left
                assert (int(left_el.get_attribute("data-left") or 0) if left_el.count() else 0) == left
                checked += 1
                lefts += left
    assert checked > 0
    assert lefts > 0  # (blocks that left a window met too)


def test_inspector_swatch_takes_the_blocks_group_colour(sized_lab: LabPage) -> None:
    """On a hybrid model a block is drawn in its group's colour: the inspector's swatch and state words
    take it too (P_1 was drawn crimson, G0, and inspected blue, PRIVATE)."""
    lab = sized_lab
    lab.open(preset="state-layers")
    snap = python_snapshot(lab.query(), lab.step())
    for state in ("private", "shared", "cached"):
        blk = next((b for b in snap["blocks"] if b["state"] == state), None)
        if blk is None:
            continue
        lab.page.locator(f'#grid .cell[data-block="{blk["block_id"]}"]').click()
        lab.page.wait_for_function("document.body.dataset.settled === document.body.dataset.step")
        got = lab.page.evaluate(
            """g => { const el = document.querySelector('#insp-state'), demo = el.querySelector('.demo');
              const probe = document.createElement('span'); probe.style.color = el.dataset.colour;
              document.body.append(probe); const want = getComputedStyle(probe).color; probe.remove();
              const cs = getComputedStyle(demo);
              return {colour: el.dataset.colour, want, text: getComputedStyle(el).color,
                      fill: cs.backgroundColor, image: cs.backgroundImage, border: cs.borderTopColor}; }""",
            blk["group"],
        )
        main = lab.page.evaluate(
            "g => import('/static/js/grid.js').then(m => m.groupColors(kvlab.replay.groups)[g].main)",
            blk["group"],
        )
        assert got["colour"] == main, (state, got, main)
        assert got["text"] == got["want"], (state, got)
        if state == "private":
            assert got["fill"] == got["want"], (state, got)
        elif state == "shared":
            assert got["want"].replace("rgb(", "").rstrip(")") in got["image"].replace("rgb(", ""), (
                state,
                got,
            )
        else:
            assert got["border"] == got["want"], (state, got)


def test_chart_lines_stay_under_their_values(lab: LabPage) -> None:
    """A one-step spike's join is round: the line reaches its value plus half its width, not a miter's
    point above it (293.25 MiB at step 352 of state-layers-caching poked past the 300 MiB grid line)."""
    lab.open(preset="state-layers-caching")
    got = lab.page.evaluate(
        """() => { const c = document.getElementById('chart'), g = kvlab.chart.geometry;
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, dpr = c.width / g.w;
          let top = -1;
          for (let y = 0; y < c.height && top < 0; y += 1)
            for (let x = Math.ceil(g.x0 * dpr); x < c.width; x += 1) if (d[(y * c.width + x) * 4 + 3] > 200) { top = y; break; }
          const t = kvlab.replay.paged.metrics, cols = ['paged_allocated_bytes', 'paged_stored_bytes',
            'paged_tail_slack_bytes'].map(n => t[n] || []);
          let max = 0; for (const col of cols) for (const v of col) if (v > max) max = v;
          return {top: top / dpr, peak: g.padT + g.ph - (max / g.ymax) * g.ph, ymax: g.ymax, max}; }"""
    )
    assert got["max"] > 0
    assert got["top"] >= 0
    # (the widest line is 2 px: half of it, and a pixel of antialiasing)
    assert got["top"] >= got["peak"] - 1 - 1.01, got
