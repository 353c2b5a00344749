"""The push threads' database work, in the app's context and in the process's database turn.

A sync gunicorn worker has one database turn, which its requests and its ticker share (``database.turns``);
the push threads take it too, for each piece of database work and never across a delivery's HTTP request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import Flask

from ..database import turns

T = TypeVar("T")

#: How long one wait for the turn lasts before it is tried again (a request holds it for its whole length).
TURN_WAIT_SECONDS = 2.0


def with_turn(app: Flask, work: Callable[[], T]) -> T:
    """``work()`` in ``app``'s context, once this thread holds the database turn."""
    while True:
        with turns.turn(timeout=TURN_WAIT_SECONDS) as ours:
            if ours:
                with app.app_context():
                    return work()
