"""Without the ``otel`` extra nothing of OpenTelemetry is imported, and enqueue, claim and the worker work as ever."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.server import REPO_ROOT


def test_without_opentelemetry_enqueue_claim_and_a_workers_run_import_none_of_it(database_url):
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.tracing.without_otel", database_url],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "enabled": False,
        "claimed": True,
        "ran": "completed",
        "result": {"ran": True},
        "imported": [],
    }
