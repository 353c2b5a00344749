"""The benchmark's quick mode as a smoke test: every job of every round completed exactly once.

It checks correctness only, never speed (speed is the benchmark's own business: `python -m bench.run`).
The benchmark starts its own servers (gunicorn over SQLite and over a throwaway PostgreSQL, huey, RQ on
a private redis-server, the Flask ceiling) and the worker commands users run (queuelog-worker, rq worker,
huey_consumer), so it runs once per CI run, in the SQLite pass.
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys

import pytest

from tests.support.database import test_db_kind
from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT
HAS_POSTGRESQL = bool(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
HAS_REDIS = shutil.which("redis-server") is not None

pytestmark = pytest.mark.skipif(
    test_db_kind() != "sqlite", reason="the benchmark starts its own databases; it runs once, in the SQLite pass"
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """(the finished process, bench.json, bench.md) of one quick run."""
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads((out / "bench.json").read_text()) if (out / "bench.json").exists() else None
    table = (out / "bench.md").read_text() if (out / "bench.md").exists() else None
    return done, report, table


def test_the_quick_benchmark_exits_0(quick_run):
    done, _, _ = quick_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_every_job_of_every_round_completed_exactly_once(quick_run):
    _, report, _ = quick_run
    failed = [check for check in report["checks"] if not check["ok"]]
    assert not failed, failed


def test_every_system_this_machine_can_run_was_measured(quick_run):
    _, report, _ = quick_run
    measured = {check["target"] for check in report["checks"]}
    expected = {"sqlite", "sqlite_normal", "huey", "ceiling"}
    if HAS_POSTGRESQL:
        expected.add("postgresql")
    if HAS_REDIS:
        expected.add("rq")
    assert expected <= measured, report.get("notes")


def worker_columns() -> set[str]:
    """The worker rows this machine can run: the shipped worker and the peers' own worker commands."""
    columns = {"ql_worker_sqlite", "huey_consumer"}
    if HAS_POSTGRESQL:
        columns.add("ql_worker_postgresql")
    if HAS_REDIS:
        columns |= {"rq_simple", "rq_simple_aof", "rq_worker", "rq_worker_aof"}
    return columns


def test_every_worker_command_drained_its_jobs_and_was_probed_for_pickup(quick_run):
    _, report, _ = quick_run
    checked = {(check["target"], check["metric"]) for check in report["checks"]}
    for column in worker_columns():
        assert (column, "drain_c2") in checked, report.get("notes")
        assert (column, "pickup_p50") in checked, report.get("notes")
        assert report["metrics"][column]["drain_c2"] > 0
        assert report["metrics"][column]["pickup_samples"] == report["config"]["pickup_samples"]


def test_the_shipped_worker_ran_every_job_exactly_once_by_the_queues_own_record(quick_run):
    _, report, _ = quick_run
    shipped = [check for check in report["checks"] if check["target"].startswith("ql_worker_")]
    assert shipped and all(check["ok"] for check in shipped), shipped
    assert all("claimed/completed events" in check["detail"] for check in shipped)


def test_each_target_is_reported_met_or_missed_from_the_runs_own_figures(quick_run):
    _, report, table = quick_run
    targets = {target["label"]: target for target in report["targets"]}
    pickup = targets["pickup p50, queuelog-worker (SQLite)"]
    assert pickup["value"] == report["metrics"]["ql_worker_sqlite"]["pickup_p50"]
    assert pickup["met"] is (pickup["value"] <= 5)
    verdict = "met" if pickup["met"] else "missed"
    assert f"- **{verdict}** pickup p50, queuelog-worker (SQLite): {pickup['value']:.2f} ms" in table
    # Quick mode has no 16-worker rounds: that target is said to be unmeasured, not met or missed.
    at_16 = "queuelog-worker (SQLite) at 16 ÷ batch path end-to-end, 16 workers"
    assert targets[at_16]["met"] is None
    assert f"- **not measured** {at_16}" in table


def test_every_pickup_sample_of_the_shipped_worker_is_placed_by_the_server_process_of_its_claim(quick_run):
    _, report, _ = quick_run
    for column in worker_columns() & {"ql_worker_sqlite", "ql_worker_postgresql"}:
        figures = report["metrics"][column]
        placed = figures["pickup_samples_same_process"] + figures["pickup_samples_other_process"]
        assert placed == figures["pickup_samples"], figures
