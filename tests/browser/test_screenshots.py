"""`python -m kvsim.lab.screenshots`, run as the README says (a subprocess: it starts its own server and
browser): the PNGs it writes and its one-line errors."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

from kvsim.lab import screenshots


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvsim.lab.screenshots", *args], capture_output=True, text=True, timeout=300
    )


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_writes_a_preset_and_the_inspector(tmp_path: Path) -> None:
    done = run("--out", str(tmp_path), "copilot")
    assert done.returncode == 0, done.stderr
    assert [Path(p).name for p in done.stdout.split()] == [
        "copilot.png",
        "copilot-phone.png",
        "copilot-inspector.png",
    ]
    width, height = png_size(tmp_path / "copilot.png")
    assert width == screenshots.WIDTH
    assert height > screenshots.HEIGHT  # the whole page, not the viewport
    # The phone's capture is the phone's width: the page is no wider than the screen.
    w, h = png_size(tmp_path / "copilot-phone.png")
    assert w == screenshots.PHONE_WIDTH
    assert h > height
    w, h = png_size(tmp_path / "copilot-inspector.png")
    assert 0 < w <= screenshots.WIDTH
    assert 0 < h < height


def test_an_unknown_preset_is_one_line_and_status_2(tmp_path: Path) -> None:
    done = run("--out", str(tmp_path), "no-such-preset")
    assert done.returncode == 2
    err = done.stderr.strip()
    assert "\n" not in err
    assert "no-such-preset" in err
    assert list(tmp_path.iterdir()) == []


def test_shrink_keeps_the_colours_the_page_draws(tmp_path: Path) -> None:
    """A colour the page computes (a group's hue) or blends (a half-opaque swatch) on a few pixels of a
    busy capture comes out exact: `_shrink` keeps the colours and swatch pixels the page reports (G0's
    crimson once came out (169,39,77), the cached swatch grey)."""
    from PIL import Image

    im = Image.new("RGB", (400, 300))
    # A busy capture: far more colours than a palette holds.
    im.putdata([((x * 7) % 256, (y * 5) % 256, ((x + y) * 3) % 256) for y in range(300) for x in range(400)])
    crimson, amber = (228, 33, 78), (120, 92, 40)
    for x in range(10, 16):
        for y in range(10, 16):
            im.putpixel((x, y), crimson)
            im.putpixel((x + 100, y + 100), amber)
    path = tmp_path / "page.png"
    im.save(path)
    screenshots._shrink(path, {"colours": [list(crimson)], "points": [[112, 112]]})
    with Image.open(path) as out:
        rgb = out.convert("RGB")
        assert rgb.getpixel((12, 12)) == crimson
        assert rgb.getpixel((112, 112)) == amber
