"""The admin web pages under /admin."""
from flask import Blueprint, redirect, url_for

bp = Blueprint("ui", __name__)


@bp.get("/")
def root():
    """Send people to the admin pages."""
    return redirect(url_for("ui.dashboard"))


@bp.get("/admin/")
def dashboard():
    return "queuelog admin"
