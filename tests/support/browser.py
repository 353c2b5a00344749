"""Launch Debian's Chromium through Playwright for browser tests.

Playwright normally drives browsers it downloads itself (``playwright
install``); this machine cannot download them, so we point Playwright at the
``chromium`` Debian package instead.  Never run ``playwright install``.

``python -m tests.support.browser [screenshot.png]`` is a self-check: it
serves a page on 127.0.0.1, clicks a button in Chromium and saves a
screenshot.
"""

from __future__ import annotations

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Debian's Chromium launcher; QUEUELOG_CHROMIUM overrides it.
DEFAULT_CHROMIUM = "/usr/bin/chromium"

#: Flags for headless tests on a machine without network or GPU.
CHROMIUM_ARGS = (
    "--no-sandbox",  # we run as root; the sandbox refuses that
    "--disable-gpu",  # there is no GPU
    "--disable-quic",
    "--no-first-run",
    # The network is closed: without these Chromium keeps trying to reach
    # Google services and floods the log with refused connections.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # /dev/shm may be small in containers
)


def chromium_path() -> str:
    """Path of the Chromium executable; a clear error if it is missing."""
    path = os.environ.get("QUEUELOG_CHROMIUM", DEFAULT_CHROMIUM)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"Chromium not found at {path}: install Debian's package with "
            "'apt-get install -y chromium' (scripts/test does this). "
            "Do not run 'playwright install': it downloads browsers."
        )
    return path


def launch_chromium(playwright, *, headless: bool = True, extra_args: tuple[str, ...] = (), **launch_options):
    """Launch Chromium and return a Playwright ``Browser``.

    ``playwright`` is the object from ``sync_playwright()`` (or its async
    twin, in which case the result must be awaited).  ``extra_args`` are
    added to CHROMIUM_ARGS; other keyword arguments go to
    ``playwright.chromium.launch``.
    """
    return playwright.chromium.launch(
        executable_path=chromium_path(),
        headless=headless,
        args=[*CHROMIUM_ARGS, *extra_args],
        **launch_options,
    )


# -- self-check ------------------------------------------------------------

DEMO_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>queuelog browser check</title></head>
<body style="font-family: sans-serif; padding: 2em">
  <h1>Browser check</h1>
  <button id="go" onclick="document.getElementById('out').textContent = 'clicked'">
    Click me</button>
  <p id="out">not clicked</p>
</body></html>
"""


class _DemoHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(DEMO_PAGE)))
        self.end_headers()
        self.wfile.write(DEMO_PAGE)

    def log_message(self, *args):  # keep test output quiet
        pass


def serve_demo_page() -> ThreadingHTTPServer:
    """Serve DEMO_PAGE on a free 127.0.0.1 port in a daemon thread.

    The URL is ``http://127.0.0.1:%d/" % server.server_port``; call
    ``shutdown()`` and ``server_close()`` when done.
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DemoHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def click_and_screenshot(playwright, screenshot: Path) -> str:
    """Open the demo page, click its button, save a screenshot.

    Returns the text shown after the click ("clicked" when all went well).
    """
    server = serve_demo_page()
    try:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_port}/")
            page.click("#go")
            text = page.text_content("#out")
            page.screenshot(path=str(screenshot))
            return text
        finally:
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    screenshot = Path(argv[0] if argv else "browser-check.png")
    with sync_playwright() as playwright:
        text = click_and_screenshot(playwright, screenshot)
    size = screenshot.stat().st_size
    print(f"after click the page says {text!r}; screenshot {screenshot} ({size} bytes)")
    return 0 if text == "clicked" and size > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
