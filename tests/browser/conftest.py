"""The lab page in a real browser: the lab server on a free port in a thread (`LabThread`), Debian's chromium driven by
playwright (launched from its executable path; playwright's own browser downloads are not used), and a
page fixture that fails the test on any console error, uncaught exception or failed request."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest

from kvsim.lab.screenshots import CHROMIUM, SETTLED, LabThread

playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install 'kvsim[browser]')"
)
if not (os.path.isfile(CHROMIUM) or shutil.which(CHROMIUM)):
    pytest.skip(
        f"no chromium at {CHROMIUM} (apt-get install -y chromium, or set KVSIM_CHROMIUM)",
        allow_module_level=True,
    )


class ExternalServer:
    """A lab server already running at KVSIM_LAB_URL (to test a deployed server)."""

    def __init__(self, url: str) -> None:
        self.url = url if url.endswith("/") else url + "/"


@pytest.fixture(scope="session")
def lab_server() -> Iterator[LabThread | ExternalServer]:
    external = os.environ.get("KVSIM_LAB_URL")
    if external:
        yield ExternalServer(external)
        return
    with LabThread() as server:
        yield server


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


@dataclass
class Problems:
    """What went wrong in the page: console errors, uncaught exceptions, failed or 4xx/5xx requests."""

    console: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    expected_status: set[int] = field(default_factory=set)

    def all(self) -> list[str]:
        return [*self.console, *self.exceptions, *self.requests]


@dataclass
class LabPage:
    """A browser page on the lab plus helpers to drive it."""

    page: Any
    server: LabThread | ExternalServer
    problems: Problems

    def open(self, **query: Any) -> None:
        """Loads the page with `query` in its URL and waits until the run is drawn."""
        url = self.server.url + (f"?{urlencode(query)}" if query else "")
        self.page.goto(url)
        self.wait_ready()

    def wait_ready(self, runs: int | None = None) -> None:
        """Waits for the run to be drawn, off-screen views included (they catch up when idle)."""
        if runs is None:
            self.page.wait_for_selector("body[data-ready=true][data-runs]", timeout=60_000)
        else:
            self.page.wait_for_function(
                f"document.body.dataset.ready === 'true' && Number(document.body.dataset.runs) >= {runs}",
                timeout=60_000,
            )
        self.page.wait_for_function(SETTLED, timeout=10_000)

    def runs(self) -> int:
        return int(self.page.evaluate("Number(document.body.dataset.runs || 0)"))

    def change(self, selector: str, value: Any) -> None:
        """Changes a control and waits for the run it triggers."""
        before = self.runs()
        el = self.page.locator(selector)
        if isinstance(value, bool):
            el.set_checked(value, force=True)
        elif el.evaluate("e => e.tagName") == "SELECT":
            el.select_option(str(value))
        else:
            el.fill(str(value))
            el.dispatch_event("change")
        self.wait_ready(before + 1)

    def seek(self, step: int) -> None:
        """Moves the scrubber to the first instant at which the paged track is at state `step` (the
        contiguous one at its last state by then), as a user dragging it does (input events)."""
        moment = int(self.page.evaluate(f"kvlab.replay.momentOfStep({int(step)})"))
        self.seek_moment(moment)
        self.page.wait_for_function(f"document.body.dataset.step === '{step}'", timeout=10_000)

    def seek_moment(self, moment: int) -> None:
        """Moves the scrubber to instant `moment` (each track at its last state by then)."""
        self.page.eval_on_selector(
            "#r-scrub",
            "(el, k) => { el.value = String(k); el.dispatchEvent(new Event('input', {bubbles: true})); }",
            moment,
        )
        self.page.wait_for_function(f"document.body.dataset.moment === '{moment}'", timeout=10_000)
        self.page.wait_for_function(SETTLED, timeout=10_000)

    def step(self) -> int:
        return int(self.page.evaluate("Number(document.body.dataset.step)"))

    def value(self, selector: str) -> float | None:
        raw = self.page.get_attribute(selector, "data-value")
        return None if raw in (None, "", "null") else float(raw)

    def cells(self) -> list[dict[str, Any]]:
        """Every drawn grid cell as {block_id, state, ref_cnt, num_tokens, filling} (filling: drawn as a
        block a CPU-tier load in flight is filling)."""
        return self.page.eval_on_selector_all(
            "#grid .cell",
            """els => els.map(e => ({block_id: Number(e.dataset.block), state: e.dataset.state,
                 ref_cnt: Number(e.dataset.ref), num_tokens: Number(e.dataset.tokens),
                 filling: e.dataset.filling === 'true'}))""",
        )

    def query(self) -> dict[str, Any]:
        return self.page.evaluate("window.kvlab.replay.bundle.query")

    def fits(self) -> bool:
        """Nothing wider than the screen asked for (a phone's window widens to a page wider than it, so
        the page is measured against the viewport's width, not the window's)."""
        width = self.page.viewport_size["width"]
        return bool(
            self.page.evaluate(
                f"document.documentElement.scrollWidth <= {width} && window.innerWidth <= {width}"
            )
        )


# The sizes the page is tested at: a desktop window, a phone (iPhone 12-15's CSS pixels) and the narrowest
# phone the layout supports.
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
SMALL_PHONE = {"width": 360, "height": 640}
VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE, "small-phone": SMALL_PHONE}


@pytest.fixture
def lab(browser: Any, lab_server: LabThread | ExternalServer) -> Iterator[LabPage]:
    """A fresh page in a desktop window; after the test, asserts that nothing went wrong in it."""
    yield from _lab_page(browser, lab_server, DESKTOP)


@pytest.fixture(params=["desktop", "phone"])
def sized_lab(request: Any, browser: Any, lab_server: LabThread | ExternalServer) -> Iterator[LabPage]:
    """`lab` at a desktop window and at a phone's viewport (the test runs once at each)."""
    yield from _lab_page(browser, lab_server, VIEWPORTS[request.param])


def _lab_page(
    browser: Any, lab_server: LabThread | ExternalServer, viewport: dict[str, int]
) -> Iterator[LabPage]:
    phone = viewport["width"] < 600
    context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
    page = context.new_page()
    problems = Problems()
    page.on(
        "console", lambda m: problems.console.append(f"{m.type}: {m.text}") if m.type == "error" else None
    )
    page.on("pageerror", lambda e: problems.exceptions.append(str(e)))
    page.on("requestfailed", lambda r: problems.requests.append(f"failed {r.url}: {r.failure}"))

    def on_response(r: Any) -> None:
        if r.status >= 400 and r.status not in problems.expected_status:
            problems.requests.append(f"{r.status} {r.url}")

    page.on("response", on_response)
    lab_page = LabPage(page=page, server=lab_server, problems=problems)
    yield lab_page
    context.close()
    assert problems.all() == [], "the page reported problems"
