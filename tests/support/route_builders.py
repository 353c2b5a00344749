"""One compiled URL builder per route for the whole test process, however many apps the tests create.

Werkzeug generates and compiles a Python function for each URL rule of each new app (two per rule: with and
without query arguments). The suite creates an app per test, with the same routes every time, and that
compilation was most of ``create_app``'s time. The generated function depends only on the rule's text, its
parsed parts and its defaults; it takes the rule as ``self`` when called, so one function serves every app's
copy of the same rule. What a test builds with ``url_for`` is unchanged: the same code, compiled once.

Registered as a plugin in tests/conftest.py. Servers the tests start in their own processes build one app
each and are left as they are.
"""

from __future__ import annotations

from werkzeug.routing.rules import Rule

_compile_builder = Rule._compile_builder
_builders: dict[tuple, object] = {}


def _shared_builder(rule: Rule, append_unknown: bool = True):
    defaults = tuple(sorted((name, repr(value)) for name, value in (rule.defaults or {}).items()))
    converters = tuple(sorted((name, type(converter)) for name, converter in rule._converters.items()))
    key = (rule.rule, tuple(rule._trace), defaults, converters, append_unknown)
    builder = _builders.get(key)
    if builder is None:
        builder = _builders[key] = _compile_builder(rule, append_unknown)
    return builder


Rule._compile_builder = _shared_builder
