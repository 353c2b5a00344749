#!/usr/bin/env python3
"""Screenshots of every admin page on a phone (390 px) and a laptop (1366 px), into docs/screens/.

    .venv/bin/python scripts/screenshot_pages.py [--out docs/screens] [--light]

Seeds the same busy night as scripts/screenshot_dashboard.py (in a temporary directory; nothing touches
instance/), serves it with gunicorn and signs in with Chromium. Each page is saved as
``<out>/<width>/<page>.png``, the whole page, so a review sees what scrolls as well as what fits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from screenshot_dashboard import ADMIN, JOB_TYPES, PASSWORD, seeded_server  # noqa: E402

from queuelog.queue import flow  # noqa: E402

WIDTHS = {390: 844, 1366: 900}  # a phone held upright, a common laptop


def _pages(page, url: str) -> dict[str, str]:
    """The pages to capture, by file name; a failed job's page is found through the dashboard."""
    page.goto(url + "/admin")
    failed = page.locator(".failures li a.job-link").first.get_attribute("href")
    return {
        "dashboard": "/admin",
        "dashboard-7d": "/admin?range=7d",
        "jobs": "/admin/jobs",
        "job-failed": failed,
        "workers": "/admin/workers",
        "keys": "/admin/keys",
        "types": "/admin/types",
        "type": f"/admin/types/{JOB_TYPES[0]}",
        "errors": "/admin/errors",
        "scheduled": "/admin/scheduled",
        "schedules": "/admin/schedules",
    }


def _seed_flow_control() -> None:
    """A paused type and a limited one with a short history, for the Types pages."""
    flow.update_type(JOB_TYPES[0], {"concurrency_limit": 8}, f"admin:{ADMIN}")
    flow.update_type(JOB_TYPES[0], {"rate_limit": flow.RateLimit(120, 60), "key_concurrency_limit": 2}, "key:ops")
    flow.update_type("sync-crm", {"paused": True}, f"admin:{ADMIN}")


def capture(url: str, out: Path, scheme: str, playwright) -> list[Path]:
    from tests.support.browser import launch_chromium

    saved = []
    browser = launch_chromium(playwright)
    try:
        for width, height in WIDTHS.items():
            context = browser.new_context(
                viewport={"width": width, "height": height}, device_scale_factor=1, color_scheme=scheme
            )
            page = context.new_page()
            page.goto(url + "/admin/login")
            folder = out / str(width)
            folder.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(folder / "login.png"), full_page=True)
            saved.append(folder / "login.png")
            page.fill("input[name=username]", ADMIN)
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(url + "/admin")
            for name, path in _pages(page, url).items():
                page.goto(url + path)
                page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
                saved.append(folder / f"{name}.png")
            context.close()
    finally:
        browser.close()
    return saved


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screens"))
    parser.add_argument("--light", action="store_true", help="capture the light colour scheme")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    with seeded_server(also=_seed_flow_control) as server, sync_playwright() as playwright:
        saved = capture(server.url, Path(args.out), "light" if args.light else "dark", playwright)
    for path in saved:
        print(f"saved {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
