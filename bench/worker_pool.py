"""Worker processes started as users start them, one command line per process.

A pool is one system's workers at one level: N ``rq worker`` processes, or one ``queuelog-worker
--concurrency N``, or one ``huey_consumer -w N``. It is started on an empty queue and is ready once
every process has logged the line that says it is listening.

A drain round pauses the pool (SIGSTOP), enqueues its jobs and resumes the pool (SIGCONT). So the
jobs are all waiting before any worker runs one, as when workers start on a full queue, but starting
Python and importing the libraries (the same in every round, and seconds of CPU for 16 processes on
2 cores) is never part of a round.

Every process is remembered by PID and signalled by that PID only; nothing is killed by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from bench.servers import REPO_ROOT

STOP_WAIT_S = 15.0
READY_TIMEOUT_S = 120.0  # 16 processes importing RQ on 2 busy cores take a while


class PoolFailed(RuntimeError):
    """A worker process exited or never said it was listening."""


class WorkerPool:
    """The processes of one system at one level."""

    def __init__(
        self,
        name: str,
        argvs: list[list[str]],
        env: dict[str, str],
        log_dir: Path,
        ready_marker: str,
        stop_signal: int = signal.SIGTERM,
    ):
        self.name = name
        self.argvs = argvs
        # The repository root first on PYTHONPATH: the task modules (bench.tasks) and this checkout's
        # queuelog are imported from here, as a user's worker imports their own project.
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.env = {**os.environ, **env, "PYTHONPATH": path}
        self.log_paths = [log_dir / f"{name}-{i}.log" for i in range(len(argvs))]
        self.ready_marker = ready_marker
        self.stop_signal = stop_signal
        self.procs: list[subprocess.Popen] = []
        self.log_starts: list[int] = []  # where each process's output begins in its log (restarts append)

    def launch(self) -> None:
        """Start every process; see ``wait_ready``."""
        self.log_starts = []
        for argv, log_path in zip(self.argvs, self.log_paths, strict=True):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab") as log:  # closed here: the child holds its own descriptor
                self.log_starts.append(log.tell())
                self.procs.append(
                    subprocess.Popen(argv, cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
                )

    def wait_ready(self, timeout: float) -> None:
        """Wait until every process has logged ``ready_marker``."""
        deadline = time.monotonic() + timeout
        waiting = list(range(len(self.procs)))
        while waiting:
            self.check_alive()
            waiting = [i for i in waiting if self.ready_marker not in self.log(i)]
            if waiting and time.monotonic() > deadline:
                raise PoolFailed(
                    f"{self.name}: {len(waiting)} process(es) not listening after {timeout:.0f}s; "
                    f"log: {self.log(waiting[0])[-800:]}"
                )
            time.sleep(0.05)

    def restart(self, timeout: float) -> None:
        """Stop every process and start the pool again, ready."""
        self.stop()
        self.launch()
        self.wait_ready(timeout)

    def log(self, i: int) -> str:
        """What process ``i`` has written since it was launched."""
        try:
            with open(self.log_paths[i], "rb") as log:
                log.seek(self.log_starts[i])
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def check_alive(self) -> None:
        """Raise when any process of the pool has exited."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise PoolFailed(
                    f"{self.name}: process {proc.pid} exited with {proc.returncode}; log: {self.log(i)[-800:]}"
                )

    def pause(self) -> None:
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, sig: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)

    def stop(self) -> None:
        """Ask every process to stop (resuming it first), then SIGKILL what is left."""
        self.resume()  # a stopped process would hold the stop signal until resumed
        self._signal_all(self.stop_signal)
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.procs = []
