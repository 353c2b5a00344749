"""Behind a reverse proxy the client's address comes from X-Forwarded-For, and only when configured."""

import pytest
from flask import request


@pytest.fixture
def address_probe(app):
    @app.get("/admin/_probe_address")
    def probe():
        return request.remote_addr or ""

    return app.test_client()


@pytest.mark.parametrize("config_overrides", [{"TRUSTED_PROXIES": 1}], indirect=True)
def test_a_trusted_proxy_passes_on_the_client_address(address_probe):
    response = address_probe.get("/admin/_probe_address", headers={"X-Forwarded-For": "203.0.113.7"})
    assert response.get_data(as_text=True) == "203.0.113.7"


def test_without_a_configured_proxy_a_client_cannot_pick_its_address(address_probe):
    response = address_probe.get("/admin/_probe_address", headers={"X-Forwarded-For": "203.0.113.7"})
    assert response.get_data(as_text=True) == "127.0.0.1"
