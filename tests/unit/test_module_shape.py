"""Every module has the one module shape (issue 38 part 2): its ``main()`` is only ``run_module(TheClass)`` of
plugins/module_utils/_module_run.py, and TheClass is a ``ModuleRun`` (validate -> read -> plan -> apply or report,
one mapping of errors to failures, one "nothing changed" wording). A new module written another way fails here."""
import ast
import importlib
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils._module_run import ModuleRun

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = os.path.join(ROOT, "plugins", "modules")

# Known exceptions, each with its reason. gpu_node_plan is built from the step registry (_node_steps), and it,
# gpu_info and gpu_simulator were being changed by other work when the base landed; they move to it next.
EXCEPTIONS = {}   # every module is in the one shape (gpu_node_plan, gpu_info and gpu_simulator were the last)


def module_names():
    return sorted(name[:-3] for name in os.listdir(MODULES) if name.endswith(".py") and name != "__init__.py")


def shape(name):
    """The module's shape: 'ModuleRun' when main() is only run_module(C) with C a ModuleRun, else what main is."""
    with open(os.path.join(MODULES, name + ".py")) as handle:
        tree = ast.parse(handle.read())
    mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
    if len(mains) != 1:
        return "no main()"
    body = [stmt for stmt in mains[0].body if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))]
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "run_module" and len(call.args) == 1
            and isinstance(call.args[0], ast.Name)):
        return "main() with its own body (%d statements)" % len(body)
    module = importlib.import_module("ansible_collections.gpuops.nvidia.plugins.modules." + name)
    cls = getattr(module, call.args[0].id)
    if module.run_module.__module__ != ModuleRun.__module__ or not issubclass(cls, ModuleRun):
        return "run_module of another kind, or a class that is not a ModuleRun"
    return "ModuleRun"


def test_every_module_but_the_known_exceptions_has_the_one_shape():
    names = module_names()
    assert len(names) > 20 and set(EXCEPTIONS) <= set(names), "a listed exception is gone: update EXCEPTIONS"
    shapes = {name: shape(name) for name in names if name not in EXCEPTIONS}
    wrong = {name: got for name, got in shapes.items() if got != "ModuleRun"}
    assert not wrong, "modules without the one shape (see docs/architecture.md, 'The module shape'): %s" % wrong
    assert len(set(shapes.values())) == 1      # the count of distinct shapes, the known exceptions aside
