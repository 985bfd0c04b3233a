"""The disaggregated fleet's page (`/pd`, DESIGN.md §Lab) at a desktop window and a phone's viewport: at
instants forward and back, both pools' drawn blocks (holders, the blocks held for transfers), the link
and every request's row equal `kvsim.lab.pd.snapshot` (itself checked against the engines,
tests/test_lab_pd.py); the page fits the screen; a bad preset shows the server's reason."""

from __future__ import annotations

from typing import Any

from kvsim.lab import pd
from kvsim.lab.screenshots import LabThread

from .conftest import LabPage

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
        # (counted from 1 of all the instants: it read "6 of 43" for the 7th of 44, rev48b #10)
        assert sized_lab.page.text_content("#pd-instant-label").startswith(f"{k + 1} of {last + 1} · t = ")
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


def test_a_bad_preset_shows_the_servers_reason(lab: LabPage) -> None:
    lab.problems.expected_status.add(400)
    lab.problems.console.clear()
    open_pd(lab, preset="nope")
    banner = lab.page.text_content("#pd-banner")
    assert banner.startswith("preset 'nope' is not one of")
    lab.problems.console.clear()  # chromium logs the 400 as a console error


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
