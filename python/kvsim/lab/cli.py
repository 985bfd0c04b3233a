"""`kvsim lab`: starts the lab's web server (kvsim.lab.server) and prints its URL."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `lab` subcommand to `kvsim`'s subparsers."""
    p = subparsers.add_parser(
        "lab",
        help="the interactive lab page (a local web server)",
        description="Serves the kvsim lab: an interactive page that replays the engine's event log. "
        "Prints the URL; Ctrl-C stops it.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; anything but loopback warns: the lab has no authentication)",
    )
    p.add_argument("--port", type=int, default=0, help="port (default 0: a free one; the URL is printed)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    return p


def main(args: argparse.Namespace) -> int:
    """Runs `kvsim lab` with parsed `args`; returns the exit status."""
    from kvsim.errors import InvalidArgumentError
    from kvsim.lab.server import serve

    if not args.host.strip():
        # (an empty address listened on every interface, and printed "http://:PORT/")
        raise InvalidArgumentError(
            f"argument --host: {args.host!r} names no address: give one (127.0.0.1, the default; 0.0.0.0 for every "
            "interface)"
        )
    if not 0 <= args.port <= 65535:
        raise InvalidArgumentError(f"port {args.port} must be between 0 and 65535")
    serve(args.host, args.port, args.open)
    return 0
