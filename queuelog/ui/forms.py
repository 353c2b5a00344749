"""The pages' forms. Every POST form is a FlaskForm, so it carries and checks a CSRF token."""

from __future__ import annotations

import re
from typing import Any

from flask import current_app
from flask_wtf import FlaskForm
from wtforms import (
    BooleanField,
    Form,
    HiddenField,
    IntegerField,
    PasswordField,
    SelectField,
    SelectMultipleField,
    StringField,
    SubmitField,
    TextAreaField,
)
from wtforms.validators import AnyOf, InputRequired, Length, NumberRange, Optional, Regexp, ValidationError

from ..api.limits import MAX_FLOW_LIMIT, MAX_RATE_WINDOW_SECONDS
from ..core.error_groups import ERROR_GROUP_CHARS
from ..core.patterns import PRIORITY_LABELS
from ..core.payload_match import MAX_PATH_CHARS, PayloadMatch, parse_path, parse_value
from ..models import Role
from ..queue import push_targets
from ..queue.flow import UNIQUE_SCOPES, RateLimit
from ..queue.push_targets import PushTarget
from ..states import STATUS_NAMES

try:
    from wtforms import SelectChoice as _choice  # WTForms 3.3 deprecates (value, label) tuples
except ImportError:  # older WTForms: tuples are the way

    def _choice(value: str, label: str) -> tuple[str, str]:
        return value, label


STATUS_CHOICES = [_choice("", "any status")] + [_choice(name, name) for name in STATUS_NAMES]
PRIORITY_CHOICES = [_choice("", "any priority")] + [_choice(label, label) for label in PRIORITY_LABELS]


class LoginForm(FlaskForm):
    """Sign in with a username and password."""

    username = StringField(
        "Username",
        validators=[InputRequired(), Length(max=100)],
        render_kw={"autocomplete": "username", "autofocus": True},
    )
    password = PasswordField(
        "Password", validators=[InputRequired(), Length(max=1024)], render_kw={"autocomplete": "current-password"}
    )
    next = HiddenField()
    submit = SubmitField("Sign in")


class ActionForm(FlaskForm):
    """A button that changes something: only the CSRF token travels with it."""


class JobFilterForm(Form):
    """The jobs table's filters. Read from the query string (GET changes nothing, so no CSRF)."""

    status = SelectField("Status", choices=STATUS_CHOICES, default="")
    type = StringField("Type", validators=[Optional(), Length(max=100)], filters=[lambda v: v.strip() if v else v])
    priority = SelectField("Priority", choices=PRIORITY_CHOICES, default="")
    worker = StringField("Worker", validators=[Optional(), Length(max=100)], filters=[lambda v: v.strip() if v else v])
    key = StringField(
        "Concurrency key", validators=[Optional(), Length(max=200)], filters=[lambda v: v.strip() if v else v]
    )
    q = StringField(
        "Job id or idempotency key", validators=[Optional(), Length(max=200)], filters=[lambda v: v.strip() if v else v]
    )
    error = StringField(
        "Error contains", validators=[Optional(), Length(max=200)], filters=[lambda v: v.strip() if v else v]
    )
    path = StringField(
        "Payload path", validators=[Optional(), Length(max=MAX_PATH_CHARS)], filters=[lambda v: v.strip() if v else v]
    )
    value = StringField("Payload value", validators=[Optional(), Length(max=500)])
    # An error group of the Top errors page (its normalised error); set by that page's links.
    group = StringField("Error group", validators=[Optional(), Length(max=ERROR_GROUP_CHARS)])

    NAMES = ("status", "type", "priority", "worker", "key", "q", "error", "path", "value", "group")

    payload_match: PayloadMatch | None = None

    def validate(self, extra_validators=None) -> bool:
        """The fields, then the payload filter as a whole: a path that parses and a value to compare with."""
        valid = super().validate(extra_validators)
        path, value = self.path.data, self.value.data
        if not path and not value:
            return valid
        if not path:
            self.path.errors = [*self.path.errors, "give the path the value is compared at, e.g. customer_id"]
            return False
        if not value:
            self.value.errors = [*self.value.errors, 'give the value to compare with, e.g. 42, "abc" or null']
            return False
        for field, parse in ((self.path, parse_path), (self.value, parse_value)):
            try:
                parse(field.data)
            except ValueError as error:
                field.errors = [*field.errors, str(error)]
                return False
        self.payload_match = PayloadMatch.parse(path, value)
        return valid

    def query_args(self) -> dict[str, str]:
        """The filters that are set, as query-string arguments (to keep them across links and redirects)."""
        return {name: self[name].data for name in self.NAMES if self[name].data}


class BulkRetryForm(FlaskForm):
    """Retry the ticked jobs, or every failed job matching the filters sent along as hidden fields."""

    job_id = SelectMultipleField(coerce=int, validate_choice=False)
    scope = StringField(validators=[InputRequired(), AnyOf(["selected", "matching"])])


BULK_ACTIONS = [f"{action}-{scope}" for action in ("retry", "cancel", "delete") for scope in ("selected", "matching")]


class BulkActionForm(FlaskForm):
    """Retry, cancel or delete the ticked jobs or all matching the filters (sent along as hidden fields).

    Without ``confirmed`` the answer is a page that names the count and asks; its button sends the same
    fields with ``confirmed=yes``, and ``up_to``, the newest job id when it asked, so that jobs arriving
    after the question are not swept in.
    """

    job_id = SelectMultipleField(coerce=int, validate_choice=False)
    do = StringField(validators=[InputRequired(), AnyOf(BULK_ACTIONS)])
    up_to = IntegerField(validators=[Optional(), NumberRange(min=0, max=2**63 - 1)])
    confirmed = HiddenField()


class ConfirmForm(FlaskForm):
    """An action that asks first: ``confirmed=yes`` comes from the confirmation page (or the script's confirm())."""

    confirmed = HiddenField()


class KeyCreateForm(FlaskForm):
    """Issue an API key; its secret is shown once on the page that answers this form."""

    name = StringField(
        "Name",
        validators=[
            InputRequired(),
            Length(max=100),
            Regexp(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", message="use letters, digits, '.', '_' or '-'"),
        ],
    )
    role = SelectField("Role", choices=[_choice(r.value, r.value) for r in Role], default=Role.WORKER.value)
    max_priority = SelectField(
        "Highest priority it may set",
        default="",
        choices=[_choice("", "default (producer: medium)")] + [_choice(label, label) for label in PRIORITY_LABELS],
    )
    types = StringField("Job types (comma-separated, empty = any)", validators=[Optional(), Length(max=2000)])
    # Producer quotas; checked (with readable messages) by queuelog.auth.keys like the command line's options.
    enqueue_rate = StringField(
        "Enqueue rate, N/S: at most N jobs in any S seconds (producers; empty = no limit)",
        validators=[Optional(), Length(max=30)],
        render_kw={"placeholder": "e.g. 100/60"},
    )
    max_pending = StringField(
        "Most jobs pending at once, waiting ones included (producers; empty = no limit)",
        validators=[Optional(), Length(max=30)],
        render_kw={"placeholder": "e.g. 1000"},
    )
    submit = SubmitField("Create key")


class TypeLimitsForm(FlaskForm):
    """A type's three limits, sent together; an empty field means no limit (the form shows the current ones)."""

    concurrency_limit = StringField(
        "Concurrency: most jobs of the type running at once (empty = no limit)",
        validators=[Optional(), Length(max=30)],
        render_kw={"inputmode": "numeric", "placeholder": "e.g. 3"},
    )
    rate_jobs = StringField(
        "Rate: at most N claims (empty = no rate limit)",
        validators=[Optional(), Length(max=30)],
        render_kw={"inputmode": "numeric", "placeholder": "N, e.g. 20"},
    )
    rate_seconds = StringField(
        "… in any window of S seconds (1 to 86,400)",
        validators=[Optional(), Length(max=30)],
        render_kw={"inputmode": "numeric", "placeholder": "S, e.g. 2"},
    )
    key_concurrency_limit = StringField(
        "Per key: most running jobs per concurrency key (empty = no limit)",
        validators=[Optional(), Length(max=30)],
        render_kw={"inputmode": "numeric", "placeholder": "e.g. 1"},
    )
    submit = SubmitField("Save limits")

    def validate_concurrency_limit(self, field):
        _whole(field.data, MAX_FLOW_LIMIT, "must be a whole number of jobs from 1 to {high:,}, or empty for no limit")

    def validate_key_concurrency_limit(self, field):
        _whole(field.data, MAX_FLOW_LIMIT, "must be a whole number of jobs from 1 to {high:,}, or empty for no limit")

    def validate_rate_jobs(self, field):
        _whole(field.data, MAX_FLOW_LIMIT, "N must be a whole number of claims from 1 to {high:,}")

    def validate_rate_seconds(self, field):
        _whole(field.data, MAX_RATE_WINDOW_SECONDS, "S (seconds) must be a whole number from 1 to {high:,}")

    def validate(self, extra_validators=None) -> bool:
        """Each field alone, then the rate's two halves together: both or neither."""
        valid = super().validate(extra_validators)
        jobs, seconds = (self.rate_jobs.data or "").strip(), (self.rate_seconds.data or "").strip()
        if jobs and not seconds and not self.rate_jobs.errors:
            self.rate_seconds.errors = [*self.rate_seconds.errors, "give S too, or empty N for no rate limit"]
            valid = False
        if seconds and not jobs and not self.rate_seconds.errors:
            self.rate_jobs.errors = [*self.rate_jobs.errors, "give N too, or empty S for no rate limit"]
            valid = False
        return valid

    def wanted(self) -> dict[str, Any]:
        """The three limits as ``flow.update_type`` takes them (call after ``validate``)."""

        def number(field) -> int | None:
            text = (field.data or "").strip()
            return int(text) if text else None

        jobs, seconds = number(self.rate_jobs), number(self.rate_seconds)
        return {
            "concurrency_limit": number(self.concurrency_limit),
            "rate_limit": RateLimit(jobs, seconds) if jobs is not None else None,
            "key_concurrency_limit": number(self.key_concurrency_limit),
        }

    def show(self, settings) -> None:
        """Fill the fields with a type's current limits (what a GET of its page shows)."""
        rate = settings.rate_limit
        for field, value in (
            (self.concurrency_limit, settings.concurrency_limit),
            (self.rate_jobs, rate.jobs if rate else None),
            (self.rate_seconds, rate.per_seconds if rate else None),
            (self.key_concurrency_limit, settings.key_concurrency_limit),
        ):
            field.data = "" if value is None else str(value)


class UniqueScopeForm(FlaskForm):
    """Whose dedupe windows a type keeps (``unique_scope``): each producer key its own, or one for all."""

    unique_scope = SelectField(
        "Dedupe windows (unique_for)",
        choices=[
            _choice(UNIQUE_SCOPES[0], "producer: each key has its own (default)"),
            _choice(UNIQUE_SCOPES[1], "type: one window per key for every producer"),
        ],
    )
    submit = SubmitField("Save")


class PushTargetForm(FlaskForm):
    """A type's push target, set as a whole (``PATCH /types``'s ``push``): the URL, checked by the API's own
    ``url_problem``, the mode and the timeout (empty: the default)."""

    url = StringField(
        "URL the server POSTs each of the type's jobs to",
        validators=[InputRequired("give the target's http:// or https:// URL"), Length(max=push_targets.MAX_URL_CHARS)],
        filters=[lambda v: v.strip() if v else v],
        render_kw={"inputmode": "url", "placeholder": "e.g. https://hooks.example.com/queuelog"},
    )
    mode = SelectField(
        "Mode",
        default=push_targets.DEFAULT_MODE,
        choices=[
            _choice(push_targets.MODES[0], "sync: the target's 2xx answer completes the job"),
            _choice(push_targets.MODES[1], "async: a 2xx accepts it; the target completes or fails it later"),
        ],
    )
    timeout_seconds = StringField(
        f"Timeout: seconds a delivery waits for the answer ({push_targets.MIN_TIMEOUT_SECONDS} to "
        f"{push_targets.MAX_TIMEOUT_SECONDS}; empty = {push_targets.DEFAULT_TIMEOUT_SECONDS})",
        validators=[Optional(), Length(max=30)],
        render_kw={"inputmode": "numeric", "placeholder": str(push_targets.DEFAULT_TIMEOUT_SECONDS)},
    )
    submit = SubmitField("Save push target")

    def validate_url(self, field):
        problem = push_targets.url_problem(field.data, current_app.config["PUSH_ALLOW_PRIVATE"])
        if problem:
            raise ValidationError(problem)

    def validate_timeout_seconds(self, field):
        text = (field.data or "").strip()
        low, high = push_targets.MIN_TIMEOUT_SECONDS, push_targets.MAX_TIMEOUT_SECONDS
        if text and not (re.fullmatch(r"[0-9]+", text) and low <= int(text) <= high):
            raise ValidationError(f"must be a whole number of seconds from {low} to {high}, not {text!r}")

    def target(self) -> PushTarget:
        """The target as ``flow.update_type`` takes it (call after ``validate``)."""
        text = (self.timeout_seconds.data or "").strip()
        return PushTarget(self.url.data, self.mode.data, int(text) if text else push_targets.DEFAULT_TIMEOUT_SECONDS)

    def show(self, target: PushTarget | None) -> None:
        """Fill the fields with the type's current target (what a GET of its page shows)."""
        if target is not None:
            self.url.data, self.mode.data, self.timeout_seconds.data = (
                target.url,
                target.mode,
                str(target.timeout_seconds),
            )


def _whole(data: str | None, high: int, message: str) -> None:
    """Refuse anything in a limit field but a whole number from 1 to ``high`` (empty passes: no limit)."""
    text = (data or "").strip()
    if text and not (re.fullmatch(r"[0-9]+", text) and 1 <= int(text) <= high):
        raise ValidationError(message.format(high=high) + f", not {text!r}")


class ScheduleForm(FlaskForm):
    """Create or edit a schedule. The fields are checked by ``schedules.check_spec``, like the API's and the
    command line's, and its messages are shown beside the field they name."""

    name = StringField(
        "Name", validators=[InputRequired(), Length(max=100)], description="1-100 letters, digits, '_', '.', ':' or '-'"
    )
    cron = StringField(
        "Cron expression",
        validators=[Optional(), Length(max=200)],
        description="5 fields, 6 with the seconds first, or @hourly, @daily, …",
        render_kw={"placeholder": "e.g. 0 3 * * *"},
        filters=[lambda v: v.strip() if v else v],
    )
    every_seconds = IntegerField(
        "Or every N seconds",
        validators=[Optional(), NumberRange(1, 86_400)],
        description="Instead of a cron expression: 1-86400",
        render_kw={"inputmode": "numeric"},
    )
    timezone = StringField(
        "Timezone",
        default="UTC",
        validators=[InputRequired(), Length(max=64)],
        description="IANA name, e.g. Europe/Berlin; the cron expression is read in it",
    )
    job_type = SelectField("Job type", choices=[])
    payload = TextAreaField("Payload (JSON object)", default="{}", validators=[Length(max=65536)])
    priority = SelectField("Priority", choices=[_choice(label, label) for label in PRIORITY_LABELS], default="low")
    max_retries = IntegerField("Retries", default=3, validators=[InputRequired(), NumberRange(0, 100)])
    catch_up = SelectField(
        "After downtime",
        default="one",
        choices=[_choice("one", "one job for the latest missed tick"), _choice("none", "skip the missed ticks")],
    )
    paused = BooleanField("Paused")
    submit = SubmitField("Save schedule")

    def validate(self, extra_validators=None) -> bool:
        valid = super().validate(extra_validators)
        if bool(self.cron.data) == (self.every_seconds.data is not None) and not self.every_seconds.errors:
            self.cron.errors = [
                *self.cron.errors,
                "give either a cron expression or an interval, not both"
                if self.cron.data
                else "give a cron expression or an interval",
            ]
            valid = False
        return valid
