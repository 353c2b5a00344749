"""``queuelog-worker module:worker [--url URL] [--concurrency N]``: run a Worker's handlers.

The API key comes from QUEUELOG_API_KEY only: on a command line it would show in ``ps`` and in
shell history. The URL comes from ``--url`` or QUEUELOG_URL.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from .runner import DEFAULT_WAIT, MAX_CLAIM, PREFETCH_SECONDS, Worker

KEY_OPTIONS = ("--key", "--api-key", "--token", "--secret")
KEY_PREFIX = "ql_"


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, import the worker, run it; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    for arg in argv:
        if arg.split("=", 1)[0] in KEY_OPTIONS or arg.startswith(KEY_PREFIX):
            parser.error(
                "pass the API key in the QUEUELOG_API_KEY environment variable, never on the "
                "command line (it would show in ps and in shell history)"
            )
    args = parser.parse_args(argv)
    api_key = os.environ.get("QUEUELOG_API_KEY", "").strip()
    if not api_key:
        parser.error("set QUEUELOG_API_KEY to a worker key (flask --app app keys create NAME --role worker)")
    url = args.url or os.environ.get("QUEUELOG_URL", "").strip()
    if not url:
        parser.error("give the server's address with --url or QUEUELOG_URL, e.g. http://127.0.0.1:8000")
    worker = _load(parser, args.target)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s",
    )
    try:
        return worker.run(
            url=url,
            api_key=api_key,
            concurrency=args.concurrency,
            wait=args.wait,
            lease_seconds=args.lease_seconds,
            summary_interval=args.summary_interval,
            prefetch=args.prefetch,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuelog-worker",
        allow_abbrev=False,
        description="Claim and run queuelog jobs with the handlers of a queuelog.worker.Worker. "
        "The API key is read from QUEUELOG_API_KEY.",
    )
    parser.add_argument("target", help="where your Worker is, as module:attribute (e.g. myapp.jobs:worker)")
    parser.add_argument("--url", help="the queuelog server (default: $QUEUELOG_URL)")
    parser.add_argument(
        "--concurrency",
        "-c",
        type=_bounded(int, 1, 1000),
        default=1,
        help="jobs run at once, each on its own thread (default 1)",
    )
    parser.add_argument(
        "--prefetch",
        type=_bounded(int, 0, MAX_CLAIM),
        default=None,
        help="the most jobs claimed beyond the free slots, taken only while recent jobs were short "
        f"enough to start within {PREFETCH_SECONDS:g} s of their claim (default: what one claim "
        f"of {MAX_CLAIM} carries beside the slots; 0: claim only for free slots)",
    )
    parser.add_argument(
        "--wait",
        type=_bounded(float, 0, 30),
        default=DEFAULT_WAIT,
        help=f"seconds an idle claim waits on the server for a job (0-30, default {DEFAULT_WAIT:g})",
    )
    parser.add_argument(
        "--lease-seconds",
        type=_bounded(int, 1, 86400),
        default=None,
        help="lease to ask for on each job (default: the server's)",
    )
    parser.add_argument(
        "--summary-interval",
        type=_bounded(float, 1, 86400),
        default=60.0,
        help="seconds between summary log lines (default 60)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper)
    return parser


def _bounded(kind, low, high):
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}")
        return value

    return convert


def _load(parser: argparse.ArgumentParser, target: str) -> Worker:
    """Import ``module:attribute`` (attribute defaults to ``worker``) from the current directory too."""
    module_name, _, attribute = target.partition(":")
    # A console script's sys.path does not include the current directory, where the app usually is.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        parser.error(f"cannot import {module_name!r}: {exc}")
    worker = getattr(module, attribute or "worker", None)
    if not isinstance(worker, Worker):
        parser.error(f"{target!r} is not a queuelog.worker.Worker (got {type(worker).__name__})")
    return worker
