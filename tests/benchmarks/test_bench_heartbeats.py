"""bench.heartbeats' quick mode as a smoke test: it runs on a throwaway PostgreSQL and prints its figures.

The figures are the measurement's own business (``python -m bench.heartbeats``; that heartbeats are HOT updates
is tests/integration/state_machine/test_heartbeats.py's). It starts its own cluster, so it runs once, in the
SQLite pass.
"""

from __future__ import annotations

import glob
import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = [
    pytest.mark.database_independent,
    pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/initdb"), reason="needs PostgreSQL's initdb"),
]


def test_the_quick_heartbeat_measurement_prints_every_figure():
    done = subprocess.run(
        [sys.executable, "-m", "bench.heartbeats", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "60 heartbeats on 20 running jobs, 3 each" in done.stdout
    for figure in ("updates of jobs", "of them HOT"):
        assert re.search(rf"^\s+{figure}\s+\d+$", done.stdout, re.MULTILINE), done.stdout
    for size in ("table", "indexes"):
        assert re.search(rf"^\s+{size}, KiB\s+\d+ -> \d+$", done.stdout, re.MULTILINE), done.stdout
