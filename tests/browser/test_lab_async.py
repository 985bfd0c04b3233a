"""The page's async scheduling switch (DESIGN.md §Lab): it sets the paged track's `async_scheduling`, and what
the page then shows is the replay's state of the engine's run: a finished request's blocks held on the grid
and in its block-table card through the next step's schedule under asynchronous scheduling, freed at its
finish under synchronous; fixed, saying why, where the lab does not replay it. Desktop and phone."""

from __future__ import annotations

from typing import Any

import kvsim.lab as lab_api
from kvsim.lab.bundle import resolve, run_tracks
from kvsim.lab.state import state_at
from tests.browser.conftest import LabPage
from tests.browser.test_lab_page import assert_blocks, assert_cards, assert_tables, python_snapshot


def _first_finish(asynchronous: bool) -> tuple[int, int, list[int]]:
    """The copilot run's first finished request: (its finish state, its request id, its blocks then)."""
    paged, _ = run_tracks(resolve("copilot", async_scheduling=asynchronous))
    k, rid = next((r[0], r[1]) for r in paged.seq_rows if r[3] == "finished")
    table = state_at(paged, k)[0][(rid, 0)][8]
    return k, rid, table


def _cells(lab: LabPage) -> dict[int, dict[str, Any]]:
    return {c["block_id"]: c for c in lab.cells()}


def _card(lab: LabPage, rid: int) -> dict[str, Any]:
    return lab.page.eval_on_selector(
        f"#seq-list .seq[data-rid='{rid}'][data-sample='0']",
        "e => ({status: e.dataset.status, table: e.dataset.table ? e.dataset.table.split(',').map(Number) : []})",
    )


def test_the_async_switch_holds_a_finished_requests_blocks_a_step(sized_lab: LabPage) -> None:
    lab = sized_lab
    lab.open(preset="copilot")
    switch = lab.page.locator("#c-async")
    assert not switch.is_checked()
    assert not switch.is_disabled()
    assert lab.page.text_content("#c-async-label") == "Async scheduling (vLLM's default)"
    assert lab.query()["async_scheduling"] is False
    # Synchronous: at the state a request finishes, its blocks are no longer held.
    k, rid, table = _first_finish(False)
    assert table == []
    lab.seek(k)
    assert _card(lab, rid) == {"status": "finished", "table": []}
    assert_blocks(lab, python_snapshot(lab.query(), k))
    lab.change("#c-async", True)
    q = lab.query()
    assert q["async_scheduling"] is True
    assert lab.page.inner_text("#c-async-state") == "ON"
    lab.page.wait_for_function("window.location.search.includes('async_scheduling=true')", timeout=5_000)
    # Asynchronous: at its finish state the request still holds its blocks (ref_cnt >= 1 on the grid, its
    # card's table), and they are freed in the state after (the next step's schedule).
    k, rid, table = _first_finish(True)
    assert table, "the finisher holds blocks at its finish"
    lab.seek(k)
    assert _card(lab, rid) == {"status": "finished", "table": table}
    cells = _cells(lab)
    for b in table:
        assert cells[b]["ref_cnt"] >= 1, b
        assert cells[b]["state"] in ("private", "shared"), b
    snap = python_snapshot(q, k)
    assert_cards(lab, snap)
    assert_blocks(lab, snap)
    assert_tables(lab, snap)
    lab.seek(k + 1)
    assert _card(lab, rid)["table"] == []
    after = python_snapshot(q, k + 1)
    assert_blocks(lab, after)
    held = {b["block_id"]: b for b in after["blocks"]}
    assert all(rid not in held[b]["request_ids"] for b in table)
    # Off again: the run is the synchronous one.
    lab.change("#c-async", False)
    assert lab.query()["async_scheduling"] is False
    assert lab_api.snapshot("copilot", step=k)["requests"] == python_snapshot(lab.query(), k)["requests"]


def test_the_async_switch_is_fixed_where_the_lab_does_not_replay_it(lab: LabPage) -> None:
    """A hybrid model (vLLM's hybrid KV-cache manager) and a fork-cow preset: the switch is disabled and
    says why; the API refuses the value by name (tests/test_lab_async.py)."""
    lab.open(preset="sliding-window")
    assert lab.page.is_disabled("#c-async")
    assert "the lab replays it on a model of one full-attention group" in lab.page.inner_text("#c-async-why")
    lab.open(preset="parallel-sampling")
    assert lab.page.is_disabled("#c-async")
    assert "needs sampling independent" in lab.page.inner_text("#c-async-why")
