"""GET /metrics read as Prometheus reads it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def scrape(client, headers) -> dict:
    """{(sample name, frozenset of labels): value} from one GET /metrics, parsed by the Prometheus client."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.data
    assert response.content_type.startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)
