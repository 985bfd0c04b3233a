"""The disaggregated fleet's page (`/pd`, DESIGN.md §Lab) at a desktop window and a phone's viewport: at
instants forward and back, both pools' drawn blocks (holders, the blocks held for transfers), the link
and every request's row equal `kvsim.lab.pd.snapshot` (itself checked against the engines,
tests/test_lab_pd.py); the page fits the screen (a 360-px phone too); a bad preset opens the default
one with the server's reason; the label and the address count instants alike, a bad instant said and
clamped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.lab import pd
from kvsim.lab.screenshots import LabThread

from .conftest import SMALL_PHONE, LabPage, _lab_page

CELLS = """pool => Array.from(document.querySelectorAll(`.pd-grid[data-pool="${pool}"] .pd-cell`)).map(e => ({
  id: Number(e.dataset.block), requests: e.dataset.requests ? e.dataset.requests.split(',') : [],
  transfer: e.dataset.transfer === '1', held: e.dataset.held === '1', cached: e.dataset.cached || null,
  border: getComputedStyle(e).borderTopStyle,
  fill: getComputedStyle(e).backgroundImage !== 'none' ? 'hatched' : getComputedStyle(e).backgroundColor}))"""
ROWS = """() => Array.from(document.querySelectorAll('#pd-rows tr')).map(tr => ({
  name: tr.dataset.request, phase: tr.dataset.phase,
  colour: getComputedStyle(tr.children[1]).color,
  cells: Array.from(tr.children).map(td => td.textContent),
  shown: Array.from(tr.children).map(td => td.getClientRects().length > 0 && td.innerText.trim() !== '')}))"""


LEGEND_FILLS = """() => Array.from(document.querySelectorAll('.pd-legend .pd-demo'))
  .filter(e => getComputedStyle(e).backgroundImage === 'none').map(e => getComputedStyle(e).backgroundColor)"""
SUMMARY = """() => Object.fromEntries(Array.from(document.querySelectorAll('#pd-summary dt'))
  .map(dt => [dt.title, dt.nextElementSibling.textContent]))"""
LABELS = """() => Object.fromEntries(Array.from(document.querySelectorAll('#pd-summary dt'))
  .map(dt => [dt.title, dt.textContent]))"""


def open_pd(lab: LabPage, **query: Any) -> None:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    lab.page.goto(f"{lab.server.url}pd" + (f"?{q}" if q else ""))
    lab.page.wait_for_selector("main#pd[aria-busy=false]", timeout=60_000)


def seek(lab: LabPage, k: int) -> None:
    lab.page.eval_on_selector(
        "#pd-instant",
        "(el, k) => { el.value = String(k); el.dispatchEvent(new Event('input', {bubbles: true})); }",
        k,
    )
    lab.page.wait_for_function(f"document.getElementById('pd').dataset.instant === '{k}'", timeout=10_000)


def assert_drawn(lab: LabPage, snap: dict[str, Any]) -> None:
    for pool in snap["pools"]:
        cells = lab.page.evaluate(CELLS, pool["name"])
        assert [c["id"] for c in cells] == [b["id"] for b in pool["blocks"]]
        assert [c["requests"] for c in cells] == [b["requests"] for b in pool["blocks"]]
        assert [c["transfer"] for c in cells] == [b["transfer"] for b in pool["blocks"]]
        # What the eye sees: hatched exactly where the block is held for a transfer, free cells one colour.
        assert [c["fill"] == "hatched" for c in cells] == [b["transfer"] for b in pool["blocks"]]
        assert [c["cached"] for c in cells] == [b["cached"] for b in pool["blocks"]]
        # Cached free blocks are told apart by a dashed border (transfer blocks too, but they are hatched).
        assert [c["border"] == "dashed" for c in cells] == [
            bool(b["cached"] or b["transfer"]) for b in pool["blocks"]
        ]
        free = {c["fill"] for c in cells if not c["held"]}
        held = {c["fill"] for c in cells if c["held"] and not c["transfer"]}
        assert len(free) <= 1
        assert not free & held
        count = lab.page.text_content(f'[data-count="{pool["name"]}"]')
        assert count.startswith(f"{pool['held']} of {pool['num_blocks']} held")
        assert (f"{pool['cached']} free cached" in count) == bool(pool["cached"])
    link = lab.page.get_attribute("#pd-link-state", "data-on-link")
    assert (link.split(",") if link else []) == snap["link"]["on_link"]
    rows = lab.page.evaluate(ROWS)
    assert [r["name"] for r in rows] == [q["name"] for q in snap["requests"]]
    for row, q in zip(rows, snap["requests"], strict=True):
        assert row["phase"] == q["phase"]
        assert row["cells"][1] == q["phase"]
        assert row["cells"][2] == f"{q['generated']} of {q['max_tokens']}"
        assert row["cells"][3] == (" ".join(f"P{b}" for b in q["prefill_blocks"]) or "—")
        assert row["cells"][4] == (" ".join(f"P{b}" for b in q["decode_blocks"]) or "—")
        moved = f"{q['transfer_blocks']} blocks ({q['decode_hit_blocks']} hit on decode), link "
        assert row["cells"][5].startswith(moved if q["transfer_blocks"] else "—")
        # Every cell is on screen, at a phone's width too (the transfer's column was hidden there).
        assert all(row["shown"]), row
    # A preempted or recomputing request's phase is drawn in the colour of the single-replica page's
    # "Preempted" status, apart from every other phase.
    away = {r["colour"] for r in rows if r["phase"].startswith(("preempted", "recomputing"))}
    rest = {r["colour"] for r in rows if not r["phase"].startswith(("preempted", "recomputing"))}
    assert away <= {"rgb(255, 176, 187)"}
    assert not away & rest


def test_the_page_draws_the_snapshot_forward_and_back(sized_lab: LabPage) -> None:
    r = pd.preset_run("disaggregated")
    open_pd(sized_lab)
    opening = pd.opening(r)
    assert int(sized_lab.page.get_attribute("#pd", "data-instant")) == opening
    assert_drawn(sized_lab, pd.snapshot(r, opening))
    # req-2's row says it moves 5 blocks with no hit on the decode replica (req-1's copies were in flight
    # when it was admitted), the description says why; req-3 hits req-1's 4 there and moves 2.
    seek(sized_lab, len(r.instants) - 1)
    cells = {row["name"]: row["cells"][5] for row in sized_lab.page.evaluate(ROWS)}
    assert cells["req-2"].startswith("5 blocks (0 hit on decode), link ")
    assert cells["req-3"].startswith("2 blocks (4 hit on decode), link ")
    assert "req-2 moves all 5 of its blocks" in sized_lab.page.text_content("#pd-description")
    seek(sized_lab, opening)
    # It opens on a transfer on the link (its blocks hatched in the decode pool) while req-1 decodes.
    hatched = sized_lab.page.evaluate(CELLS, "decode")
    assert any(c["transfer"] for c in hatched)
    last = len(r.instants) - 1
    stops = (0, 1, 3, 8, 9, 14, 21, last, 12, 2, opening)
    assert any(pd.snapshot(r, k)["pools"][0]["cached"] for k in stops)  # cached prefill blocks are checked
    for k in stops:
        seek(sized_lab, k)
        assert_drawn(sized_lab, pd.snapshot(r, k))
        # Counted from 0 as the address and the API count, in the main page's "step k / n" form (it read
        # "8 of 44" at ?instant=7, so a user quoting "instant 8" landed one later, user53 #3).
        assert sized_lab.page.text_content("#pd-instant-label") == f"{k} / {last} · t = {ms(r, k)}"
        assert sized_lab.page.url.endswith(f"instant={k}")
    # Nothing is wider than the screen (the viewport asked for: a mobile page's window widens to its content).
    assert sized_lab.fits()
    # Every fill a held block is drawn in has its legend entry (blocks shared by two requests were drawn
    # purple with none).
    legend = set(sized_lab.page.evaluate(LEGEND_FILLS))
    for k in range(last + 1):
        seek(sized_lab, k)
        for name in ("prefill", "decode"):
            fills = {c["fill"] for c in sized_lab.page.evaluate(CELLS, name) if c["fill"] != "hatched"}
            assert fills <= legend, (k, name, fills - legend)
    # The fleet's figures in words and units, the CLI's: KV moved in bytes, the link's time in use (its
    # 2 ms latencies included) apart from the bandwidth used, each a share of the run.
    shown = sized_lab.page.evaluate(SUMMARY)
    labels = sized_lab.page.evaluate(LABELS)
    s = pd.timeline("disaggregated")["summary"]
    assert shown["pd_link_utilization"] == f"{100 * s['pd_link_utilization']:.1f}%"
    assert shown["pd_link_bandwidth_utilization"] == f"{100 * s['pd_link_bandwidth_utilization']:.1f}%"
    assert "latency included" in labels["pd_link_utilization"]
    assert "bandwidth" in labels["pd_link_bandwidth_utilization"]
    assert s["pd_link_bandwidth_utilization"] < s["pd_link_utilization"] / 10  # (2 ms against 42 µs a block)
    moved = shown["pd_transfer_bytes"]
    assert moved.endswith(" MiB")
    assert float(moved.split()[0]) * 2**20 == s["pd_transfer_bytes"]
    assert shown["pd_transfers"] == f"{s['pd_transfers']:,}"
    seek(sized_lab, opening)
    # The URL carries the instant, and a reload opens there.
    assert sized_lab.page.url.endswith("instant=" + str(opening))
    open_pd(sized_lab, instant=9)
    assert_drawn(sized_lab, pd.snapshot(r, 9))


def test_the_pressure_preset_draws_a_preemption_and_the_decode_pools_cache(sized_lab: LabPage) -> None:
    r = pd.preset_run("disaggregated-pressure")
    open_pd(sized_lab, preset="disaggregated-pressure")
    opening = pd.opening(r)
    assert int(sized_lab.page.get_attribute("#pd", "data-instant")) == opening
    snap = pd.snapshot(r, opening)
    assert "preempted" in {q["phase"] for q in snap["requests"]}
    assert snap["pools"][1]["cached"]  # the preempted request's full blocks, drawn cached, not free
    assert_drawn(sized_lab, snap)
    # Forward through its readmission (recomputing) and back; the last instant's decode pool is all cached
    # or free.
    phases = [{q["phase"] for q in pd.snapshot(r, k)["requests"]} for k in range(len(r.instants))]
    recompute = next(k for k, ph in enumerate(phases) if "recomputing" in ph)
    last = len(r.instants) - 1
    for k in (opening + 1, recompute, recompute + 1, last, 3, opening):
        seek(sized_lab, k)
        assert_drawn(sized_lab, pd.snapshot(r, k))
    assert pd.snapshot(r, last)["pools"][1]["cached"]
    assert sized_lab.fits()
    # The presets' links: the other preset's page opens from here.
    with sized_lab.page.expect_navigation():
        sized_lab.page.click('#pd-presets a[href="pd?preset=disaggregated"]')
    sized_lab.page.wait_for_selector("main#pd[aria-busy=false]", timeout=60_000)
    assert sized_lab.page.text_content("#pd-title") == pd.get("disaggregated").title


def ms(r: pd.PdRun, k: int) -> str:
    """Instant k's time as the page writes it."""
    return f"{pd.snapshot(r, k)['time_s'] * 1000:.3f} ms"


@pytest.fixture
def small_lab(browser: Any, lab_server: Any) -> Iterator[LabPage]:
    """A page at the narrowest phone the layout supports (360 px)."""
    yield from _lab_page(browser, lab_server, SMALL_PHONE)


def test_a_bad_preset_opens_the_default_one_and_says_why(sized_lab: LabPage) -> None:
    """An unknown preset opens the default preset, the server's refusal above it, as the main page does (it
    left a dead page: no preset links, no pools, user53 #2); the instant asked of the unknown preset is not
    used, and the address names the preset shown."""
    lab = sized_lab
    lab.problems.expected_status.add(400)
    default = next(iter(pd.PD_PRESETS))
    with pytest.raises(InvalidArgumentError) as refused:
        pd.get("nope")
    open_pd(lab, preset="nope", instant=3)
    assert (
        lab.page.text_content("#pd-banner")
        == f"{refused.value}. Showing the default preset ({default}) instead."
    )
    assert lab.page.is_visible("#pd-banner")
    assert lab.page.text_content("#pd-title") == pd.get(default).title
    links = lab.page.eval_on_selector_all("#pd-presets a", "els => els.map(a => a.textContent)")
    assert links == list(pd.PD_PRESETS)
    r = pd.preset_run(default)
    opening = pd.opening(r)
    assert int(lab.page.get_attribute("#pd", "data-instant")) == opening
    assert_drawn(lab, pd.snapshot(r, opening))
    assert lab.page.url.endswith(f"pd?preset={default}&instant={opening}")
    # The page works: the scrubber moves it.
    seek(lab, 1)
    assert_drawn(lab, pd.snapshot(r, 1))
    # Chromium logs the 400 answer itself as a console error; only that is expected here.
    lab.problems.console = [m for m in lab.problems.console if "status of 400" not in m]


def test_the_address_and_the_label_count_instants_alike_and_a_bad_one_is_said(lab: LabPage) -> None:
    """`?instant=k` opens instant k, labelled k (the API's `instant=k`); one out of range is clamped and one
    that is not a whole number opens the opening instant, each said in the banner as the main page says
    `?step=99999` (both were replaced silently, user53 #3)."""
    r = pd.preset_run("disaggregated")
    last, opening = len(r.instants) - 1, pd.opening(r)
    outside = "in the address is outside the run's instants"
    for asked, shown, says in (
        ("7", 7, None),
        ("0", 0, None),
        (str(last), last, None),
        (str(last + 1), last, f"instant {last + 1} {outside} 0–{last}: showing instant {last}"),
        ("99999", last, f"instant 99999 {outside} 0–{last}: showing instant {last}"),
        ("-1", 0, f"instant -1 {outside} 0–{last}: showing instant 0"),
        ("abc", opening, f'instant "abc" in the address is not an instant number: showing the opening instant, {opening}'),
        ("2.5", opening, f'instant "2.5" in the address is not an instant number: showing the opening instant, {opening}'),
    ):  # fmt: skip
        open_pd(lab, instant=asked)
        assert int(lab.page.get_attribute("#pd", "data-instant")) == shown
        assert_drawn(lab, pd.snapshot(r, shown))
        label = lab.page.text_content("#pd-instant-label")
        assert label == f"{shown} / {last} · t = {ms(r, shown)}"
        assert lab.page.url.endswith(f"instant={shown}")
        # What the label says is what the address and the API take: the label's number reopens it.
        said = int(label.split(" / ")[0])
        assert pd.snapshot(r, said)["time_s"] == pd.snapshot(r, shown)["time_s"]
        banner = lab.page.text_content("#pd-banner")
        if says is None:
            assert lab.page.is_hidden("#pd-banner")
        else:
            assert lab.page.is_visible("#pd-banner")
            assert banner == says


def test_the_page_fits_a_360_px_phone_at_every_instant(small_lab: LabPage) -> None:
    """At 360 px (README: "a phone (360 px and up)") nothing is wider than the screen, at every instant of
    both presets: every panel was 2 px wider (the summary's longest label at its max-content width, user53 #9)."""
    for name in pd.PD_PRESETS:
        r = pd.preset_run(name)
        open_pd(small_lab, preset=name)
        for k in range(len(r.instants)):
            seek(small_lab, k)
            width = small_lab.page.evaluate("document.documentElement.scrollWidth")
            assert width == SMALL_PHONE["width"], (name, k, width)
            assert small_lab.fits()
        right = small_lab.page.evaluate(
            "Math.max(...Array.from(document.querySelectorAll('#pd section, #pd .panel'), e => e.getBoundingClientRect().right))"
        )
        assert right <= SMALL_PHONE["width"], right


def test_the_main_page_links_to_it(lab: LabPage) -> None:
    lab.open(preset="copilot")
    lab.page.click('a[href="pd"]')
    lab.page.wait_for_selector("main#pd[aria-busy=false]", timeout=60_000)
    assert lab.page.url.split("?")[0].endswith("/pd")
    assert lab.page.text_content("#pd-title") == pd.get("disaggregated").title


def test_a_rejected_request_reads_rejected(lab: LabPage, monkeypatch: Any) -> None:
    """A request the engine rejects (its prompt over max_model_len) is drawn "rejected", in the single-replica
    page's rejected colour, where its row read "done"."""
    from tests.test_lab_pd import rejecting_fleet

    if not isinstance(lab.server, LabThread):  # (a deployed server has only its own presets)
        return
    w, cfg, names = rejecting_fleet()
    preset = pd.PdPreset(name="rejecting", title="rejecting", description="", workload=w, config=cfg,
                         request_names=names)  # fmt: skip
    monkeypatch.setitem(pd.PD_PRESETS, "rejecting", lambda: preset)
    r = pd.preset_run("rejecting")
    open_pd(lab, preset="rejecting")
    for k in (0, len(r.instants) - 1):
        seek(lab, k)
        assert_drawn(lab, pd.snapshot(r, k))  # (cached blocks dashed whatever their requests' names: the
        # style read names starting "req")
        rows = {row["name"]: row for row in lab.page.evaluate(ROWS)}
        assert rows["a"]["phase"] == "rejected"
        assert rows["a"]["cells"][:2] == ["a", "rejected"]  # (not "a (prefilled locally)")
        assert rows["a"]["colour"] == "rgb(255, 136, 150)"
    pd.preset_run.cache_clear()
