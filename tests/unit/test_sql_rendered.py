"""The statements that matter most, as sent, are checked in (queuelog/sql/rendered/) and kept current."""

from __future__ import annotations

import pytest

from queuelog.sql import render

RENDERED = render.files()
REGENERATE = "the SQL sent changed: run `python -m queuelog.sql.render` and review the diff of queuelog/sql/rendered/"


@pytest.mark.parametrize("path", sorted(RENDERED), ids=lambda path: path.name)
def test_the_checked_in_rendering_is_the_sql_sent_today(path):
    assert path.exists(), REGENERATE
    assert path.read_text() == RENDERED[path], REGENERATE


def test_the_claim_is_rendered_in_each_shape_it_is_sent_in():
    for dialect, statement in (("postgresql", "CLAIM"), ("sqlite", "CLAIM_PICK")):
        claim = RENDERED[render.RENDERED / f"claim.{dialect}.sql"]
        assert f"-- {statement} without flow control" in claim and f"-- {statement} with flow control" in claim


def test_no_rendering_leaves_a_slot_unfilled():
    unfilled = [path.name for path, text in RENDERED.items() if "{" in text]
    assert unfilled == []
