"""tests/support/route_builders.py: apps built in one test process share each rule's compiled URL builder."""

from __future__ import annotations

from werkzeug.routing import Map, Rule

from tests.support import route_builders

VALUES = [("job", {"job_id": 7}), ("type", {"name": "resize/image", "page": 2}), ("home", {}), ("home", {"q": "a b"})]


def _map() -> Map:
    return Map(
        [
            Rule("/jobs/<int:job_id>", endpoint="job"),
            Rule("/types/<path:name>", endpoint="type", defaults={"page": 1}),
            Rule("/types/<path:name>/<int:page>", endpoint="type"),
            Rule("/", endpoint="home"),
        ]
    )


def _urls(url_map: Map) -> list[str]:
    adapter = url_map.bind("localhost")
    return [adapter.build(endpoint, values) for endpoint, values in VALUES]


def test_a_second_map_of_the_same_rules_builds_the_same_urls_as_werkzeugs_own_builders(monkeypatch):
    _urls(_map())  # the first map compiles the shared builders
    shared = _urls(_map())
    monkeypatch.setattr(Rule, "_compile_builder", route_builders._compile_builder)
    assert shared == _urls(_map()) == ["/jobs/7", "/types/resize/image/2", "/", "/?q=a+b"]


def test_a_second_map_of_the_same_rules_compiles_no_builder_again(monkeypatch):
    compiled = []
    compile_builder = route_builders._compile_builder

    def counted(rule, append_unknown=True):
        compiled.append(rule.rule)
        return compile_builder(rule, append_unknown)

    monkeypatch.setattr(route_builders, "_compile_builder", counted)
    _map()
    first = len(compiled)
    _map()
    assert len(compiled) == first
