"""Debian's Chromium for the browser tests: where it is, and the flags both tests run it with."""

from __future__ import annotations

import os
import shutil

#: Headless, and nothing that reaches the network on its own.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """``$CHROMIUM``, else ``chromium`` (or ``chromium-browser``) on the PATH; None if none."""
    return (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
