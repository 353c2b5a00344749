"""A browser's spare connections never hold a page up.

Chromium opens connections ahead of need and may never send a request on them. A server thread that
waited on such a connection would leave the page's own requests queued behind it until the server's
timeout (30 s): the page would hang for an operator, and a browser test would time out now and then.
"""

from __future__ import annotations

import contextlib
import socket
import time

import pytest

from tests.support.live_site import sign_in

# how the server reads connections does not depend on the database: scripts/test runs this in the SQLite pass only
pytestmark = pytest.mark.database_independent

#: Far below the 30 s a server thread stuck on a silent connection would take to be freed.
PROMPT_S = 5.0


@contextlib.contextmanager
def silent_connections(server, count: int):
    """``count`` connections to ``server`` that send nothing, as a browser's spare ones do."""
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            stack.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        yield


def test_a_page_loads_promptly_while_silent_connections_are_open(page, live_server):
    sign_in(page, live_server)
    with silent_connections(live_server, count=8):  # more than the server has threads
        started = time.monotonic()
        page.goto(live_server.url + "/admin/jobs")
        took = time.monotonic() - started
    assert page.locator("h1").first.inner_text() == "Jobs"
    assert took < PROMPT_S, f"the page took {took:.1f} s to load"
