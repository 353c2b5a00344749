"""bench.push's quick mode as a smoke test: push delivery and the shipped worker each drain their jobs on the
production server, every job completes once, and the figures are printed. Their size is the benchmark's business
(``python -m bench.push``), not this test's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.database_independent


def test_the_quick_push_benchmark_completes_every_job_once_and_prints_both_rates():
    done = subprocess.run(
        [sys.executable, "-m", "bench.push", "--quick"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^median\s+\d+\s+\d+\s+[\d.]+×$", done.stdout, re.MULTILINE), done.stdout
    assert "every one of the 200 jobs of the run completed once" in done.stdout, done.stdout
