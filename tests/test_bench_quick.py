"""The benchmark's quick mode as a smoke test: every job of every round completed exactly once.

It checks correctness only, never speed (speed is the benchmark's own business: `python -m bench.run`).
The benchmark starts its own servers (gunicorn over SQLite and over a throwaway PostgreSQL, huey, RQ on
a private redis-server, the Flask ceiling), so it runs once per CI run, in the SQLite pass.
"""
from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import test_db_kind

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(test_db_kind() != "sqlite",
                                reason="the benchmark starts its own databases; it runs once, in the SQLite pass")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    report = json.loads((out / "bench.json").read_text()) if (out / "bench.json").exists() else None
    return done, report


def test_the_quick_benchmark_exits_0(quick_run):
    done, _ = quick_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_every_job_of_every_round_completed_exactly_once(quick_run):
    _, report = quick_run
    failed = [check for check in report["checks"] if not check["ok"]]
    assert not failed, failed


def test_every_system_this_machine_can_run_was_measured(quick_run):
    _, report = quick_run
    measured = {check["target"] for check in report["checks"]}
    expected = {"sqlite", "sqlite_normal", "huey", "ceiling"}
    if glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        expected.add("postgresql")
    if shutil.which("redis-server"):
        expected.add("rq")
    assert expected <= measured, report.get("notes")
