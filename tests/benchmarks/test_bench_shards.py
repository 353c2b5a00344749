"""bench.shards' quick mode as a smoke test: job types on two PostgreSQL databases behind the prototype router,
drained by the shipped worker that knows nothing of shards, every job completed once, and what cannot span two
shards refused. The figures are the benchmark's business (``python -m bench.shards``), not this test's."""

from __future__ import annotations

import glob
import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = [
    pytest.mark.database_independent,  # it starts its own PostgreSQL databases whatever the pass's database
    pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/initdb"), reason="needs PostgreSQL's binaries"),
]


def test_the_quick_shard_benchmark_completes_every_job_once_on_both_targets_and_refuses_across_shards():
    done = subprocess.run(
        [sys.executable, "-m", "bench.shards", "--quick"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = re.findall(r"^\| (one database|two shards, routed) \|.*\| yes \|$", done.stdout, re.MULTILINE)
    assert rows == ["one database", "two shards, routed"], done.stdout
    assert done.stdout.count(": as designed") == 5, done.stdout
    assert "NOT as designed" not in done.stdout
