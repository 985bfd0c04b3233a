"""Screenshots of the lab page: `python -m kvsim.lab.screenshots` writes results/lab/<preset>.png for every
preset (the whole page at the preset's opening step in a 1440×900 desktop window), <preset>-phone.png (the
same at a phone's 390×844; the disaggregated fleet's page, `/pd`, for its presets) and copilot-inspector.png (the block pool with the inspector open on a shared
block), by running the lab server in a thread and driving Debian's chromium with playwright (the `browser`
extra), each saved as a 256-colour PNG keeping the colours the page draws (`_shrink`). The browser tests start the server the same way
(`LabThread`).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError

CHROMIUM = os.environ.get("KVSIM_CHROMIUM", "/usr/bin/chromium")
WIDTH, HEIGHT = 1440, 900
PHONE_WIDTH, PHONE_HEIGHT = 390, 844


class LabThread:
    """The lab server (uvicorn serving `kvsim.lab.server.create_app()`) on 127.0.0.1 and a free port, in a
    daemon thread; a context manager whose `url` is the page's address."""

    def __init__(self) -> None:
        import uvicorn

        from kvsim.lab.server import create_app

        config = uvicorn.Config(create_app(), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="kvsim-lab", daemon=True)
        self.url = ""

    def __enter__(self) -> LabThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the lab server did not start")
            time.sleep(0.02)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}/"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


# Every view shows the current step (views off screen catch up when the browser is idle).
SETTLED = "document.body.dataset.settled === document.body.dataset.step"
# A full-page capture paints the page past the viewport, where `content-visibility: auto` (lab.css: the
# sections below the fold) skips painting; a user scrolling there sees them painted, so the capture does.
PAINT_ALL = "section { content-visibility: visible !important; }"


def _wait_ready(page: Any) -> None:
    page.wait_for_selector("body[data-ready=true][data-runs]", timeout=120_000)
    page.wait_for_function(SETTLED, timeout=30_000)
    err = page.evaluate("document.body.dataset.error || null")
    if err:
        raise RuntimeError(f"the page refused the run: {err}")


def _page_colours() -> list[tuple[int, int, int]]:
    """The colours lab.css names in hex (its custom properties: the states', the tier's, the page's): a
    legend's swatch or a few chunks are too few pixels for a median cut over the whole page to keep, which
    gave them a neighbour's colour (the tier's amber "pending" swatch came out red)."""
    css = (Path(__file__).parent / "static" / "lab.css").read_text()
    found = re.findall(r"--c-[\w-]+:\s*#([0-9a-fA-F]{6})\b", css)
    return list(dict.fromkeys((int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)) for h in found))


# The colours the page computes rather than names in lab.css, as the page reports them: a hybrid model's
# group colours (`groupColors`: each group's main, dark, border and empty, drawn in the grid, the strip and
# the inspector), and the centres of its swatches (legend squares, demo cells, group tags: CSS blends such
# as the cached swatch's half-opaque amber), whose pixels `_shrink` keeps exactly. Without them a median
# cut gave G0's crimson (228,33,78) as (169,39,77) in one capture and the cached swatch a grey.
DRAWN_COLOURS = """async () => {
  const toRgb = (css) => { const c = document.createElement('canvas'); c.width = c.height = 1;
    const x = c.getContext('2d'); x.fillStyle = css; x.fillRect(0, 0, 1, 1);
    const d = x.getImageData(0, 0, 1, 1).data; return [d[0], d[1], d[2]]; };
  const colours = [];
  const groups = window.kvlab && kvlab.replay && kvlab.replay.groups;
  if (groups) {
    const { groupColors } = await import(new URL('static/js/grid.js', document.baseURI).href);
    for (const g of groupColors(groups)) for (const css of [g.main, g.dark, g.border, g.empty]) colours.push(toRgb(css));
  }
  const points = [];
  for (const el of document.querySelectorAll('.sw, .cell.demo, .pd-demo, .group-tag, .legend .cell')) {
    const r = el.getBoundingClientRect();
    if (r.width < 3 || r.height < 3) continue;
    points.push([Math.floor(r.left + r.width / 2 + scrollX), Math.floor(r.top + r.height / 2 + scrollY)]);
  }
  return { colours, points };
}"""


def _drawn_colours(view: Any) -> dict[str, list[list[int]]]:
    """What `DRAWN_COLOURS` reports of the page in `view` (nothing when it cannot tell)."""
    try:
        got = view.evaluate(DRAWN_COLOURS)
    except Exception:  # pragma: no cover - a page without the lab's modules
        return {"colours": [], "points": []}
    return {"colours": list(got.get("colours", [])), "points": list(got.get("points", []))}


def _shrink(path: Path, drawn: dict[str, list[list[int]]] | None = None, scale: float = 1.0) -> None:
    """Rewrites a screenshot as a 256-colour PNG (no dither): the stylesheet's own colours
    (`_page_colours`), those the page computes (`drawn`: its group colours and its swatches' pixels, at
    page points × `scale`), then a median cut's for the rest, each pixel the nearest of them; the page's
    flat panels and few colours survive it, at about a third of the bytes. Left as captured without
    Pillow (which matplotlib, a kvsim dependency, brings)."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - depends on the environment
        return
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    keep = _page_colours()
    if drawn:
        keep.extend((int(c[0]), int(c[1]), int(c[2])) for c in drawn.get("colours", []))
        w, h = rgb.size
        for x, y in drawn.get("points", []):
            px, py = int(x * scale), int(y * scale)
            if 0 <= px < w and 0 <= py < h:
                r, g, b = rgb.getpixel((px, py))  # type: ignore[misc]
                keep.append((int(r), int(g), int(b)))
    keep = list(dict.fromkeys(keep))[:128]  # (distinct; half the palette at most, the cut has the rest)
    cut = rgb.quantize(colors=256 - len(keep), method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    palette = (cut.getpalette() or [])[: 3 * (256 - len(keep))]
    for c in keep:
        palette.extend(c)
    ref = Image.new("P", (1, 1))
    ref.putpalette(palette)
    small = rgb.quantize(palette=ref, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def take(out: Path, names: Sequence[str] | None = None) -> list[Path]:
    """Writes the screenshots into `out`; returns their paths.

    Raises:
        InvalidArgumentError: an unknown preset name.
        RuntimeError: playwright or chromium is missing, or the page reported an error.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "screenshots need playwright and the lab server: pip install 'kvsim[browser]'"
        ) from e
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"no chromium at {CHROMIUM} (apt-get install -y chromium, or set KVSIM_CHROMIUM)")
    from kvsim import lab
    from kvsim.lab.pd import PD_PRESETS

    available = [p["name"] for p in lab.presets() if p.get("available", True)] + list(PD_PRESETS)
    wanted = list(names) if names else available
    for n in wanted:
        if n not in available:
            raise InvalidArgumentError(f"preset {n!r} is not one of {', '.join(map(repr, available))}")
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with LabThread() as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            errors: list[str] = []
            phone = browser.new_context(
                viewport={"width": PHONE_WIDTH, "height": PHONE_HEIGHT},
                device_scale_factor=1,
                is_mobile=True,
                has_touch=True,
            ).new_page()
            context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=1)
            page = context.new_page()
            for p_ in (page, phone):
                p_.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                p_.on("pageerror", lambda e: errors.append(str(e)))
            for name in wanted:
                for view, suffix in ((page, ""), (phone, "-phone")):
                    if name in PD_PRESETS:  # the disaggregated fleet's page, at its opening instant
                        view.goto(f"{server.url}pd?preset={name}")
                        view.wait_for_selector("main#pd[aria-busy=false]", timeout=60_000)
                    else:
                        view.goto(f"{server.url}?preset={name}")
                        _wait_ready(view)
                    view.add_style_tag(content=PAINT_ALL)
                    view.wait_for_timeout(150)  # let the canvases settle after the last resize
                    path = out / f"{name}{suffix}.png"
                    drawn = _drawn_colours(view)
                    view.screenshot(path=str(path), full_page=True)
                    _shrink(path, drawn)
                    written.append(path)
            if "copilot" in wanted:
                page.goto(f"{server.url}?preset=copilot")
                _wait_ready(page)
                page.click('#grid .cell[data-state="shared"]')
                page.wait_for_timeout(100)
                path = out / "copilot-inspector.png"
                pool = page.locator("section.pool")
                box = pool.bounding_box() or {"x": 0, "y": 0}
                drawn = _drawn_colours(page)
                scroll = page.evaluate("[scrollX, scrollY]")
                # (the swatches' page points, moved to the element's capture)
                drawn["points"] = [
                    [x - box["x"] - scroll[0], y - box["y"] - scroll[1]] for x, y in drawn["points"]
                ]
                pool.screenshot(path=str(path))
                _shrink(path, drawn)
                written.append(path)
            if errors:
                raise RuntimeError(f"the page logged errors: {errors}")
        finally:
            browser.close()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    from kvsim.cli.flags import Parser  # (argparse's, its errors one line and exit status 2)

    ap = Parser(prog="python -m kvsim.lab.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", type=Path, default=Path("results/lab"), help="output folder (default results/lab)"
    )
    ap.add_argument("presets", nargs="*", help="preset names (default: every available preset)")
    args = ap.parse_args(argv)
    try:
        paths = take(args.out, args.presets or None)
    except (InvalidArgumentError, RuntimeError) as e:
        print(f"kvsim.lab.screenshots: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
