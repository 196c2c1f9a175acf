"""Every module has the one module shape (issue 38 part 2): its ``main()`` is only ``run_module(TheClass)`` of
plugins/module_utils/common/_module_run.py, and TheClass is a ``ModuleRun`` (validate -> read -> plan -> apply or report,
one mapping of errors to failures, one "nothing changed" wording). A new module written another way fails here."""
import ast
import importlib
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun

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


# The modules that still override ``converge``, each with its reason; neither retries, waits nor reads GPUs there
# (issue 48 item 2: the conflict retry is the base's ``retry``, filled by _kube_service.KubeRun; a wait is the base's
# ``wait`` on the one table, _waits.WAITS; the GPUs are read by _gpu_run.GpuRun.read_gpus, from ``read``).
CONVERGE_OVERRIDES = {
    # its three states are three operations of the lease runner (_lease: a read; a compare-and-swap; the arrival
    # barrier, the wait while another run holds it and the compare-and-swap), each one call that waits and retries
    # inside the runner, through the wait table and retry_on_conflict
    "cluster_lease": "the Lease's compare-and-swap is one operation of its runner",
    # whether it changed is what its writes (or their dry runs) answer, in a fixed order after every check
    "gpu_operator": "its changes are what its writes answer",
}

# What a converge override must not call (nor any method of its class that it calls): a retry, a wait, a sleep or a
# read of the GPUs; nor may it loop (a ``while``: a retry or a wait of its own).
FORBIDDEN = {"retry_on_conflict", "write_as_planned", "retry", "poll", "wait", "sleep", "get_backend", "read_facts",
             "read_gpus", "read_all", "read_health"}


def _called(node):
    """The names called in ``node``: ``f()`` gives f, ``x.f()`` gives f (and ``self.f`` as ('self', f))."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                yield func.id, False
            elif isinstance(func, ast.Attribute):
                yield func.attr, isinstance(func.value, ast.Name) and func.value.id == "self"


def converge_problems(source):
    """For a module's source: {class name: what its converge (and the methods of its class and the functions of the
    module that it calls) does that a converge override must not}, for every class that defines ``converge``."""
    tree = ast.parse(source)
    functions = dict((f.name, f) for f in tree.body if isinstance(f, ast.FunctionDef))
    problems = {}
    for cls in [node for node in tree.body if isinstance(node, ast.ClassDef)]:
        methods = dict((f.name, f) for f in cls.body if isinstance(f, ast.FunctionDef))
        if "converge" not in methods:
            continue
        found, todo, seen = set(), [("converge", True)], set()
        while todo:
            name, on_self = todo.pop()
            body = methods.get(name) if on_self else functions.get(name)
            if (name, on_self) in seen or body is None:
                continue
            seen.add((name, on_self))
            if any(isinstance(sub, ast.While) for sub in ast.walk(body)):
                found.add("a while loop in %s" % name)
            for called, called_on_self in _called(body):
                if called in FORBIDDEN:
                    found.add("%s() in %s" % (called, name))
                todo.append((called, called_on_self))
        problems[cls.name] = sorted(found)
    return problems


def test_no_module_overrides_converge_to_retry_wait_or_read_gpus():
    overrides, bad = {}, {}
    for name in module_names():
        with open(os.path.join(MODULES, name + ".py")) as handle:
            found = converge_problems(handle.read())
        if found:
            overrides[name] = found
            bad.update(("%s.%s" % (name, cls), what) for cls, what in found.items() if what)
    assert not bad, "converge overrides that retry, wait or read GPUs (use the base's hooks and facilities): %s" % bad
    assert sorted(overrides) == sorted(CONVERGE_OVERRIDES), (
        "a converge override must be listed in CONVERGE_OVERRIDES with its reason (or be removed): %s" % sorted(overrides))


def test_the_converge_check_finds_a_retry_a_wait_a_loop_and_a_gpu_read():
    """The check above can fail: an override that retries, waits, loops or reads the GPUs, itself or through a method
    of its class, is found; one that only calls its runner is not."""
    source = '''
class Retrying(ModuleRun):
    def converge(self):
        return retry_on_conflict(super(Retrying, self).converge, tries=3)

class Waiting(ModuleRun):
    def converge(self):
        self.settle()
        return self.result

    def settle(self):
        while not self.ready():
            time.sleep(1)

class Reading(ModuleRun):
    def converge(self):
        return self.helper()

    def helper(self):
        return read_them(self.module)

def read_them(module):
    return get_backend().read_all()

class Running(ModuleRun):
    def converge(self):
        return self.lease.acquire(self.params["holder"])
'''
    got = converge_problems(source)
    assert got["Retrying"] == ["retry_on_conflict() in converge"]
    assert got["Waiting"] == ["a while loop in settle", "sleep() in settle"]
    assert got["Reading"] == ["get_backend() in read_them", "read_all() in read_them"]
    assert got["Running"] == []


def _conflict_retries(path):
    """Lines of ``path`` where a loop compares something with the API's 409 (a literal 409 or a name CONFLICT): a
    conflict retried by hand. (A 409 outside a loop is an answer, not a retry: _kube.api_error's wording of it, a
    create that finds the namespace made meanwhile.)"""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    found = []

    def visit(node, in_loop):
        if in_loop and isinstance(node, ast.Compare):
            for side in [node.left] + list(node.comparators):
                if (isinstance(side, ast.Constant) and side.value == 409) or \
                        (isinstance(side, ast.Name) and side.id == "CONFLICT") or \
                        (isinstance(side, ast.Attribute) and side.attr == "CONFLICT"):
                    found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, in_loop or isinstance(node, (ast.For, ast.While)))

    visit(tree, False)
    return sorted(set(found))


def test_no_module_fails_by_hand_or_retries_a_conflict_by_hand():
    """Issue 48's done-means: no ``fail_json`` in a module (failures go to the base: ``self.fail``, ``refuse``,
    ``refuse_input`` or a raised ``Failure``), and no 409 Conflict handled outside the service layer
    (_kube_service.retry_on_conflict, KubeRun's ``conflict_tries``)."""
    by_hand = [name for name in module_names()
               if "fail_json" in open(os.path.join(MODULES, name + ".py")).read()]
    assert not by_hand, "modules that call fail_json themselves: %s" % by_hand
    service = os.path.join(ROOT, "plugins", "module_utils", "kube", "_kube_service.py")
    conflicts = {}
    for folder, dummy, files in os.walk(os.path.join(ROOT, "plugins")):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != service and _conflict_retries(path):
                conflicts[os.path.relpath(path, ROOT)] = _conflict_retries(path)
    assert not conflicts, "409 Conflict handled by hand (use _kube_service.retry_on_conflict): %s" % conflicts


def test_the_conflict_check_finds_a_hand_written_409_retry(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("for attempt in (1, 2):\n    try:\n        write()\n    except KubeError as exc:\n"
                      "        if exc.status == 409 and attempt == 1:\n            continue\n        raise\n"
                      "while True:\n    if _kube_service.CONFLICT == status():\n        break\n"
                      "if exc.status == 409:\n    pass\n")
    assert _conflict_retries(str(sample)) == [5, 9]
