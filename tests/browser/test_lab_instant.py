"""A review's findings on what the page compares and says, each checked against `kvsim.lab.snapshot` or the
bundle: the two runs shown at one instant (their clocks part: each at its last state by the same time, an
ended run said ended, an old link's step past the paged run's end opened where the contiguous run is
there); a preset's description marked as the preset's where the run changed its settings; a rejected
request's reason; a memory field's refusal in MiB and the field's words; a run in which no step ran;
a hybrid model's groups in colours far apart; a private block's empty slots in the pool strip."""

from __future__ import annotations

import math
from typing import Any

import kvsim.lab as lab_api

from .conftest import LabPage
from .test_lab_page import assert_cards


def text(lab: LabPage, selector: str) -> str:
    return " ".join((lab.page.text_content(selector) or "").split())


def snapshot_at(lab: LabPage) -> dict[str, Any]:
    """The snapshot of the instant the page shows: its paged and contiguous steps."""
    q = dict(lab.query())
    el = lab.page.locator("#r-step")
    kc = el.get_attribute("data-contiguous-step")
    return lab_api.snapshot(
        q.pop("preset"),
        step=int(el.get_attribute("data-step") or 0),
        contiguous_step=int(kc) if kc else None,
        **q,
    )


def running(snap: dict[str, Any], track: str) -> int:
    reqs = snap["requests"] if track == "paged" else snap["contiguous"]["requests"]
    return sum(r["status"] == "running" for r in reqs)


def test_the_runs_are_shown_at_one_instant(sized_lab: LabPage) -> None:
    """The paged run of memory-pressure ends at step 151, the contiguous one at 195 (ticks of 1 ms): at
    t = 180 ms the page shows the paged run ended and the contiguous one at step 180, and every figure
    beside the other (cards, batches, the multiplier) is the snapshot's at that instant, the multiplier
    "—" (the paged side runs nothing). An old link's `step=180` (the scrubber ran to the longer run's
    end, showing both at step 180 and t = the paged run's frozen 151 ms) opens at that instant and says so."""
    lab = sized_lab
    lab.open(preset="memory-pressure", step=180)
    assert "past the paged run's end" in text(lab, "#banner")
    snap = snapshot_at(lab)
    assert (snap["step"], snap["contiguous_step"]) == (151, 180)
    assert math.isclose(snap["time_s"], 0.18)
    label = text(lab, "#r-step")
    assert label.startswith("t = 180.0 ms"), label
    assert "paged step 151 / 151 (ended)" in label, label
    assert "contiguous step 180 / 195" in label, label
    assert lab.page.get_attribute("#paged-batch", "data-ended") == "true"
    assert text(lab, "#paged-batch").startswith("Ended at t = 151.0 ms")
    assert lab.page.get_attribute("#contig-batch", "data-ended") == "false"
    assert int(lab.page.get_attribute("#contig-batch", "data-running") or -1) == running(snap, "contiguous")
    assert_cards(lab, snap)
    assert lab.page.inner_text("#card-multiplier") == "—"
    # The address names both runs' states, and opens that instant again.
    lab.page.wait_for_function("location.search.includes('contiguous_step=180')")
    assert "step=151" in lab.page.evaluate("location.search")
    # Every instant: each run at its last state by then; the cards are the snapshot's there.
    n = int(lab.page.evaluate("kvlab.replay.numMoments"))
    assert n == 196  # (the runs' clocks agree while both run: one instant a step)
    for m in (0, 40, 150, 151, 152, 195):
        lab.seek_moment(m)
        snap = snapshot_at(lab)
        assert math.isclose(float(lab.page.get_attribute("#r-step", "data-time") or "nan"), snap["time_s"])
        assert snap["paged_time_s"] <= snap["time_s"]
        assert snap["contiguous_time_s"] <= snap["time_s"]
        assert_cards(lab, snap)
        for track, sel in (("paged", "#paged-batch"), ("contiguous", "#contig-batch")):
            assert int(lab.page.get_attribute(sel, "data-running") or -1) == running(snap, track), (m, track)
    # A link with both runs' states opens that instant; one with states of two instants says so.
    lab.open(preset="memory-pressure", step=151, contiguous_step=180)
    assert (lab.step(), int(lab.page.get_attribute("#r-step", "data-contiguous-step") or -1)) == (151, 180)
    assert lab.page.locator("#banner").is_hidden()
    lab.open(preset="memory-pressure", step=40, contiguous_step=180)
    assert "is not in force while the paged run is at step 40" in text(lab, "#banner")
    assert int(lab.page.get_attribute("#r-step", "data-contiguous-step") or -1) == 40


def test_the_chart_is_drawn_against_time(sized_lab: LabPage) -> None:
    """The chart's axis is simulated time (each run's values at its own steps' times): its cursor sits at
    the instant shown, a click seeks the instant under it."""
    lab = sized_lab
    lab.open(preset="memory-pressure", step=151)
    geo = lab.page.evaluate("kvlab.chart.geometry")
    assert math.isclose(geo["t1"], 0.195)
    assert geo["t0"] == 0
    box = lab.page.locator("#chart").bounding_box()
    x = geo["x0"] + geo["pw"] * (0.1 / 0.195)
    before = lab.runs()
    lab.page.locator("#chart").click(position={"x": x, "y": box["height"] / 2})
    lab.page.wait_for_function("Math.abs(kvlab.replay.time - 0.1) < 0.0015")
    assert lab.runs() == before
    assert "t = 100.0 ms" in text(lab, "#r-step") or "t = 99.0 ms" in text(lab, "#r-step")


def test_the_preset_description_says_when_the_run_differs(sized_lab: LabPage) -> None:
    """A preset's description tells its story with its own settings: where the run changes one, the page
    says which (as its controls word them, the preset's value beside the run's) and that the story is the
    preset's. cpu-tier on gpt-oss-20b said "a 24-block GPU pool and a 32-chunk CPU tier ... req-8 loads
    it back" with 128 blocks, 170 chunks and no load."""
    lab = sized_lab
    lab.open(preset="cpu-tier")
    assert lab.page.get_attribute("#c-preset-desc", "data-differs") == ""
    assert "differs" not in text(lab, "#c-preset-desc")
    lab.open(preset="cpu-tier", model="gpt-oss-20b")
    b = lab.page.evaluate("kvlab.replay.bundle.preset.differs")
    assert [d["field"] for d in b] == ["model", "num_blocks", "kv_offloading_bytes"]
    assert lab.page.get_attribute("#c-preset-desc", "data-differs") == "model,num_blocks,kv_offloading_bytes"
    desc = text(lab, "#c-preset-desc")
    num_blocks = lab.page.evaluate("kvlab.replay.bundle.num_blocks")
    chunks = lab.page.evaluate("kvlab.replay.bundle.tier.chunks")
    assert "This run differs from the preset:" in desc
    assert "Model gpt-oss-20b (preset: llama-3-8b)" in desc
    assert f"KV cache memory {num_blocks} blocks (preset: 24 blocks)" in desc
    assert f"CPU tier {chunks} chunks (preset: 32 chunks)" in desc
    assert "not of this run" in desc
    lab.open(preset="copilot", enable_prefix_caching="false")
    assert "Prefix caching off (preset: on)" in text(lab, "#c-preset-desc")


def test_a_rejected_request_says_why(sized_lab: LabPage) -> None:
    """State layers in 4 blocks: every request is rejected at arrival; each card and each reject event
    says the engine's reason (the snapshot's `reject_reason`)."""
    lab = sized_lab
    lab.open(preset="state-layers", num_blocks=4)
    snap = snapshot_at(lab)
    want = {r["name"]: r["reject_reason"] for r in snap["requests"]}
    assert set(want.values()) == {"needs more blocks than the pool holds"}
    cards = lab.page.eval_on_selector_all(
        "#seq-list .seq",
        "els => els.map(e => [e.querySelector('header b').textContent, "
        "e.querySelector('.reject-why')?.dataset.reason ?? null])",
    )
    assert dict(cards) == want
    events = lab.page.eval_on_selector_all(
        "#ev-list li.ev[data-kind=reject] .ev-text", "els => els.map(e => e.textContent)"
    )
    assert len(events) == len(want)
    assert all(e.endswith("rejected: needs more blocks than the pool holds") for e in events), events


def test_a_run_in_which_no_step_ran_says_so(sized_lab: LabPage) -> None:
    """No step ran (every request rejected at arrival): no clock (it read "t = 150.0 ms", the last
    arrival), no chart axis (it read "1 B"), the reason in words."""
    lab = sized_lab
    lab.open(preset="copilot", num_blocks=2)
    label = text(lab, "#r-step")
    assert "no step ran" in label, label
    assert "rejected at arrival (4 of 4)" in label, label
    assert "t =" not in label
    assert lab.page.get_attribute("#chart", "data-empty") == "true"
    assert lab.page.get_attribute("#chart", "data-yticks") == "[]"
    assert lab.page.locator("#chart-legend").is_hidden()
    assert lab.page.locator("#chart-cursor").is_hidden()


def test_a_memory_refusal_speaks_in_mib(sized_lab: LabPage) -> None:
    """A value typed in MiB is refused in MiB, naming the field as the page labels it, and the banner
    says the previous run is still shown (it said "kv_cache_bytes -5242880 must be between 1 and
    1125899906842624" and the field reverted silently)."""
    lab = sized_lab
    lab.problems.expected_status.add(400)
    lab.open(preset="copilot")
    for sel, typed, starts in (
        ("#c-kv-memory", "-5", "KV cache memory (MiB) -5 MiB: the memory must be more than 0 MiB"),
        ("#c-kv-memory", "abc", 'KV cache memory (MiB): "abc" is not a number of MiB'),
        ("#c-kv-memory", "1", "KV cache memory (MiB) 1 MiB holds 0 blocks of 16 tokens"),
        ("#c-tier", "-5", "CPU tier (MiB) -5 MiB: give 0 MiB for no tier, or more"),
        ("#c-tier", "1", "CPU tier (MiB) 1 MiB holds no chunk"),
    ):
        if typed == "abc":  # (a number input takes no letters: set its value as a paste would not)
            lab.page.eval_on_selector(sel, "e => { e.type = 'text'; }")
        lab.change(sel, typed)
        banner = text(lab, "#banner")
        assert banner.startswith(starts), banner
        for word in ("kv_cache_bytes", "kv_offloading_bytes", "5242880", "1048576"):
            assert word not in banner, banner
        assert banner.endswith(
            "The page still shows the previous run; its settings are back in the controls."
        )
        assert lab.page.input_value("#c-kv-memory") == "128"
        assert lab.page.input_value("#c-tier") == "0"
        if typed == "abc":
            lab.page.eval_on_selector(sel, "e => { e.type = 'number'; }")
    assert lab.query().get("kv_cache_bytes") == 128 * 2**20
    # A size far past the page is refused by the cap that applies, in the words the server gives a size
    # just past it (it read "must be between 0 MiB and 1073740000 MiB": the schema's bound, 2**30 MiB,
    # rounded; the user then typed 1000000000 MiB and met the cap, user53 #6).
    from kvsim.lab.query import LIMITS, MAX_TIER_CHUNKS, layout, resolve
    from kvsim.model.units import fmt_bytes

    cfg = resolve("copilot").paged
    tier_cap = fmt_bytes(MAX_TIER_CHUNKS * cfg.kv_offloading_chunk_bytes)
    pool_cap = fmt_bytes(LIMITS["max_blocks"] * layout(cfg.model, cfg.block_size).bytes_per_block)
    for sel, typed, says in (
        (
            "#c-tier",
            "99999999999",
            f"more than the page draws ({MAX_TIER_CHUNKS:,}): give it at most {tier_cap}.",
        ),
        ("#c-tier", "1000000000", f"give it at most {tier_cap}."),
        ("#c-tier", "99999999999999", f"give it at most {tier_cap}."),  # (past 2**62 bytes)
        (
            "#c-kv-memory",
            "99999999999",
            f"give the KV cache at most {pool_cap}, or choose a larger block size.",
        ),
        # Sizes of hundreds of digits of bytes: refused by the same caps, in the field's words (1e300 MiB read
        # "kv_offloading_bytes is 307 characters long, more than any value takes"); one past the largest
        # number (1e303 MiB: Infinity bytes) too.
        (
            "#c-tier",
            "1e300",
            f"holds over 10^299 chunks, more than the page draws ({MAX_TIER_CHUNKS:,}): give it at most {tier_cap}.",
        ),
        ("#c-tier", "1e303", f"give it at most {tier_cap}."),
        ("#c-kv-memory", "1e300", f"give the KV cache at most {pool_cap}, or choose a larger block size."),
    ):
        lab.change(sel, typed)
        banner = text(lab, "#banner")
        assert banner.startswith(
            f"{'CPU tier' if sel == '#c-tier' else 'KV cache memory'} (MiB) {typed} MiB holds "
        )
        assert says in banner, banner
        assert "between" not in banner
        assert "characters long" not in banner
        assert "digit" not in banner
        assert lab.page.input_value("#c-tier") == "0"
        assert lab.page.input_value("#c-kv-memory") == "128"
    # Chromium logs the 4xx answers themselves as console errors; only those are expected here.
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]


def test_a_hybrid_models_groups_are_told_apart(sized_lab: LabPage) -> None:
    """gemma-3's six sliding-window groups were six near-identical greens: every two groups' colours
    differ by a visible distance (RGB), and the legend's swatches are those colours."""
    lab = sized_lab
    lab.open(preset="copilot", model="gemma-3-27b")
    rgb = lab.page.evaluate(
        """() => import('/static/js/grid.js').then(m => m.groupColors(kvlab.replay.groups).map(c => {
             const x = document.createElement('canvas').getContext('2d'); x.fillStyle = c.main;
             x.fillRect(0, 0, 1, 1); return Array.from(x.getImageData(0, 0, 1, 1).data.slice(0, 3)); }))"""
    )
    assert len(rgb) == 7
    worst = min(math.dist(a, b) for i, a in enumerate(rgb) for b in rgb[i + 1 :])
    assert worst > 40, (worst, rgb)
    swatches = lab.page.eval_on_selector_all(
        "#grid-groups .swatch", "els => els.map(e => e.style.getPropertyValue('--g'))"
    )
    assert len(swatches) == 7


def test_the_pool_strip_shows_a_private_blocks_empty_slots(sized_lab: LabPage) -> None:
    """A private block holding few tokens was drawn almost all dark, like a free block: its bar now spans
    its B slots (the tokens bright, the empty slots dim), and the legend says what the height means."""
    lab = sized_lab
    lab.open(preset="copilot", step=1)
    snap = snapshot_at(lab)
    partial = [b for b in snap["blocks"] if b["state"] == "private" and 0 < b["num_tokens"] < 16]
    free = [b for b in snap["blocks"] if b["state"] == "free"]
    assert partial
    assert free
    probe = """([b, frac]) => { const c = document.getElementById('paged-map'); const n = kvlab.replay.numBlocks;
      const w = c.getBoundingClientRect().width, dpr = c.width / w, cols = Math.min(Math.floor(w), n);
      const x = Math.round(((b + 0.4) * (w / cols)) * dpr), y = Math.round(c.height * frac);
      return Array.from(c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)); }"""
    top_partial = lab.page.evaluate(probe, [partial[0]["block_id"], 0.1])
    top_free = lab.page.evaluate(probe, [free[0]["block_id"], 0.1])
    bottom_partial = lab.page.evaluate(probe, [partial[0]["block_id"], 0.97])
    assert top_partial != top_free  # the empty slots of a held block are not the free block's background
    assert bottom_partial != top_partial  # the tokens it holds are drawn brighter than its empty slots
    assert "height the tokens it holds" in text(lab, "#paged-map-height")
