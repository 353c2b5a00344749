"""The Top errors page: failed jobs grouped by cause, each group one click from its jobs, its retry and cancel."""

from __future__ import annotations

from ..core.clock import utcnow
from . import bp
from .helpers import render_live
from .top_errors import TOP_GROUPS, top_errors


@bp.get("/admin/errors")
def top_errors_page():
    """The causes with the most failed jobs: count, first and last seen, types; retry or cancel a whole group."""
    return render_live("errors.html", "_errors_live.html", groups=top_errors(), top=TOP_GROUPS, now=utcnow())
