"""Tests of the test helpers in tests/support (not of queuelog itself).

They run for both backends of scripts/test; each takes a second or two.
Nothing here is skipped: a missing PostgreSQL or Chromium is a failure with
a message saying what to install.
"""

from __future__ import annotations

import textwrap
import urllib.request

import psycopg
import pytest

from tests.support.browser import click_and_screenshot
from tests.support.pg_cluster import throwaway_cluster
from tests.support.server import _live_members, running_server


def _dsn(url: str) -> str:
    """psycopg wants a plain libpq URL, without SQLAlchemy's +driver part."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def test_throwaway_cluster_survives_stop_and_start():
    with throwaway_cluster() as cluster:
        root = cluster.root
        assert cluster.url == f"postgresql+psycopg://postgres@127.0.0.1:{cluster.port}/postgres"
        with psycopg.connect(_dsn(cluster.url), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (42)")
            settings = conn.execute(
                "SELECT current_setting('listen_addresses'), current_setting('max_connections')"
            ).fetchone()
        assert settings == ("127.0.0.1", "200")

        cluster.stop()
        assert not cluster.running
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(_dsn(cluster.url), connect_timeout=2)

        port = cluster.port
        cluster.start()
        assert cluster.port == port, "a restarted cluster must keep its URL"
        with psycopg.connect(_dsn(cluster.url)) as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (42,)
    assert not root.exists(), "the temporary directory must be deleted"


def test_throwaway_cluster_creates_databases():
    with throwaway_cluster() as cluster:
        url = cluster.create_database("queuelog_extra")
        assert url.endswith(f":{cluster.port}/queuelog_extra")
        with psycopg.connect(_dsn(url)) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("queuelog_extra",)


def test_running_server_kill_and_restart(tmp_path):
    # A stand-in app: the helper must not depend on queuelog being complete.
    (tmp_path / "standin.py").write_text(
        textwrap.dedent("""
        import os
        from flask import Flask
        app = Flask(__name__)

        @app.get("/openapi.json")
        def spec():
            return {"pid": os.getpid(), "greeting": os.environ["GREETING"]}
    """)
    )

    def fetch(url):
        with urllib.request.urlopen(url + "/openapi.json", timeout=5) as resp:
            return resp.status, resp.read().decode()

    with running_server({"GREETING": "hello"}, workers=2, app="standin:app", cwd=tmp_path) as server:
        status, body = fetch(server.url)
        assert status == 200 and '"greeting":"hello"' in body.replace(" ", "")
        first_pid = server.pid

        server.kill()
        assert server.process.poll() is not None
        with pytest.raises(OSError):
            fetch(server.url)

        server.restart()
        assert server.pid != first_pid
        assert fetch(server.url)[0] == 200
        pid = server.pid
    # Leaving the block stopped the master and its workers.
    assert _live_members(pid) == []


def test_chromium_clicks_and_takes_screenshot(tmp_path):
    from playwright.sync_api import sync_playwright

    screenshot = tmp_path / "check.png"
    with sync_playwright() as playwright:
        text = click_and_screenshot(playwright, screenshot)
    assert text == "clicked"
    assert screenshot.read_bytes().startswith(b"\x89PNG"), "screenshot is not a PNG"
    assert screenshot.stat().st_size > 1000
