"""Debian's Chromium driven by Playwright, one browser per test module: the browser test of the benches and
the room's test use the same fixture (``from chromium import browser``)."""
import os
import time
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("SHAPELAB_CHROMIUM", "/usr/bin/chromium")
INSTALL_HINT = "sudo apt-get install chromium  (Debian/Ubuntu), then: pip install playwright"
INSTALLING = Path(__file__).resolve().parents[1] / ".ci" / "installing"  # .ci/run's background installer's PID


def system_ready(timeout: float = 600) -> None:
    """Return once .ci/run's background install of the system packages (Chromium, the hub's proxy) has ended;
    at once outside CI, or when the marker is left by an installer that no longer runs."""
    deadline = time.monotonic() + timeout
    while INSTALLING.exists() and time.monotonic() < deadline:
        try:
            os.kill(int(INSTALLING.read_text().strip()), 0)
        except (ValueError, OSError):
            return  # no such process (a stopped run's marker), or the marker went while we read it
        time.sleep(0.5)


def _browser_available() -> str | None:
    """None if the browser test can run, else the reason it cannot."""
    system_ready()
    if not Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM}; install it with: {INSTALL_HINT}"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return f"the playwright package is missing; install it with: {INSTALL_HINT}"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _browser_available()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser test is mandatory in CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"],
        )
        yield b
        b.close()
