"""The keys page issues producer keys with quotas and lists them; bad values are readable messages."""

from __future__ import annotations

import html
import re

import pytest

from tests.support.api import bearer
from tests.support.ui import field_errors, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def create(client, **fields):
    data = {
        "name": "billing",
        "role": "producer",
        "max_priority": "",
        "types": "",
        "enqueue_rate": "",
        "max_pending": "",
    }
    data.update(fields)
    return post_form(client, "/admin/keys", data, page="/admin/keys")


def quotas_cell(body: str, name: str) -> str:
    row = re.search(rf'<tr class="[^"]*" data-key="{re.escape(name)}">(.*?)</tr>', body, re.S)
    assert row, f"no row for key {name}"
    cell = re.search(r"<td data-quotas>(.*?)</td>", row.group(1), re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", cell.group(1))).strip()


def test_the_create_form_has_both_quota_fields(signed_in):
    body = text_of(signed_in.get("/admin/keys"))
    assert 'name="enqueue_rate"' in body and 'name="max_pending"' in body
    assert "at most N jobs in any S seconds" in body


def test_a_producer_key_created_with_quotas_is_listed_with_them_and_held_to_them(signed_in, client):
    response = create(signed_in, enqueue_rate="5/2", max_pending="10")
    assert response.status_code == 200
    secret = re.search(r'<pre class="secret" data-secret>(ql_[^<]+)</pre>', text_of(response)).group(1)
    assert quotas_cell(text_of(signed_in.get("/admin/keys")), "billing") == "5 jobs per 2 s, 10 pending"
    statuses = [client.post("/jobs", json={"type": "email"}, headers=bearer(secret)).status_code for _ in range(6)]
    assert statuses == [201] * 5 + [429]


def test_empty_quota_fields_mean_no_limit(signed_in):
    assert create(signed_in).status_code == 200
    assert quotas_cell(text_of(signed_in.get("/admin/keys")), "billing") == "none"


def test_a_worker_key_shows_no_quota_cell_text(signed_in, make_key):
    make_key("worker", "mailer")
    assert quotas_cell(text_of(signed_in.get("/admin/keys")), "mailer") == ""


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"enqueue_rate": "fast"}, "write it as N/S (at most N jobs in any S seconds), e.g. 100/60, not 'fast'"),
        ({"enqueue_rate": "5/0"}, "S (seconds) must be 1 to 86,400, not 0"),
        ({"max_pending": "0"}, "must be a whole number of jobs from 1 to 1,000,000,000, not '0'"),
        ({"role": "worker", "max_pending": "10"}, "only producer keys take quotas, not worker keys"),
        ({"enqueue_rate": "1" * 31}, "Field cannot be longer than 30 characters."),
    ],
)
def test_a_bad_quota_is_a_readable_400_on_its_field_and_creates_nothing(signed_in, fields, message):
    response = create(signed_in, **fields)
    assert response.status_code == 400
    body = text_of(response)
    assert message in field_errors(body)
    assert "data-secret" not in body and 'data-key="billing"' not in body
    assert 'aria-invalid="true"' in body


def test_the_message_sits_on_the_field_it_is_about(signed_in):
    body = text_of(create(signed_in, enqueue_rate="5/2", max_pending="lots"))
    label = re.search(r"<label>Most jobs pending at once.*?</label>", body, re.S).group(0)
    assert 'name="max_pending"' in label and 'aria-invalid="true"' in label
    assert "not &#39;lots&#39;" in label
    rate_label = re.search(r"<label>Enqueue rate.*?</label>", body, re.S).group(0)
    assert "field-error" not in rate_label and 'value="5/2"' in rate_label  # what was typed stays
