"""The admin pages' cookie session, opened only when the request brings a cookie."""

from __future__ import annotations

from flask.sessions import SecureCookieSessionInterface


class SessionOnlyWhenSent(SecureCookieSessionInterface):
    """Flask's signed-cookie session, minus the signer for requests that carry no session cookie.

    Most requests are API calls with a bearer key and no cookie; building the signer to verify nothing
    was a measurable share of their server time. A page that logs someone in still gets a session to write to, and
    a request that does bring a cookie is verified exactly as before.
    """

    def open_session(self, app, request):
        if self.get_cookie_name(app) not in request.cookies:
            return self.session_class()
        return super().open_session(app, request)
