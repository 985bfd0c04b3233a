"""A refused field value on a phone (user53 #13): the page writes the refusal to the banner at the top and puts
the field back to the run's own value; with the field a screen below the banner, the user saw the value turn
to 0 and no message. The banner is scrolled into view where it is off-screen, whichever side refused the
value: the server (a CPU tier too small for one chunk) or the page (a negative size)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvsim.lab.screenshots import LabThread

from .conftest import PHONE, ExternalServer, LabPage, _lab_page

IN_VIEW = """() => {
  const r = document.getElementById('banner').getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, height: window.innerHeight};
}"""


@pytest.fixture
def phone_lab(browser: Any, lab_server: LabThread | ExternalServer) -> Iterator[LabPage]:
    yield from _lab_page(browser, lab_server, PHONE)


@pytest.mark.parametrize(("typed", "says"), [("1", "holds no chunk"), ("-5", "give 0 MiB for no tier")])
def test_a_refused_value_on_a_phone_shows_its_banner(phone_lab: LabPage, typed: str, says: str) -> None:
    lab = phone_lab
    lab.problems.expected_status.add(400)
    lab.open(preset="copilot")
    field = lab.page.locator("#c-tier")
    field.scroll_into_view_if_needed()
    # (the case: the page scrolled down to the field, the banner's place above the screen)
    assert lab.page.evaluate("window.scrollY") > lab.page.evaluate(
        "document.getElementById('banner').offsetTop + 200"
    )
    lab.change("#c-tier", typed)
    box = lab.page.evaluate(IN_VIEW)
    assert lab.page.locator("#banner").is_visible()
    assert box["top"] >= 0, box
    assert box["bottom"] <= box["height"], box
    text = lab.page.inner_text("#banner")
    assert text.startswith("CPU tier (MiB)"), text
    assert says in text, text
    assert lab.page.input_value("#c-tier") == "0"
    lab.problems.console = [m for m in lab.problems.console if "status of 4" not in m]
