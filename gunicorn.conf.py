"""gunicorn settings for queuelog. gunicorn reads ./gunicorn.conf.py by itself when started from the repo root
(``gunicorn -w 4 -b 0.0.0.0:8000 app:app``); elsewhere pass ``-c /path/to/gunicorn.conf.py``.

It prepares Prometheus metrics for several worker processes. Each worker counts its own requests and state
changes; prometheus-client's multiprocess mode keeps those counts in files in ``PROMETHEUS_MULTIPROC_DIR`` so
that ``/metrics``, answered by any one worker, adds them all up. That directory has to be known before any
process imports prometheus_client, and has to start empty (counts left by an earlier server would be added
in). The master reads this file before it loads the app or starts a worker, so here it:

- takes ``PROMETHEUS_MULTIPROC_DIR`` when it is set (and deletes prometheus-client's stale files in it), or else
  creates a fresh temporary directory, removed again when the server exits (or, after a crash, by the next
  server started from this file);
- tells prometheus-client when a worker exits (``child_exit``), the library's documented bookkeeping.
Counts of a worker that died stay in the sum, as they should: its requests happened.

The app is built once, in the master (``preload_app``), and every worker process starts as a fork of it.
A worker then comes up without importing and building the app again, a server checks and upgrades the
schema once rather than in all its workers at the same moment, and the workers share the master's memory.
The master serves nothing: before each fork (``pre_fork``) it closes the database connections that building
the app opened, so no connection is ever shared by two processes, and the threads a worker runs start in the
worker, below. gunicorn's SIGHUP then restarts the workers on the code the master loaded: a new release
needs a new master (a restart), not a SIGHUP.

Every worker also hands itself to ``queuelog.serving.adopt_worker`` once it is ready (``post_worker_init``):
long-polls learn how many threads it serves requests with, and cap how many of them may wait for a job; a
threaded worker gives a thread a request only once the request's head has arrived (slow clients).
"""

import glob
import os
import re
import shutil
import tempfile

# Set by this file in the master's environment (inherited by workers); not QUEUELOG_* so they stay out of
# the app's config.
_PREPARED_BY = "GUNICORN_QUEUELOG_METRICS_MASTER"
_CREATED_DIR = "GUNICORN_QUEUELOG_METRICS_TMPDIR"
_TMP_PREFIX = "queuelog-metrics-"
# prometheus-client's own files, <type>_<pid>.db; queuelog/ops/metrics.py reads only these names too.
_METRICS_FILE = re.compile(r"(counter|histogram|summary|gauge_[a-z]+)_\d+\.db")


def _prepare_metrics_dir() -> None:
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path and os.environ.get(_PREPARED_BY) == str(os.getpid()):
        return  # the same master re-reading its config on SIGHUP: keep the counts
    if path:
        os.makedirs(path, exist_ok=True)
        # Only prometheus-client's own files, in case the variable points somewhere unexpected (instance/
        # holds queuelog.db).
        for name in os.listdir(path):
            if _METRICS_FILE.fullmatch(name):
                os.remove(os.path.join(path, name))
    else:
        _remove_abandoned_dirs()
        # The master's pid in the name tells a later server whether this directory is still in use.
        path = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-")
        os.environ[_CREATED_DIR] = path
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    os.environ[_PREPARED_BY] = str(os.getpid())


def _remove_abandoned_dirs() -> None:
    """Servers killed outright (SIGKILL, power cut) never ran on_exit: remove the directories they left."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), _TMP_PREFIX + "*-*")):
        pid = os.path.basename(path)[len(_TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


_prepare_metrics_dir()

preload_app = True


def pre_fork(server, worker):
    """The master is about to fork a worker: leave it no database connection of the master's."""
    if server.cfg.preload_app:  # otherwise the master never built the app, and must not build it here
        from queuelog import serving

        serving.prepare_fork(server.app.wsgi())


def child_exit(server, worker):
    """A worker exited: let prometheus-client drop its live-gauge files."""
    # Imported here, never at the top: prometheus_client must first be imported after the directory is set.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker):
    """A worker process is ready to serve: size its cap on waiting claims, keep slow clients off its threads."""
    from queuelog import serving

    serving.adopt_worker(worker)


def on_exit(server):
    """The server stops: remove the metrics directory if this file created it."""
    created = os.environ.get(_CREATED_DIR)
    if created and created == os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        shutil.rmtree(created, ignore_errors=True)
