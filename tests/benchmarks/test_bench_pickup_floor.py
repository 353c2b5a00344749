"""bench.pickup_floor's quick mode as a smoke test: every chain of plain processes carries its pickups.

Speed is the measurement's own business (``python -m bench.pickup_floor``); this checks that it still runs.
It starts its own processes and touches no database under test, so it runs once, in the SQLite pass.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT

pytestmark = pytest.mark.database_independent


def test_the_quick_pickup_floor_times_every_chain():
    done = subprocess.run(
        [sys.executable, "-m", "bench.pickup_floor", "--quick"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for chain in ("bare", "threads", "sqlite"):
        assert re.search(rf"^\s+{chain}\s+3\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d\d$", done.stdout, re.MULTILINE), (
            done.stdout
        )
