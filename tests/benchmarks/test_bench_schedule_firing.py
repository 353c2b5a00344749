"""bench.schedule_firing's quick mode as a smoke test: a ticker fires every-second schedules and the probe's
enqueues get through beside it.

Speed is the measurement's own business (``python -m bench.schedule_firing``); this checks that it still runs.
It makes its own SQLite database and touches none under test, so it runs once, in the SQLite pass.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT

pytestmark = pytest.mark.database_independent


def test_the_quick_schedule_firing_run_fires_jobs_and_times_the_enqueues_beside_it():
    done = subprocess.run(
        [sys.executable, "-m", "bench.schedule_firing", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fired = re.search(r"^SQLite: 20 every-second schedules, [\d.]+ s: (\d+) jobs", done.stdout, re.MULTILINE)
    assert fired and int(fired.group(1)) > 0, done.stdout
    assert re.search(r"^enqueue beside the ticker \((\d+) requests\): p50 [\d.]+ ms", done.stdout, re.MULTILINE), (
        done.stdout
    )
