"""The collection's own import graph, read from the code: which file of plugins/ imports which other one.

Every Python file under plugins/ (modules, module_utils, filter, action, doc_fragments, ...) is parsed with ast; each
``import``/``from ... import`` of ``ansible_collections.gpuops.nvidia.plugins...`` (at any depth: ansible-core
bundles the imports inside functions too) is an edge. Imports of anything else (ansible-core, the standard library,
third-party libraries) are left out.

    python scripts/import_graph.py                                  # print the graph (a Markdown list)
    python scripts/import_graph.py --write docs/architecture.md     # put it between the page's markers
    python scripts/import_graph.py --check docs/architecture.md     # exit 1 when the page shows another graph

Imports inside a function are marked: they run only when the function does (a backend chosen at run time, a
declaration for ansible-core's bundler), so a cycle through one is a note, not an error (--strict: an error).

plugins/module_utils/ is a set of packages, one per layer (LAYERS, top first), and a package may import only the
packages that ALLOWED names for it: an import of any other package, a module_utils file outside a package of
LAYERS, or an import from module_utils of a module, filter or action plugin is an error. ALLOWED points down the
layers, except where UP_INSIDE_FUNCTIONS lets an import inside a function point up (the backend choice).

Exit status 1 when the imports that run at import time have a cycle, when an import breaks the layers (each is
printed on stderr), or with --check when the page is stale.
"""
import argparse
import ast
import os
import sys

PREFIX = "ansible_collections.gpuops.nvidia.plugins"
START = "<!-- import-graph:start -->"
END = "<!-- import-graph:end -->"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UTILS = "module_utils"

# The packages of plugins/module_utils/, top layer first (docs/architecture.md, "Layers", says what each holds).
LAYERS = ("node", "health", "sim", "driver", "plan", "kube", "gpu", "common")
# package -> the packages its files may import (its own always); all below it in LAYERS
ALLOWED = {
    "node": ("driver", "plan", "kube", "gpu", "common"),
    "health": ("plan", "kube", "gpu", "common"),
    "sim": ("driver", "gpu", "common"),
    "driver": ("plan", "gpu", "common"),
    "plan": ("kube", "gpu", "common"),
    "kube": ("common",),
    "gpu": ("common",),
    "common": (),
}
# (package, package above it) -> why an import inside a function may point up
UP_INSIDE_FUNCTIONS = {
    ("gpu", "sim"): "the backend choice: _gpu_backend.get_backend imports the simulator only for a run that uses it",
}


def plugin_files(root):
    """{node name: path} for every Python file under ``root``/plugins; a node is named by its path below plugins/
    without .py (``modules/device_plugin``, ``module_utils/kube/_kube``)."""
    base = os.path.join(root, "plugins")
    out = {}
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                path = os.path.join(folder, name)
                out[os.path.relpath(path, base)[:-3].replace(os.sep, "/")] = path
    return out


def _target(dotted, nodes):
    """The node a dotted name below plugins/ is, or the node it is inside (a name imported from a file)."""
    parts = dotted.split(".")
    while parts:
        name = "/".join(parts)
        if name in nodes:
            return name
        parts.pop()
    return None


def graph(root=ROOT):
    """{node: sorted list of the nodes it imports} for every Python file under plugins/."""
    nodes = plugin_files(root)
    edges = {}
    for name, path in sorted(nodes.items()):
        edges[name] = sorted(imports_of(path, nodes) - {name})
    return edges


def _import_statements(tree):
    """(statement, deferred) for every import statement; deferred: inside a function, so it runs only when that
    function does (ansible-core still bundles the file it names)."""
    todo = [(child, False) for child in ast.iter_child_nodes(tree)]
    while todo:
        node, deferred = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, deferred
        inside = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        todo.extend((child, inside) for child in ast.iter_child_nodes(node))


def imports_of(path, nodes):
    """{node: deferred} for the nodes that the file at ``path`` imports; deferred only when every import of it is
    inside a function. In ``from PKG import A, B`` each name counts: A is a file of PKG (``module_utils.kube
    import _kube``) or a name in PKG's own file (``module_utils.kube._kube import KubeError``)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    found = {}
    for node, deferred in _import_statements(tree):
        if isinstance(node, ast.Import):
            candidates = [[alias.name] for alias in node.names]
        elif node.module and not node.level:
            candidates = [[node.module + "." + alias.name, node.module] for alias in node.names]
        else:
            continue
        for names in candidates:
            for name in names:
                if name.startswith(PREFIX + "."):
                    target = _target(name[len(PREFIX) + 1:], nodes)
                    if target:
                        found[target] = found.get(target, True) and deferred
                        break
    return found


def graph(root=ROOT):
    """{node: {imported node: deferred}} for every Python file under plugins/."""
    nodes = plugin_files(root)
    edges = {}
    for name, path in sorted(nodes.items()):
        edges[name] = dict((target, deferred) for target, deferred in sorted(imports_of(path, nodes).items())
                           if target != name)
    return edges


def import_time(edges):
    """Only the imports that run when a file is imported (a cycle among them is an error at import time)."""
    return dict((node, dict((t, d) for t, d in targets.items() if not d)) for node, targets in edges.items())


def _package(node):
    """The module_utils package of ``node`` (``module_utils/kube/_kube`` -> ``kube``); None outside module_utils,
    "" for a file directly in module_utils/."""
    parts = node.split("/")
    if parts[0] != UTILS:
        return None
    return parts[1] if len(parts) > 2 else ""


def package_edges(edges):
    """{package: {imported package: deferred}} between module_utils' packages (deferred: only inside functions)."""
    out = {}
    for node, targets in edges.items():
        source = _package(node)
        if not source:
            continue
        mine = out.setdefault(source, {})
        for target, deferred in targets.items():
            other = _package(target)
            if other and other != source:
                mine[other] = mine.get(other, True) and deferred
    return out


def rule_problems():
    """LAYERS, ALLOWED and UP_INSIDE_FUNCTIONS against each other: every allowed import points down the layers."""
    order = list(LAYERS)
    problems = []
    if sorted(ALLOWED) != sorted(order):
        problems.append("ALLOWED names the packages %s, LAYERS %s" % (sorted(ALLOWED), sorted(order)))
    for package, targets in sorted(ALLOWED.items()):
        for target in targets:
            if target not in order or package not in order or order.index(target) <= order.index(package):
                problems.append("ALLOWED lets %s import %s, which is not below it in LAYERS" % (package, target))
    for package, target in sorted(UP_INSIDE_FUNCTIONS):
        if package not in order or target not in order or order.index(target) >= order.index(package):
            problems.append("UP_INSIDE_FUNCTIONS lets %s import %s, which is not above it in LAYERS"
                            % (package, target))
    return problems


def layer_problems(edges):
    """What breaks the layers: a module_utils file outside a package of LAYERS, an import between packages that
    ALLOWED does not list (or that points up at import time), an import of a plugin from module_utils."""
    known = list(LAYERS)
    problems = []
    for node in sorted(edges):
        package = _package(node)
        if package is None:
            continue
        if package not in known:
            problems.append("%s is not in a package of module_utils' layers (%s): move it into one, or add its "
                            "package to LAYERS and ALLOWED in scripts/import_graph.py" % (node, ", ".join(known)))
            continue
        for target, deferred in sorted(edges[node].items()):
            other = _package(target)
            if other is None:
                problems.append("%s imports %s: module_utils imports no module, filter or action plugin"
                                % (node, target))
            elif other and other != package and other not in ALLOWED.get(package, ()):
                if deferred and (package, other) in UP_INSIDE_FUNCTIONS:
                    continue
                problems.append("%s imports %s%s: package %s may import only %s" % (
                    node, target, " (inside a function)" if deferred else "", package,
                    ", ".join(ALLOWED.get(package, ())) or "nothing of the others"))
    return problems


def cycles(edges):
    """The import cycles: each strongly connected component of more than one node, as a sorted list (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(out)


def markdown(edges):
    """The graph as a Markdown list: one line per file that imports others of the collection, grouped by folder."""
    lines = []
    group = None
    for node in sorted(edges):
        folder = node.split("/")[0]
        if folder != group:
            if group is not None:
                lines.append("")
            lines.append("%s/:" % folder)
            lines.append("")
            group = folder
        direct = ", ".join("`%s`" % t for t, deferred in sorted(edges[node].items()) if not deferred)
        later = ", ".join("`%s`" % t for t, deferred in sorted(edges[node].items()) if deferred)
        line = "- `%s` -> %s" % (node, direct or "(none)")
        lines.append(line + (" (inside functions: %s)" % later if later else ""))
    return "\n".join(lines) + "\n"


def packages_markdown(edges):
    """module_utils' packages, top layer first, each with what it imports of the others."""
    imported = package_edges(edges)
    lines = ["module_utils packages, top layer first, with what each imports of the others:", ""]
    for name in LAYERS:
        targets = imported.get(name, {})
        direct = ", ".join("`%s`" % t for t, deferred in sorted(targets.items()) if not deferred)
        later = ", ".join("`%s`" % t for t, deferred in sorted(targets.items()) if deferred)
        line = "- `%s/` -> %s" % (name, direct or "(none)")
        lines.append(line + (" (inside functions: %s)" % later if later else ""))
    return "\n".join(lines) + "\n"


def block(edges):
    """What goes between the markers of docs/architecture.md."""
    return "%s\n<!-- generated by scripts/import_graph.py; regenerate with: python scripts/import_graph.py --write " \
           "docs/architecture.md -->\n\n%s\n%s\n%s" % (START, packages_markdown(edges), markdown(edges), END)


def page_block(text, path):
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit("%s has no %s ... %s markers" % (path, START, END))
    return start, end + len(END)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--root", default=ROOT, help="the collection's root (default: this checkout)")
    parser.add_argument("--write", metavar="PAGE", help="replace the graph between the page's markers")
    parser.add_argument("--check", metavar="PAGE", help="exit 1 when the page's graph is not the code's")
    parser.add_argument("--strict", action="store_true",
                        help="a cycle through imports inside functions is an error too (default: a note)")
    args = parser.parse_args(argv)
    edges = graph(args.root)
    status = 0
    hard = cycles(import_time(edges))
    for cycle in hard:
        sys.stderr.write("import cycle: %s\n" % " <-> ".join(cycle))
        status = 1
    for problem in rule_problems() + layer_problems(edges):
        sys.stderr.write("layers: %s\n" % problem)
        status = 1
    for cycle in cycles(edges):
        if not any(set(cycle) <= set(known) for known in hard):
            sys.stderr.write("%s: cycle through imports inside functions (not run at import time): %s\n"
                             % ("import cycle" if args.strict else "note", " <-> ".join(cycle)))
            status = 1 if args.strict else status
    if args.write or args.check:
        path = args.write or args.check
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        start, end = page_block(text, path)
        new = text[:start] + block(edges) + text[end:]
        if args.write:
            if new != text:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(new)
        elif new != text:
            sys.stderr.write("%s shows another import graph than the code's: run python scripts/import_graph.py "
                             "--write %s\n" % (path, path))
            status = 1
    else:
        sys.stdout.write(packages_markdown(edges) + "\n" + markdown(edges))
    return status


if __name__ == "__main__":
    sys.exit(main())
