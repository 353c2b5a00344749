"""The pages' forms. Every POST form is a FlaskForm, so it carries and checks a CSRF token."""
from __future__ import annotations

from flask_wtf import FlaskForm
from wtforms import (
    Form,
    HiddenField,
    IntegerField,
    PasswordField,
    SelectField,
    SelectMultipleField,
    StringField,
    SubmitField,
)
from wtforms.validators import AnyOf, InputRequired, Length, NumberRange, Optional, Regexp

from ..error_groups import ERROR_GROUP_CHARS
from ..models import Role
from ..patterns import PRIORITY_LABELS
from ..payload_match import MAX_PATH_CHARS, PayloadMatch, parse_path, parse_value
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
    error = StringField("Error contains", validators=[Optional(), Length(max=200)],
                        filters=[lambda v: v.strip() if v else v])
    path = StringField("Payload path", validators=[Optional(), Length(max=MAX_PATH_CHARS)],
                       filters=[lambda v: v.strip() if v else v])
    value = StringField("Payload value", validators=[Optional(), Length(max=500)])
    # An error group of the Top errors page (its normalised error); set by that page's links.
    group = StringField("Error group", validators=[Optional(), Length(max=ERROR_GROUP_CHARS)])

    NAMES = ("status", "type", "priority", "worker", "q", "error", "path", "value", "group")

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
            self.value.errors = [*self.value.errors, "give the value to compare with, e.g. 42, \"abc\" or null"]
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
