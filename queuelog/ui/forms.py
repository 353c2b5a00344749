"""The pages' forms. Every POST form is a FlaskForm, so it carries and checks a CSRF token."""
from __future__ import annotations

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
from wtforms.validators import AnyOf, InputRequired, Length, NumberRange, Optional, Regexp

from ..models import Role
from ..patterns import PRIORITY_LABELS
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

    username = StringField("Username", validators=[InputRequired(), Length(max=100)],
                           render_kw={"autocomplete": "username", "autofocus": True})
    password = PasswordField("Password", validators=[InputRequired(), Length(max=1024)],
                             render_kw={"autocomplete": "current-password"})
    next = HiddenField()
    submit = SubmitField("Sign in")


class ActionForm(FlaskForm):
    """A button that changes something: only the CSRF token travels with it."""


class JobFilterForm(Form):
    """The jobs table's filters. Read from the query string (GET changes nothing, so no CSRF)."""

    status = SelectField("Status", choices=STATUS_CHOICES, default="")
    type = StringField("Type", validators=[Optional(), Length(max=100)], filters=[lambda v: v.strip() if v else v])
    priority = SelectField("Priority", choices=PRIORITY_CHOICES, default="")
    worker = StringField("Worker", validators=[Optional(), Length(max=100)],
                         filters=[lambda v: v.strip() if v else v])
    q = StringField("Job id or idempotency key", validators=[Optional(), Length(max=200)],
                    filters=[lambda v: v.strip() if v else v])

    def query_args(self) -> dict[str, str]:
        """The filters that are set, as query-string arguments (to keep them across links and redirects)."""
        return {name: self[name].data for name in ("status", "type", "priority", "worker", "q") if self[name].data}


class BulkRetryForm(FlaskForm):
    """Retry the ticked jobs, or every failed job matching the filters sent along as hidden fields."""

    job_id = SelectMultipleField(coerce=int, validate_choice=False)
    scope = StringField(validators=[InputRequired(), AnyOf(["selected", "matching"])])


class KeyCreateForm(FlaskForm):
    """Issue an API key; its secret is shown once on the page that answers this form."""

    name = StringField("Name", validators=[
        InputRequired(), Length(max=100),
        Regexp(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", message="use letters, digits, '.', '_' or '-'")])
    role = SelectField("Role", choices=[_choice(r.value, r.value) for r in Role], default=Role.WORKER.value)
    max_priority = SelectField("Highest priority it may set", default="", choices=[
        _choice("", "default (producer: medium)")] + [_choice(label, label) for label in PRIORITY_LABELS])
    types = StringField("Job types (comma-separated, empty = any)", validators=[Optional(), Length(max=2000)])
    # Producer quotas; checked (with readable messages) by queuelog.keys like the command line's options.
    enqueue_rate = StringField("Enqueue rate, N/S: at most N jobs in any S seconds (producers; empty = no limit)",
                               validators=[Optional(), Length(max=30)], render_kw={"placeholder": "e.g. 100/60"})
    max_pending = StringField("Most jobs pending at once (producers; empty = no limit)",
                              validators=[Optional(), Length(max=30)], render_kw={"placeholder": "e.g. 1000"})
    submit = SubmitField("Create key")


class ScheduleForm(FlaskForm):
    """Create or edit a schedule. The fields are checked by ``schedules.check_spec``, like the API's and the
    command line's, and its messages are shown beside the field they name."""

    name = StringField("Name", validators=[InputRequired(), Length(max=100)],
                       description="1-100 letters, digits, '_', '.', ':' or '-'")
    cron = StringField("Cron expression", validators=[Optional(), Length(max=200)],
                       description="5 fields, 6 with the seconds first, or @hourly, @daily, …",
                       render_kw={"placeholder": "e.g. 0 3 * * *"}, filters=[lambda v: v.strip() if v else v])
    every_seconds = IntegerField("Or every N seconds", validators=[Optional(), NumberRange(1, 86_400)],
                                 description="Instead of a cron expression: 1-86400",
                                 render_kw={"inputmode": "numeric"})
    timezone = StringField("Timezone", default="UTC", validators=[InputRequired(), Length(max=64)],
                           description="IANA name, e.g. Europe/Berlin; the cron expression is read in it")
    job_type = SelectField("Job type", choices=[])
    payload = TextAreaField("Payload (JSON object)", default="{}", validators=[Length(max=65536)])
    priority = SelectField("Priority", choices=[_choice(label, label) for label in PRIORITY_LABELS], default="low")
    max_retries = IntegerField("Retries", default=3, validators=[InputRequired(), NumberRange(0, 100)])
    catch_up = SelectField("After downtime", default="one", choices=[
        _choice("one", "one job for the latest missed tick"), _choice("none", "skip the missed ticks")])
    paused = BooleanField("Paused")
    submit = SubmitField("Save schedule")

    def validate(self, extra_validators=None) -> bool:
        valid = super().validate(extra_validators)
        if bool(self.cron.data) == (self.every_seconds.data is not None) and not self.every_seconds.errors:
            self.cron.errors = [*self.cron.errors, "give either a cron expression or an interval, not both"
                                if self.cron.data else "give a cron expression or an interval"]
            valid = False
        return valid
