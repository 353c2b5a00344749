"""The admin pages beside a large history, for ``python -m bench.soak --shape history``: what an operator waits for
when the history is large (the Top errors page, the job search, a finished job's page), timed through the
checkout's production server as a signed-in admin sees them.

The history's fill (bench/soak_history.py) makes one job in ten failed, with one of ``CAUSES`` errors, and gives
every job a payload ``{"customer_id": …}`` (one of 1,000), so that each search below has something to find or not.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

ROUNDS = 15
#: Untimed visits of each page first: a server that has shown the page before, as an operator's has. Where a read
#: is prepared (database/transactions.py), PostgreSQL settles on one plan for it after five runs on a connection,
#: and each of the server's worker processes has its own connections.
WARM_VISITS = 40
CAUSES = 30
ADMIN = "bench-admin"
_PASSWORD = "a bench's own password, long enough"
_TOKEN = re.compile(r'name="csrf_token"(?: type="hidden")? value="([^"]+)"')
#: (what, path): ``{job}`` is a failed job of the history.
PAGES = (
    ("Top errors", "/admin/errors"),
    ("failed jobs, error contains a common text", "/admin/jobs?status=failed&error=upstream"),
    ("failed jobs, error contains a text no job has", "/admin/jobs?status=failed&error=no-such-words"),
    ("payload customer_id = 42 (1 in 1,000)", "/admin/jobs?path=customer_id&value=42"),
    ("the jobs list, first page", "/admin/jobs"),
    ("a failed job's page, in history", "/admin/jobs/{job}"),
)


def error_of(row: str) -> str:
    """SQL for the error text of a failed row numbered ``row`` of the fill: one of CAUSES causes, without digits
    (error grouping masks numbers, so each cause is its own group)."""
    return f"'the upstream refused the request: cause ' || chr(65 + abs(hashint4({row} + 1)) % {CAUSES})"


@dataclass(frozen=True)
class Site:
    """One checkout's server over its full history, and a failed job of that history."""

    tree: Path
    env: dict[str, str]
    base_url: str
    job_id: int


def measure(
    sites: dict[str, Site], warm_visits: int = WARM_VISITS, rounds: int = ROUNDS
) -> dict[str, dict[str, float]]:
    """Median milliseconds of each of PAGES on each site, over ``rounds`` visits after ``warm_visits`` untimed
    ones, as a signed-in admin. The sites take turns visit by visit, so that the machine's swings fall on all
    alike (a page's difference between checkouts is a millisecond or two: less than a minute's drift)."""
    sessions = {label: _signed_in(site.tree, site.env, site.base_url) for label, site in sites.items()}
    figures: dict[str, dict[str, float]] = {label: {} for label in sites}
    for name, path in PAGES:
        urls = {label: site.base_url + path.format(job=site.job_id) for label, site in sites.items()}
        for _ in range(warm_visits):
            for label, url in urls.items():
                _visit(sessions[label], url)
        times: dict[str, list[float]] = {label: [] for label in sites}
        for _ in range(rounds):
            for label, url in urls.items():
                began = time.perf_counter()
                _visit(sessions[label], url)
                times[label].append((time.perf_counter() - began) * 1000)
        for label in sites:
            figures[label][name] = statistics.median(times[label])
    return figures


def _visit(session: requests.Session, url: str) -> None:
    response = session.get(url, timeout=120)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}")


def _signed_in(tree: Path, env: dict[str, str], base_url: str) -> requests.Session:
    done = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "users", "create", ADMIN, "--password-stdin"],
        cwd=tree,
        env={**os.environ, **env},
        input=_PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"flask users create failed: {done.stderr[-500:]}")
    session = requests.Session()
    token = _TOKEN.search(session.get(base_url + "/admin/login", timeout=30).text)
    if token is None:
        raise RuntimeError("no CSRF token on the sign-in page")
    answer = session.post(
        base_url + "/admin/login",
        data={"username": ADMIN, "password": _PASSWORD, "csrf_token": token.group(1)},
        allow_redirects=False,
        timeout=30,
    )
    if answer.status_code != 302:
        raise RuntimeError(f"signing in answered {answer.status_code}")
    return session


def print_comparison(figures: dict[str, dict]) -> None:
    """Each page's time per checkout, and where there are two, the later over the earlier."""
    labels = [label for label in figures if "pages" in figures[label]]
    if not labels:
        return
    print("\nthe admin pages beside the history (median ms):")
    print(
        f"  {'page':<48}" + "".join(f"{label:>12}" for label in labels) + ("       ratio" if len(labels) == 2 else "")
    )
    for name, _path in PAGES:
        times = [figures[label]["pages"][name] for label in labels]
        ratio = f"{times[1] / times[0]:>11.2f}×" if len(times) == 2 else ""
        print(f"  {name:<48}" + "".join(f"{t:>12.1f}" for t in times) + ratio)
