"""A process lets go of a SQLite database's files once its app's engine is disposed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from queuelog.extensions import db
from tests.support.database import test_db_kind

pytestmark = pytest.mark.skipif(test_db_kind() != "sqlite", reason="PostgreSQL's files are the server's")


def files_open_in(directory: Path) -> list[str]:
    opened = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith(str(directory)):
            opened.append(target)
    return opened


def test_a_disposed_engine_leaves_no_file_of_its_database_open(enqueue, database_url):
    enqueue()  # a write: the group commit's turn opens the writers' lock file
    directory = Path(database_url.removeprefix("sqlite:///")).parent
    assert files_open_in(directory)
    db.session.remove()
    db.engine.dispose()
    assert files_open_in(directory) == []
