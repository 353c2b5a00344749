"""bench.group_commit's quick mode as a smoke test: every job completed exactly once on each server.

Speed is the measurement's own business (``python -m bench.group_commit``); this checks correctness only.
It starts its own servers (the production command on SQLite files of its own) and touches no database under
test, so it runs once, in the SQLite pass.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT

pytestmark = pytest.mark.database_independent


def test_the_quick_group_commit_run_completes_every_job_with_grouping_off_and_on():
    done = subprocess.run(
        [sys.executable, "-m", "bench.group_commit", "--quick"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAILED CHECK" not in done.stdout
    for column in ("SQLite FULL, group commit off", "SQLite FULL, group commit on"):
        assert re.search(rf"^\| {column} \| [\d,]+ \(", done.stdout, re.MULTILINE), done.stdout
