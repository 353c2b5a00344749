"""Where things are, for tests that read the repository's own files (docs, the package, the benchmarks)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "queuelog"
