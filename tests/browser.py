"""Debian's Chromium driven by Playwright (it downloads no browser of its own), and where the
screenshots go: `.test-output/screenshots/` (QG_SCREENSHOTS to move it); pytest's summary lists them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
_DEFAULT = Path(__file__).parents[1] / ".test-output" / "screenshots"
SCREENSHOTS = Path(os.environ.get("QG_SCREENSHOTS", _DEFAULT))
# Headless, and nothing that reaches for the network: on a closed network Chromium's background
# services fail by the dozen (env skill notes).
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TAKEN: list[Path] = []


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (scripts/system_deps.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(90_000)
            yield page
        finally:
            browser.close()


def screenshot(page: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    TAKEN.append(path)
    return path
