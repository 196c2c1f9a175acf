"""The tests' cache of compiled Jinja templates (tests/support/compile_cache/gpuops_jinja_cache.py): a hit gives back
the code the same compile makes, and an entry is not used where anything that decides the code differs."""
import importlib.util
import marshal
import os

import jinja2
import pytest
from jinja2.utils import pass_context

from tests.support.ansible_run import COMPILE_CACHE_PATH, run_module
from tests.support.compile_cache import gpuops_jinja_cache as jinja_cache

_spec = importlib.util.spec_from_file_location("gpuops_test_jinja_site", os.path.join(COMPILE_CACHE_PATH,
                                                                                      "gpuops_startup.py"))
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)

TEMPLATES = (
    "plain text, no template",
    "{{ name | upper }} has {{ items | length }} items{% if items is sameas none %} (none){% endif %}",
    "{% for x in items %}{{ loop.index }}={{ x | double }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% macro row(a, b='-') %}[{{ a }}|{{ b }}]{% endmacro %}{{ row(name) }}{{ row(1, b=2) }}",
    "{% set total = items | map('double') | sum %}{{ total }}{% raw %}{{ kept }}{% endraw %}",
    "{% if missing is defined %}{{ missing | nope }}{% else %}{{ name ~ '!' }}{% endif %}",
)
EXPRESSIONS = ("items | length > 1", "name is string and name | upper == 'GPU'", "missing is not defined")
VALUES = {"name": "gpu", "items": [1, 2, 3]}


class Env(jinja2.Environment):
    """A class of the test's own, so that installing the cache on it touches no other test's environments."""


def _double(value):
    return value * 2


@pass_context
def _double_with_context(context, value):   # pylint: disable=unused-argument
    return value * 2


def _env(**settings):
    env = Env(**settings)
    env.filters["double"] = _double
    return env


@pytest.fixture
def cached(tmp_path):
    """install() on Env, in a folder of the test's own; a new cache (another process) on the same folder with
    ``cached.again()``; the methods put back after the test."""
    installed = []

    def again():
        if installed:
            installed[-1].uninstall()
        installed.append(jinja_cache.install(str(tmp_path / "jinja"), site.read_marshal, site.write_marshal, Env))
        return installed[-1]
    again()
    yield again
    installed[-1].uninstall()


def _fresh(env, source):
    """What Jinja itself compiles from ``source`` (jinja2.Environment's own compile, not the class's)."""
    return jinja2.Environment.compile(env, source)


def _entries(folder):
    return [os.path.join(walked[0], name) for walked in os.walk(str(folder)) for name in walked[2]]


def _same(first, second):
    return marshal.dumps(first) == marshal.dumps(second)


def test_a_hit_is_the_code_the_compile_makes_and_renders_the_same(cached):
    cache = cached()
    first = [_env().from_string(source).render(VALUES) for source in TEMPLATES]
    assert (cache.hits, cache.misses) == (0, len(TEMPLATES))
    cache = cached()       # another process on the same folder
    env = _env()
    codes = [env.compile(source) for source in TEMPLATES]
    assert (cache.hits, cache.misses, cache.rejected) == (len(TEMPLATES), 0, 0)
    assert all(_same(code, _fresh(_env(), source)) for code, source in zip(codes, TEMPLATES))
    assert [_env().from_string(source).render(VALUES) for source in TEMPLATES] == first
    assert first[2] == "1=2,2=4,3=6" and first[5] == "gpu!"


def test_an_expression_hit_evaluates_as_jinja_does(cached):
    cache = cached()
    first = [_env().compile_expression(source)(**VALUES) for source in EXPRESSIONS]
    assert first == [True, True, True] and cache.misses == len(EXPRESSIONS)
    cache = cached()
    again = [_env().compile_expression(source)(**VALUES) for source in EXPRESSIONS]
    assert again == first and cache.hits == len(EXPRESSIONS)
    assert _env().compile_expression("missing")() is None                       # undefined_to_none kept
    assert isinstance(_env().compile_expression("missing", undefined_to_none=False)(), jinja2.Undefined)


def test_a_filter_now_passed_its_context_is_compiled_again(cached):
    source = TEMPLATES[2]
    cached()
    _env().compile(source)
    cache = cached()
    env = _env()
    env.filters["double"] = _double_with_context      # the same name, called another way
    code = env.compile(source)
    assert (cache.hits, cache.rejected, cache.misses) == (0, 1, 1)
    assert _same(code, _fresh(env, source)) and not _same(code, _fresh(_env(), source))
    assert env.from_string(source).render(VALUES) == "1=2,2=4,3=6"


def test_a_filter_gone_is_compiled_again(cached):
    source = TEMPLATES[5]              # `nope` only in a branch not taken: Jinja compiles it anyway
    cached()
    env = _env()
    env.filters["nope"] = _double
    env.compile(source)
    cache = cached()
    code = _env().compile(source)
    assert (cache.hits, cache.rejected) == (0, 1)
    assert _same(code, _fresh(_env(), source))


def test_other_settings_are_another_entry(cached):
    source = "  {% if true %}\n  yes\n  {% endif %}\n"
    cached()
    _env().compile(source)
    cache = cached()
    trimmed = _env(trim_blocks=True, lstrip_blocks=True)
    code = trimmed.compile(source)
    assert (cache.hits, cache.misses) == (0, 1)
    assert _same(code, _fresh(trimmed, source))
    assert trimmed.from_string(source).render() != _env().from_string(source).render()


def test_what_is_not_cached(cached, tmp_path):
    cache = cached()
    env = _env()
    assert env.compile(TEMPLATES[1], raw=True) == jinja2.Environment.compile(env, TEMPLATES[1], raw=True)
    with pytest.raises(jinja2.TemplateSyntaxError):
        env.compile("{% if %}")
    with pytest.raises(jinja2.TemplateSyntaxError):
        env.compile("{% if %}")                                   # a failure raises again, nothing kept
    debugging = _env()
    debugging._debuggable_template_source = True   # pylint: disable=protected-access
    debugging.compile(TEMPLATES[1])
    # the two failing compiles were misses; the raw and the debugging compiles were not looked up at all
    assert (cache.hits, cache.misses) == (0, 2) and not os.path.exists(str(tmp_path / "jinja"))
    assert jinja_cache.JinjaCache("unused", site.read_marshal, site.write_marshal).key(debugging, "template", TEMPLATES[1]) is None


def test_a_damaged_entry_is_compiled_again_and_replaced(cached, tmp_path):
    cached()
    _env().compile(TEMPLATES[1])
    entries = _entries(tmp_path / "jinja")
    assert len(entries) == 1
    with open(entries[0], "wb") as handle:
        handle.write(b"not marshal")
    cache = cached()
    code = _env().compile(TEMPLATES[1])
    assert (cache.hits, cache.misses) == (0, 1) and _same(code, _fresh(_env(), TEMPLATES[1]))
    cache = cached()
    _env().compile(TEMPLATES[1])
    assert cache.hits == 1


def test_ansible_escape_backslashes_is_part_of_the_key(tmp_path):
    """ansible-core's lexer escapes backslashes in a template's string constants only in the compiles it asks to
    (its _TemplateCompileContext): the same source is two codes, and each is kept under its own key."""
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext

    def code(escape):
        with _TemplateCompileContext(escape_backslashes=escape):
            return marshal.dumps(AnsibleEnvironment().compile('{{ "a\\1b" }}'))

    plain = [code(True), code(False)]
    assert plain[0] != plain[1]
    cache = jinja_cache.install(str(tmp_path / "jinja"), site.read_marshal, site.write_marshal, jinja2.Environment)
    try:
        assert [code(True), code(False)] == plain and cache.misses == 2
        assert [code(True), code(False)] == plain and cache.hits == 2
    finally:
        cache.uninstall()


def test_the_tests_ansible_runs_keep_their_templates(tmp_path):
    """The hook is on in the ansible commands the tests start: a run's templates land in the compile cache's folder."""
    folder = tmp_path / "compile-cache"
    result, proc = run_module("ansible.builtin.debug", "msg={{ [1, 2] | map('string') | join('+') }}",
                              env={"GPUOPS_TEST_COMPILE_CACHE": str(folder)})
    assert result["msg"] == "1+2", proc.stderr
    assert _entries(folder / "jinja")
    off = tmp_path / "off"
    result, proc = run_module("ansible.builtin.debug", "msg={{ 3 }}",
                              env={"GPUOPS_TEST_COMPILE_CACHE": str(off), "GPUOPS_TEST_JINJA_CACHE": "off"})
    assert result["msg"] == 3 and off.exists() and not (off / "jinja").exists(), proc.stderr
