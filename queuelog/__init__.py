"""queuelog: a persistent background job queue served by Flask."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Flask is imported by create_app: the worker (queuelog.worker) runs without it
    from flask import Flask

ROOT = Path(__file__).resolve().parent.parent


def create_app(config: dict | None = None) -> Flask:
    """Build the app: config, extensions, blueprints, error handlers, CLI; then make the schema current."""
    from flask import Flask

    app = Flask(
        __name__,
        instance_path=str(ROOT / "instance"),
        instance_relative_config=True,
        template_folder=str(ROOT / "templates"),
        static_folder=str(ROOT / "static"),
    )
    from .config import load_config

    load_config(app, config)
    _trust_proxies(app)

    from .auth.session import SessionOnlyWhenSent

    app.session_interface = SessionOnlyWhenSent()
    # Answers keep their fields in the order the code writes them (a job reads id, type, status, …);
    # sorting the keys of every object was a large share of encoding a batch of jobs.
    app.json.sort_keys = False
    from .ui.compiled_templates import PROCESS_CACHE

    app.jinja_env.bytecode_cache = PROCESS_CACHE

    from . import ops

    # First, so its request hooks run before (and its response hooks after) everyone else's.
    ops.init_app(app)
    from .database import turns

    turns.init_app(app)  # before any hook that may touch the database

    from .database.engine import configure_engine
    from .database.schema_upgrade import MIGRATIONS_DIR, ensure_schema
    from .extensions import csrf, db, login_manager, migrate

    db.init_app(app)
    migrate.init_app(app, db, directory=MIGRATIONS_DIR)
    csrf.init_app(app)
    login_manager.init_app(app)

    from . import api, ui
    from .cli import register_commands
    from .http_errors import register_error_handlers

    # The API authenticates every request with a bearer key, so cookies never authorise it: no CSRF.
    csrf.exempt(api.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(ui.bp)
    register_error_handlers(app)
    register_commands(app)

    from .waiting import wakeup

    with app.app_context():
        configure_engine(app)
        wakeup.watch_checkins(db.engine)
        if app.config["AUTO_MIGRATE"]:
            ensure_schema(app)
    from .core import telemetry
    from .push import dispatcher
    from .schedules import ticker

    if ticker.serving_under_flask_run():
        ticker.start(app)
        dispatcher.start(app)
        telemetry.enabled()  # opentelemetry (the otel extra) imported now, not in the first enqueue's answer
    return app


def _trust_proxies(app: Flask) -> None:
    """Behind N reverse proxies, take the client address and scheme from their X-Forwarded-* headers,
    so login throttling counts real addresses rather than the proxy's. Off by default: trusting those
    headers without a proxy would let a client pick its own address."""
    hops = app.config["TRUSTED_PROXIES"]
    if hops > 0:
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)
