"""bench.soak's quick mode as a smoke test, both shapes, each on a throwaway PostgreSQL: the held snapshot (the
production server and the shipped worker under a steady load) prints its timeline and verdicts; the history shape
prints its ratios, the removal of a day and the admin pages' times.

The figures are the measurement's own business (``python -m bench.soak``; what a held snapshot costs a finish or
a heartbeat is tests/integration/operations/test_held_snapshot.py's). It starts its own cluster, so it runs once,
in the SQLite pass.
"""

from __future__ import annotations

import glob
import re
import subprocess
import sys

import pytest

from bench.history_pages import PAGES
from tests.support.paths import REPO_ROOT

pytestmark = [
    pytest.mark.database_independent,
    pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/initdb"), reason="needs PostgreSQL's initdb"),
]


def test_the_quick_soak_runs_every_job_once_and_prints_its_timeline_and_verdicts():
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    phases = re.findall(r"^\s+\d+ s  (baseline|hold|after)\s+claim p50", done.stdout, re.MULTILINE)
    assert phases == ["baseline"] * 2 + ["hold"] * 2 + ["after"], done.stdout
    assert re.search(r"every one of the \d+ jobs of the run completed, each claimed once", done.stdout), done.stdout
    for verdict in ("contract ≤ 2×", "contract ≥ 0.9×", "contract ≤ 60 s", "dead rows at release"):
        assert verdict in done.stdout, done.stdout


@pytest.fixture(scope="module")
def quick_history():
    """The standard output of one quick run of the history shape."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--shape", "history", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_quick_history_shape_prints_its_ratios_and_the_removal_of_a_day(quick_history):
    for name in ("enqueue p50", "enqueue p99", "claim p50", "claim p99"):
        assert re.search(rf"^\s+{name}\s+\d+\.\d\d× \(contract ≤ 1\.1×\)$", quick_history, re.MULTILINE), quick_history
    removed = re.search(r"removing a day: \d+\.\d\d s \(contract < 1 s\), (\d+) rows of jobs", quick_history)
    assert removed, quick_history


def test_the_quick_history_shape_times_each_admin_page_beside_the_history(quick_history):
    for name, _path in PAGES:
        assert re.search(rf"^\s+{re.escape(name)}\s+\d+\.\d$", quick_history, re.MULTILINE), quick_history
