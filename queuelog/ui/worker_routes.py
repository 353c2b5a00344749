"""The Workers page's processes: each registered worker process, and an admin's Quiet and Stop.

Both actions go through ``worker_processes.give_command``, the function the API's quiet and stop call;
the process hears it with its next beat. Each asks first: the script's confirm(), or, with JavaScript off,
a page of the server's naming the process.
"""

from __future__ import annotations

from flask import flash, redirect, render_template, url_for

from ..core.errors import QueueError
from ..queue import worker_processes as processes
from . import bp
from .auth import actor_name
from .forms import ConfirmForm

#: What each command does, as the confirmation and the flash say it.
EFFECT = {
    processes.Command.QUIET: "it will claim no new jobs and finish the ones it holds; it keeps running",
    processes.Command.STOP: "it will claim no new jobs, finish the ones it holds, and exit",
}


def _name(state: processes.ProcessState) -> str:
    return f"{state.host}:{state.pid}"


def _command(process_id: int, command: processes.Command):
    """Ask first (no confirmed=yes), then give the command; a gone or unknown process says so."""
    form = ConfirmForm()
    if not form.validate_on_submit():
        return redirect(url_for("ui.workers"))
    try:
        state = next(s for s in processes.list_for(None) if s.id == process_id)
    except StopIteration:
        flash(f"There is no worker process {process_id} (it may have exited); nothing was changed.", "error")
        return redirect(url_for("ui.workers"))
    verb = command.value.capitalize()
    if form.confirmed.data != "yes":
        return render_template(
            "confirm.html",
            question=f"{verb} worker process {_name(state)}?",
            fields=[],
            button=f"{verb} {_name(state)}",
            button_class="button-danger",
            action=url_for(f"ui.{command.value}_worker_process", process_id=process_id),
            back=url_for("ui.workers"),
            lines=[
                f"Within a few seconds {EFFECT[command]}. This cannot be undone from here: "
                "restart the process to have it claim again."
            ],
        )
    try:
        processes.give_command(process_id, command, actor_name())
    except QueueError as error:
        flash(f"Nothing was changed: {error.detail}.", "error")
        return redirect(url_for("ui.workers"))
    flash(f"Told worker process {_name(state)} to {command.value}: {EFFECT[command]}.", "success")
    return redirect(url_for("ui.workers"))


@bp.post("/admin/workers/<int:process_id>/quiet")
def quiet_worker_process(process_id: int):
    """Tell a process to claim nothing more and finish what it holds."""
    return _command(process_id, processes.Command.QUIET)


@bp.post("/admin/workers/<int:process_id>/stop")
def stop_worker_process(process_id: int):
    """Tell a process to finish what it holds and exit."""
    return _command(process_id, processes.Command.STOP)
