"""The process-wide cache of compiled templates: a second app renders from it, and never an outdated page."""

from __future__ import annotations

from jinja2 import DictLoader, Environment

from queuelog.ui.compiled_templates import ProcessBytecodeCache


class CountingCache(ProcessBytecodeCache):
    """The cache, counting how often Jinja hands it freshly compiled code."""

    def __init__(self) -> None:
        super().__init__()
        self.compiled = 0

    def dump_bytecode(self, bucket) -> None:
        self.compiled += 1
        super().dump_bytecode(bucket)


def _render(cache: ProcessBytecodeCache, source: str, name: str) -> str:
    """Render through a new Jinja environment, as each new app has one: its own, with nothing compiled yet."""
    environment = Environment(loader=DictLoader({"page.html": source}), bytecode_cache=cache)
    return environment.get_template("page.html").render(name=name)


def test_a_second_app_renders_from_the_code_the_first_compiled():
    cache = CountingCache()
    assert _render(cache, "Hello {{ name }}", "a") == "Hello a"
    assert _render(cache, "Hello {{ name }}", "b") == "Hello b"
    assert cache.compiled == 1


def test_a_changed_template_is_compiled_afresh():
    cache = CountingCache()
    _render(cache, "old {{ name }}", "x")
    assert _render(cache, "new {{ name }}", "x") == "new x"
    assert cache.compiled == 2
