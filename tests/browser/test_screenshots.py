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
