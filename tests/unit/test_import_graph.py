"""scripts/import_graph.py: the collection's own import graph, read from the code, has no cycle at import time, keeps
module_utils' packages in their layers, and docs/architecture.md shows exactly that graph."""
import os
import subprocess
import sys

import pytest

from tests.support.ansible_run import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import import_graph  # noqa: E402  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(ROOT, "scripts", "import_graph.py")
PAGE = os.path.join(ROOT, "docs", "architecture.md")
PKG = "ansible_collections.gpuops.nvidia.plugins.module_utils"


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False, cwd=ROOT)


def test_the_repository_has_no_import_cycle_and_prints_its_graph():
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    assert "import cycle" not in proc.stderr
    # a few edges any reader can check in the code
    assert ("- `modules/device_plugin` -> `module_utils/common/_bounds`, `module_utils/common/_bytecode_cache`, "
            "`module_utils/common/_module_run`, `module_utils/common/_waits`, `module_utils/kube/_helm`," in proc.stdout)
    assert ("- `module_utils/kube/_kube_nodes` -> `module_utils/kube/_kube`, `module_utils/kube/_kube_names`\n"
            in proc.stdout)
    assert "- `module_utils/kube/_kube` -> `module_utils/common/_input_file`, `module_utils/kube/_kubeconfig`\n" in proc.stdout
    # the packages, top layer first, each with the packages it imports
    assert "- `kube/` -> `common`\n" in proc.stdout
    assert "- `gpu/` -> `common` (inside functions: `sim`)\n" in proc.stdout
    assert proc.stdout.index("- `node/`") < proc.stdout.index("- `plan/`") < proc.stdout.index("- `common/`")
    assert "layers:" not in proc.stderr


def test_the_architecture_page_shows_exactly_the_graph_the_script_prints():
    with open(PAGE, encoding="utf-8") as handle:
        text = handle.read()
    start, end = text.index(import_graph.START), text.index(import_graph.END) + len(import_graph.END)
    assert text[start:end] == import_graph.block(import_graph.graph(ROOT)), (
        "docs/architecture.md is stale: run python scripts/import_graph.py --write docs/architecture.md")
    assert _run("--check", PAGE).returncode == 0


def _tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "plugins" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_a_cycle_is_reported_and_fails(tmp_path):
    root = _tree(tmp_path, {
        "module_utils/plan/_a.py": "from %s.plan._b import thing\n" % PKG,
        "module_utils/plan/_b.py": "from %s.plan import _c\n" % PKG,
        "module_utils/plan/_c.py": "import %s.plan._a\n" % PKG,
        "modules/m.py": "from %s.plan import _a, _c\nimport json\n" % PKG,
    })
    proc = _run("--root", root)
    assert proc.returncode == 1
    assert "import cycle: module_utils/plan/_a <-> module_utils/plan/_b <-> module_utils/plan/_c" in proc.stderr
    assert "- `modules/m` -> `module_utils/plan/_a`, `module_utils/plan/_c`\n" in proc.stdout
    assert "layers:" not in proc.stderr


def test_an_import_inside_a_function_is_drawn_apart_and_its_cycle_is_a_note_unless_strict(tmp_path):
    root = _tree(tmp_path, {
        "module_utils/gpu/_iface.py": "def backend():\n    from %s.gpu._impl import Impl\n    return Impl()\n" % PKG,
        "module_utils/gpu/_impl.py": "from %s.gpu._iface import backend\n" % PKG,
    })
    proc = _run("--root", root)
    assert proc.returncode == 0, proc.stderr
    assert "- `module_utils/gpu/_iface` -> (none) (inside functions: `module_utils/gpu/_impl`)" in proc.stdout
    assert "note: cycle through imports inside functions" in proc.stderr
    assert _run("--root", root, "--strict").returncode == 1


def test_write_replaces_only_the_marked_block(tmp_path):
    root = _tree(tmp_path, {"module_utils/common/_a.py": "", "modules/m.py": "from %s.common import _a\n" % PKG})
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n%s\nold\n%s\n\nafter\n" % (import_graph.START, import_graph.END))
    assert _run("--root", root, "--check", str(page)).returncode == 1
    assert _run("--root", root, "--write", str(page)).returncode == 0
    text = page.read_text()
    assert text.startswith("# Title\n\n") and text.endswith("\n\nafter\n") and "old" not in text
    assert "- `modules/m` -> `module_utils/common/_a`" in text
    assert "- `common/` -> (none)" in text
    assert _run("--root", root, "--check", str(page)).returncode == 0


def test_a_page_without_markers_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("no markers\n")
    proc = _run("--write", str(page))
    assert proc.returncode != 0 and "markers" in proc.stderr


@pytest.mark.parametrize("source", ["import os\n", "from ansible.module_utils.basic import AnsibleModule\n"])
def test_imports_from_outside_the_collection_are_not_edges(tmp_path, source):
    root = _tree(tmp_path, {"modules/m.py": source})
    assert import_graph.graph(root) == {"modules/m": {}}


def test_the_layer_rules_point_down_and_name_every_package():
    assert import_graph.rule_problems() == []
    order = list(import_graph.LAYERS)
    assert sorted(import_graph.ALLOWED) == sorted(order)
    # whatever ALLOWED lets a package import is below it, so the packages cannot form a cycle at import time
    assert all(order.index(t) > order.index(p) for p, targets in import_graph.ALLOWED.items() for t in targets)


def test_a_rule_that_points_up_is_refused(monkeypatch):
    monkeypatch.setitem(import_graph.ALLOWED, "gpu", ("common", "node"))
    assert import_graph.rule_problems() == ["ALLOWED lets gpu import node, which is not below it in LAYERS"]


def test_an_import_the_layers_do_not_allow_fails(tmp_path):
    # kube is below plan: a Kubernetes file that imports a planner breaks the layers, at import time or later
    root = _tree(tmp_path, {
        "module_utils/plan/_p.py": "",
        "module_utils/kube/_k.py": "from %s.plan._p import thing\n" % PKG,
        "module_utils/kube/_l.py": "def later():\n    from %s.plan import _p\n" % PKG,
    })
    proc = _run("--root", root)
    assert proc.returncode == 1
    assert ("layers: module_utils/kube/_k imports module_utils/plan/_p: package kube may import only common"
            in proc.stderr)
    assert "layers: module_utils/kube/_l imports module_utils/plan/_p (inside a function)" in proc.stderr
    assert "- `kube/` -> `plan`\n" in proc.stdout


def test_the_backend_choice_may_point_up_only_inside_a_function(tmp_path):
    files = {"module_utils/sim/_simulator.py": "from %s.gpu import _gpu\n" % PKG, "module_utils/gpu/_gpu.py": ""}
    inside = dict(files, **{"module_utils/gpu/_backend.py": "def get():\n    from %s.sim import _simulator\n" % PKG})
    proc = _run("--root", _tree(tmp_path / "inside", inside))
    assert proc.returncode == 0, proc.stderr
    assert "- `gpu/` -> (none) (inside functions: `sim`)\n" in proc.stdout
    at_import = dict(files, **{"module_utils/gpu/_backend.py": "from %s.sim import _simulator\n" % PKG})
    proc = _run("--root", _tree(tmp_path / "at_import", at_import))
    assert proc.returncode == 1
    assert ("layers: module_utils/gpu/_backend imports module_utils/sim/_simulator: package gpu may import only common"
            in proc.stderr)


@pytest.mark.parametrize("files, says", [
    ({"module_utils/_flat.py": ""}, "module_utils/_flat is not in a package of module_utils' layers"),
    ({"module_utils/extra/_x.py": ""}, "module_utils/extra/_x is not in a package of module_utils' layers"),
    ({"modules/m.py": "", "module_utils/node/_n.py": "from %s import m\n" % PKG.replace("module_utils", "modules")},
     "module_utils/node/_n imports modules/m: module_utils imports no module, filter or action plugin"),
])
def test_a_file_outside_the_packages_or_an_import_of_a_plugin_fails(tmp_path, files, says):
    proc = _run("--root", _tree(tmp_path, files))
    assert proc.returncode == 1
    assert "layers: " + says in proc.stderr


def test_the_architecture_page_draws_the_packages_of_the_layers_in_their_order():
    with open(PAGE, encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index("## Layers\n"):text.index("## Who imports whom\n")]
    tree = section[section.index("   plugins/module_utils/\n"):]
    tree = tree[:tree.index("```")]
    drawn = [line.split()[0].rstrip("/") for line in tree.splitlines()[1:] if line.strip()]
    assert drawn == list(import_graph.LAYERS), "docs/architecture.md's tree of module_utils is not LAYERS"
    # each package's paragraph names every file the package holds
    paragraphs = section.split("\n   - `")[1:]
    said = dict((p.split("/`", 1)[0], p) for p in paragraphs)
    for package in import_graph.LAYERS:
        files = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "module_utils", package))
                       if name.endswith(".py") and name != "__init__.py")
        unsaid = [name for name in files if "`%s`" % name not in said.get(package, "")]
        assert not unsaid, "docs/architecture.md's paragraph on %s/ does not name %s" % (package, unsaid)
