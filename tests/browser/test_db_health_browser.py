"""The dashboard's warning of a transaction holding back vacuum, in a real browser on a real server (PostgreSQL):
readable without JavaScript, and axe-core finds nothing on the page that shows it, in light and dark."""

from __future__ import annotations

import pytest

from queuelog.auth.users import create_user
from tests.support.axe import AXE_SCRIPT, assert_no_violations
from tests.support.database import test_db_kind
from tests.support.held_snapshot import HOLDER
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD, BROWSER_SERVER_ARGS, server_env, sign_in
from tests.support.server import running_server

pytestmark = pytest.mark.skipif(test_db_kind() != "postgresql", reason="PostgreSQL's catalog only")

NOTICE = '[data-notice="long-transaction"]'


@pytest.fixture
def warning_server(app, database_url, hold_snapshot):
    """(gunicorn warning past 1 second, with an admin; the snapshot it warns of, held for more than that)."""
    create_user(ADMIN_NAME, ADMIN_PASSWORD)
    held = hold_snapshot()
    env = {**server_env(database_url), "QUEUELOG_DB_XACT_WARN_SECONDS": "1"}
    with running_server(env, workers=1, extra_args=BROWSER_SERVER_ARGS) as server:
        held.wait_until_held_for(1.5)
        yield server, held


def test_the_long_transaction_warning_reads_without_javascript(warning_server, browser):
    server, held = warning_server
    context = browser.new_context(java_script_enabled=False, viewport={"width": 390, "height": 844})
    try:
        tab = context.new_page()
        sign_in(tab, server)
        text = " ".join(tab.locator(NOTICE).inner_text().split())
        assert text.startswith("A database transaction has been open for ")
        assert f"the session {HOLDER} from " in text and f"(server process {held.pid})" in text
        assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_nothing_on_the_dashboard_showing_the_warning(warning_server, browser, scheme):
    server, _held = warning_server
    context = browser.new_context(viewport={"width": 1366, "height": 900}, color_scheme=scheme)
    try:
        tab = context.new_page()
        tab.add_init_script(path=str(AXE_SCRIPT))
        sign_in(tab, server)
        assert tab.locator(NOTICE).is_visible()
        assert_no_violations(tab, f"the dashboard warning of a long transaction, {scheme}")
    finally:
        context.close()
