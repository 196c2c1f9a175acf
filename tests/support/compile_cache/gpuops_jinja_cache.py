"""The code Jinja makes from a template, kept on disk for every later process of the tests' ansible runs (issue 49),
loaded by this directory's sitecustomize.py where the compile cache is on (``GPUOPS_TEST_COMPILE_CACHE``).

Why: ansible-core compiles every template it renders anew (ansible/_internal/_templating/_engine.py keeps no compiled
templates), and it renders a task's arguments, conditionals and variables in the worker it forked for that task and
host, so whatever a worker compiled ends with it. In a lab converge of test_site_lab (449 workers) the workers spent
8.8 of their 30.2 CPU seconds in ``jinja2.Environment.compile`` (5 783 compiles: lexing, parsing, generating Python and
compiling it), the same few hundred templates again and again. Here the code object of a compile is kept, keyed by
everything that decides it, and the next process that compiles the same template with the same settings reads it
back instead: what ``compile()`` returns is the code the same compile made, so what a template renders, and what a test
checks, is unchanged.

What decides the code, and so the key: the source (a template's text, or an expression's for
``compile_expression``), its name and filename, ``defer_init``; the environment's class and code generator, the
lexer's and code generator's settings (delimiters, ``trim_blocks``, ``lstrip_blocks``, newlines, ``optimized``,
``autoescape``, async, sandboxed, the extensions, ``finalize`` and how it is passed its arguments); ansible-core's
compile-time settings (the ``escape_backslashes`` of the compile in progress, ``ALLOW_EMBEDDED_TEMPLATES``); Python's
bytecode magic and the versions of Jinja and ansible-core. And the filters and tests the template names: Jinja's code
generator looks each one up as it compiles and writes how it is called (with the context, the evaluation context, the
environment or none of them) into the code, so an entry also records, for each filter and test its code names, whether
it was found and how it is called, and is used only where the process that reads it finds the same.

Not cached (compiled as without this file): ``raw`` compiles (Python source asked for), a template given as a node
tree, a compile that fails (it raises as before), a template whose code names a filter or test in a way this file
cannot read back, and every compile of an environment that debugs its template sources (ansible-core's
``_debuggable_template_source``). What a hit does not give back: a warning the compile itself emitted is emitted only
when a process compiles the template, not when it reads the code. Entries are written whole (a temporary file renamed
into place); an entry that cannot be read, or is not what this file writes, is compiled again and replaced.
"""
import hashlib
import importlib.util
import os
import re
import sys
import threading
import types

FOLDER = "jinja"
# the Environment attributes that Jinja's lexer and code generator read as they compile
SETTINGS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
            "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
            "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized", "is_async",
            "sandboxed")
# how Jinja's generated code fetches a filter or a test (compiler.py, pull_dependencies)
_NAMED = re.compile(r"environment\.(filters|tests)\['([^'\\]*)'\]")
_ANY = re.compile(r"environment\.(?:filters|tests)\[")
_FORMAT = "gpuops-jinja-1"


def _qualified(value):
    """A function's or class's dotted name; an object's class's, marked as an instance; None for None."""
    if value is None:
        return None
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return "%s.%s" % (getattr(value, "__module__", "?"), getattr(value, "__qualname__", "?"))
    return "%s.%s instance" % (type(value).__module__, type(value).__qualname__)


def _passed(function):
    """How Jinja passes ``function`` its first arguments (jinja2.utils._PassArg.from_obj): its name, or None."""
    passed = getattr(function, "jinja_pass_arg", None)
    return getattr(passed, "name", None) if passed is not None else None


class JinjaCache(object):
    """Compiled templates of ``directory``; ``hits``, ``misses`` and ``rejected`` (an entry whose filters or tests
    this process finds otherwise) count this process's cacheable compiles."""

    def __init__(self, directory, read, write):
        self.directory = directory
        self.read = read      # path -> the value marshal wrote there, or None (gpuops_startup.read_marshal)
        self.write = write    # (path, value): marshal it into path whole (gpuops_startup.write_marshal)
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self._local = threading.local()
        self._versions = None

    # -- the key

    def _versions_text(self):
        if self._versions is not None:
            return self._versions
        jinja = sys.modules.get("jinja2")
        release = sys.modules.get("ansible.release")
        text = "%s jinja2 %s ansible-core %s" % (
            importlib.util.MAGIC_NUMBER.hex(), getattr(jinja, "__version__", "?"), getattr(release, "__version__", "-"))
        if jinja is not None and release is not None:
            self._versions = text     # kept once both are known (a process without ansible-core asks again)
        return text

    @staticmethod
    def _ansible_settings(environment):
        """ansible-core's compile-time settings where ``environment`` is ansible-core's (its module defines them)."""
        module = sys.modules.get(type(environment).__module__)
        context = getattr(module, "_TemplateCompileContext", None)
        config = getattr(module, "_TemplateConfig", None)
        current = context.current(optional=True) if context is not None else None
        return (None if current is None else bool(current.escape_backslashes),
                None if config is None else bool(getattr(config, "allow_embedded_templates", False)))

    def settings(self, environment):
        """The text of what decides ``environment``'s code besides a template's own, or None where it must not be
        cached (an environment that debugs its template sources)."""
        if getattr(environment, "_debuggable_template_source", False):
            return None
        autoescape = environment.autoescape
        parts = [self._versions_text(), _qualified(type(environment)), _qualified(environment.code_generator_class),
                 repr(tuple(getattr(environment, name, None) for name in SETTINGS)),
                 repr(autoescape) if isinstance(autoescape, bool) else _qualified(autoescape),
                 _qualified(environment.finalize), _passed(environment.finalize),
                 repr(sorted(environment.extensions)), repr(self._ansible_settings(environment))]
        return "\0".join(str(part) for part in parts)

    def key(self, environment, kind, source, name=None, filename=None, defer_init=False):
        """The entry's name for ``source`` compiled by ``environment`` (None: not cached)."""
        settings = self.settings(environment) if isinstance(source, str) else None
        if settings is None:
            return None
        which = "\0%s\0%r\0%r\0%r\0" % (kind, name, filename, bool(defer_init))
        digest = hashlib.sha256(settings.encode("utf-8", "surrogatepass"))
        digest.update(which.encode("utf-8", "surrogatepass"))
        digest.update(source.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    # -- the filters and tests a code names

    @staticmethod
    def _found(environment, kind, name):
        """Whether ``environment`` has filter/test ``name`` and how it passes it arguments; None where looking it up
        failed."""
        mapping = environment.filters if kind == "filters" else environment.tests
        try:
            function = mapping.get(name)
        except Exception:  # pylint: disable=broad-except  # a lookup that fails: never a reason to use an entry
            return None
        return (function is not None, _passed(function))

    def dependencies(self, environment, python_source):
        """[(kind, name, found, passed)] for the filters and tests ``python_source`` fetches; None where it fetches
        one in a form this file does not read (then it is not cached)."""
        named = _NAMED.findall(python_source)
        if len(named) != len(_ANY.findall(python_source)):
            return None
        out = []
        for kind, name in sorted(set(named)):
            found = self._found(environment, kind, name)
            if found is None:
                return None
            out.append((kind, name) + found)
        return tuple(out)

    def _still_true(self, environment, dependencies):
        return all(self._found(environment, kind, name) == (found, passed)
                   for kind, name, found, passed in dependencies)

    # -- the entries

    def _path(self, key):
        return os.path.join(self.directory, key[:2], key)

    def load(self, environment, key):
        """The code kept under ``key`` where it is there, whole, and its filters and tests are still as recorded."""
        entry = self.read(self._path(key))
        if (not isinstance(entry, tuple) or len(entry) != 3 or entry[0] != _FORMAT
                or not isinstance(entry[2], types.CodeType) or not isinstance(entry[1], tuple)):
            return None
        if not self._still_true(environment, entry[1]):
            self.rejected += 1
            return None
        self.hits += 1
        return entry[2]

    def store(self, environment, key, python_source, code):
        dependencies = self.dependencies(environment, python_source)
        if dependencies is not None:
            self.write(self._path(key), (_FORMAT, dependencies, code))

    # -- the compile, with what Jinja generated captured

    def compiled(self, environment, key, compile_now, returns_code=True):
        """(``compile_now()``'s result, None) where ``key``'s code is not kept, else (None, the kept code). What
        compile_now compiles is kept where Jinja generated exactly one code as it ran (and, ``returns_code``, that
        code is what it returned)."""
        code = self.load(environment, key)
        if code is not None:
            return None, code
        self.misses += 1
        outer = getattr(self._local, "captured", None)
        self._local.captured = captured = []
        try:
            result = compile_now()
        finally:
            self._local.captured = outer
        if len(captured) == 1 and (not returns_code or captured[0][1] is result):
            self.store(environment, key, captured[0][0], captured[0][1])
        return result, None

    def captured(self, python_source, code):
        """What Environment._compile made (the compile in progress on this thread keeps it)."""
        captured = getattr(self._local, "captured", None)
        if captured is not None:
            captured.append((python_source, code))


def install(directory, read, write, environment_class=None):
    """Route ``environment_class``'s (jinja2.Environment's) compile, compile_expression and _compile through a
    JinjaCache in ``directory`` (its entries read and written by ``read`` and ``write``: this directory's
    gpuops_startup.read_marshal and write_marshal); returns the cache, whose ``uninstall()`` puts the methods back."""
    if environment_class is None:
        from jinja2 import Environment as environment_class   # pylint: disable=import-outside-toplevel
    from jinja2.environment import TemplateExpression   # pylint: disable=import-outside-toplevel
    from jinja2.utils import internal_code   # pylint: disable=import-outside-toplevel
    cache = JinjaCache(directory, read, write)
    real_compile = environment_class.compile
    real_expression = environment_class.compile_expression
    real_python = environment_class._compile   # pylint: disable=protected-access

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # pylint: disable=redefined-builtin
        key = None if raw else cache.key(self, "template", source, name, filename, defer_init)
        if key is None:
            return real_compile(self, source, name, filename, raw, defer_init)
        result, code = cache.compiled(self, key, lambda: real_compile(self, source, name, filename, raw, defer_init))
        return result if code is None else code

    def compile_expression(self, source, undefined_to_none=True):
        key = cache.key(self, "expression", source)
        if key is None:
            return real_expression(self, source, undefined_to_none)
        # kept: the code of the template that Environment.compile_expression makes around the expression (its one
        # from_string), and on a hit that template is made from it as from_string makes it
        result, code = cache.compiled(self, key, lambda: real_expression(self, source, undefined_to_none), False)
        if code is None:
            return result
        template = self.template_class.from_code(self, code, self.make_globals(None), None)
        return TemplateExpression(template, undefined_to_none)

    def _compile(self, source, filename):
        code = real_python(self, source, filename)
        cache.captured(source, code)
        return code

    patched = {"compile": compile, "compile_expression": compile_expression, "_compile": _compile}
    own = dict((name, environment_class.__dict__[name]) for name in patched if name in environment_class.__dict__)

    def uninstall():
        for name in patched:
            if name in own:
                setattr(environment_class, name, own[name])
            else:
                delattr(environment_class, name)   # the class's parent's method again

    for name, function in patched.items():
        internal_code.add(function.__code__)
        setattr(environment_class, name, function)
    cache.uninstall = uninstall
    return cache
