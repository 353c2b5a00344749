"""The jobs table searched by its last error and by a value in its payload, on both databases."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

import pytest

from tests.support.ui import flashes, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def listed(response) -> set[int]:
    """Job ids in the table."""
    assert response.status_code == 200, text_of(response)[:2000]
    body = text_of(response)
    table = body[body.index('<table class="data jobs">') : body.index("</table>")]
    return {int(n) for n in re.findall(r'<a class="job-link" href="/admin/jobs/(\d+)">', table)}


def search(client, **filters):
    return client.get("/admin/jobs?" + urlencode(filters))


# --- error text ------------------------------------------------------------------------------------


def test_error_contains_finds_the_jobs_whose_last_error_holds_the_text(signed_in, make_job):
    smtp = make_job(status="failed", error="SMTPRecipientsRefused: 550 mailbox unavailable")
    make_job(status="failed", error="Timeout after 30s")
    make_job(status="completed")
    assert listed(search(signed_in, error="mailbox")) == {smtp}


def test_error_contains_ignores_case_on_both_databases(signed_in, make_job):
    smtp = make_job(status="failed", error="SMTPRecipientsRefused: 550 Mailbox unavailable")
    assert listed(search(signed_in, error="MAILBOX")) == {smtp}


def test_error_contains_takes_percent_and_underscore_literally(signed_in, make_job):
    literal = make_job(status="failed", error="disk 100% full")
    make_job(status="failed", error="disk 1000 full")
    assert listed(search(signed_in, error="100%")) == {literal}
    assert listed(search(signed_in, error="_")) == set()


def test_error_contains_combines_with_the_other_filters(signed_in, make_job):
    email = make_job(status="failed", type="email", error="boom")
    make_job(status="failed", type="report", error="boom")
    make_job(status="pending", type="email", error="boom")
    assert listed(search(signed_in, error="boom", status="failed", type="email")) == {email}


# --- payload ---------------------------------------------------------------------------------------


@pytest.fixture
def payloads(make_job):
    """Jobs by name, each with a payload that tells one kind of JSON value from another."""
    return {
        "number": make_job(payload={"customer_id": 42}),
        "decimal": make_job(payload={"customer_id": 42.0}),
        "text": make_job(payload={"customer_id": "42"}),
        "other": make_job(payload={"customer_id": 43}),
        "nested": make_job(payload={"order": {"customer": {"id": "abc"}}}),
        "true": make_job(payload={"urgent": True}),
        "one": make_job(payload={"urgent": 1}),
        "null": make_job(payload={"urgent": None}),
        "no key": make_job(payload={}),
        "list": make_job(payload={"items": [{"sku": "A-1"}, {"sku": "B-2"}]}),
        "dash": make_job(payload={"tenant-id": "t1"}),
    }


@pytest.mark.parametrize(
    ("path", "value", "wanted"),
    [
        ("customer_id", "42", {"number", "decimal"}),
        ("customer_id", '"42"', {"text"}),
        ("order.customer.id", '"abc"', {"nested"}),
        ("$.order.customer.id", '"abc"', {"nested"}),
        ("order.customer.id", "abc", {"nested"}),  # not JSON: taken as the string
        ("urgent", "true", {"true"}),
        ("urgent", "1", {"one"}),
        ("urgent", "null", {"null"}),  # present and null; a missing key is not null
        ("urgent", "false", set()),
        ("items[1].sku", '"B-2"', {"list"}),
        ("items[0].sku", '"B-2"', set()),
        ("tenant-id", '"t1"', {"dash"}),
        ("customer_id.deeper", "42", set()),
    ],
)
def test_a_payload_filter_compares_json_values(signed_in, payloads, path, value, wanted):
    found = listed(search(signed_in, path=path, value=value))
    assert found == {payloads[name] for name in wanted}


def test_a_payload_filter_combines_with_error_and_status(signed_in, make_job):
    wanted = make_job(status="failed", error="card declined", payload={"customer_id": 7})
    make_job(status="failed", error="card declined", payload={"customer_id": 8})
    make_job(status="failed", error="timeout", payload={"customer_id": 7})
    make_job(status="pending", error="card declined", payload={"customer_id": 7})
    assert listed(search(signed_in, status="failed", error="declined", path="customer_id", value="7")) == {wanted}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"path": "order..id", "value": "1"}, "Payload path: '' is not a path step"),
        ({"path": "order[x]", "value": "1"}, "Payload path: 'order[x]' is not a path step"),
        ({"path": "a b", "value": "1"}, "Payload path: 'a b' is not a path step"),
        ({"path": "customer_id"}, "Payload value: give the value to compare with"),
        ({"value": "42"}, "Payload path: give the path the value is compared at"),
        ({"path": "customer_id", "value": '{"a": 1}'}, "Payload value: compare with one value"),
        ({"path": "customer_id", "value": "1" * 30}, "Payload value: that number is too large"),
        ({"path": "customer_id", "value": "1e999"}, "Payload value: a number must be finite"),
        ({"path": ".".join(["a"] * 20), "value": "1"}, "Payload path: a path goes at most 16 steps deep"),
        ({"path": "x" * 201, "value": "1"}, "Payload path: Field cannot be longer than 200 characters."),
    ],
)
def test_a_bad_payload_filter_is_a_readable_400(signed_in, query, message):
    response = search(signed_in, **query)
    assert response.status_code == 400
    assert message in html.unescape(text_of(response))


def test_the_search_fields_keep_what_was_typed(signed_in):
    body = text_of(search(signed_in, error="mailbox", path="order.customer.id", value='"abc"'))
    assert 'value="mailbox"' in body and 'value="order.customer.id"' in body
    assert re.search(r'name="value"[^>]*value="&#34;abc&#34;"', body)


def test_the_new_filters_survive_auto_refresh_and_paging(signed_in, make_job):
    ids = [make_job(status="failed", error="boom", payload={"n": 1}) for _ in range(3)]
    make_job(status="failed", error="other", payload={"n": 1})
    partial = signed_in.get(
        "/admin/jobs?" + urlencode({"error": "boom", "path": "n", "value": "1", "partial": "1", "limit": "2"})
    )
    assert partial.headers["X-Queuelog-Partial"] == "1"
    body = text_of(partial)
    assert set(int(n) for n in re.findall(r'href="/admin/jobs/(\d+)"', body)) == set(ids[1:])
    older = re.search(r'href="(/admin/jobs\?cursor=[^"]+)"', body).group(1)
    assert "error=boom" in older and "path=n" in older and "value=1" in older


def test_retry_all_matching_takes_only_the_jobs_of_the_error_and_payload_filters(signed_in, make_job, read_job):
    wanted = make_job(status="failed", error="card declined", payload={"customer_id": 7})
    other_customer = make_job(status="failed", error="card declined", payload={"customer_id": 8})
    other_error = make_job(status="failed", error="timeout", payload={"customer_id": 7})
    filters = {"error": "declined", "path": "customer_id", "value": "7"}
    page = "/admin/jobs?" + urlencode(filters)
    assert re.search(r"Retry all 1\s+failed job matching this filter", text_of(signed_in.get(page)))
    post_form(signed_in, "/admin/jobs/retry", {"scope": "matching", **filters}, page=page)
    assert [read_job(j).status for j in (wanted, other_customer, other_error)] == ["pending", "failed", "failed"]
    assert flashes(signed_in.get("/admin/jobs")) == ["Retried 1 matching job."]
