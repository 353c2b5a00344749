"""The unique scope of a type on the admin side: the Types pages show it and change it through the function
PATCH /types calls (so the history records it), and ``flask types`` shows and sets it."""

from __future__ import annotations

import pytest

from tests.support.ui import ADMIN_NAME, api_type, cells, field_errors, flashes, history_rows, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def set_scope(client, scope: str, job_type: str = "email"):
    return post_form(
        client, f"/admin/types/{job_type}/unique-scope", {"unique_scope": scope}, page=f"/admin/types/{job_type}"
    )


# --- the pages ----------------------------------------------------------------------------------


def test_the_types_list_shows_each_types_dedupe_windows(signed_in, client, admin):
    client.patch("/types/report", json={"unique_scope": "type"}, headers=admin)
    body = text_of(signed_in.get("/admin/types"))

    assert cells(body, "email")["unique_scope"] == "per producer"
    assert cells(body, "report")["unique_scope"] == "shared by every producer"


def test_the_type_page_says_what_a_shared_window_reveals(signed_in):
    body = text_of(signed_in.get("/admin/types/email"))

    assert 'data-field="unique_scope">producer (per producer)' in body
    assert "learns that a job with that key exists in the window, and nothing else of it" in body


def test_the_scope_form_shares_the_windows_as_the_api_shows_it_and_says_so(signed_in, client, admin):
    response = set_scope(signed_in, "type")

    assert response.status_code == 302 and response.headers["Location"] == "/admin/types/email"
    assert api_type(client, admin)["unique_scope"] == "type"
    page = signed_in.get("/admin/types/email")
    assert "Dedupe windows of email: shared by every producer." in flashes(page)
    assert history_rows(text_of(page))[0].endswith(
        f"admin:{ADMIN_NAME} dedupe windows: per producer → shared by every producer"
    )


def test_a_bad_scope_from_the_form_is_a_400_on_its_field_and_changes_nothing(signed_in, client, admin):
    response = set_scope(signed_in, "global")

    assert response.status_code == 400
    assert field_errors(text_of(response)) == ["Not a valid choice."]
    assert api_type(client, admin)["unique_scope"] == "producer"


def test_a_viewer_may_not_change_the_scope(viewer_client, client, admin):
    assert set_scope(viewer_client, "type").status_code == 403
    assert api_type(client, admin)["unique_scope"] == "producer"


# --- flask types ---------------------------------------------------------------------------------


def test_flask_types_unique_scope_sets_it_and_prints_the_types_line(runner, client, admin):
    result = runner.invoke(args=["types", "unique-scope", "email", "type"])

    assert (result.exit_code, result.stdout) == (0, "email\tactive\t-\t-\t-\t0\t0\ttype\n")
    assert api_type(client, admin)["unique_scope"] == "type"
    [change] = client.get("/types/email/history", headers=admin).get_json()["history"]
    assert change["actor"].startswith("cli") and change["changes"] == {
        "unique_scope": {"old": "producer", "new": "type"}
    }


def test_flask_types_list_shows_the_unique_scope_last(runner, client, admin):
    client.patch("/types/report", json={"unique_scope": "type"}, headers=admin)
    header, *lines = runner.invoke(args=["types", "list"]).stdout.splitlines()

    assert header.split("\t")[-1] == "unique_scope"
    assert {line.split("\t")[0]: line.split("\t")[-1] for line in lines}["report"] == "type"


@pytest.mark.parametrize("args", [["email", "global"], ["email"], ["parcel", "type"]])
def test_flask_types_unique_scope_refuses_a_bad_scope_or_type(runner, client, admin, args):
    result = runner.invoke(args=["types", "unique-scope", *args])

    assert result.exit_code != 0
    assert api_type(client, admin)["unique_scope"] == "producer"
