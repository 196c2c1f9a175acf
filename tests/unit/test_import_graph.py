"""scripts/import_graph.py: the collection's own import graph, read from the code, has no cycle at import time, and
docs/architecture.md shows exactly that graph."""
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
            "`module_utils/common/_module_run`, `module_utils/kube/_helm`," in proc.stdout)
    assert ("- `module_utils/kube/_kube_nodes` -> `module_utils/kube/_kube`, `module_utils/kube/_kube_names`\n"
            in proc.stdout)
    assert "- `module_utils/kube/_kube` -> `module_utils/common/_input_file`\n" in proc.stdout


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
        "module_utils/_a.py": "from %s._b import thing\n" % PKG,
        "module_utils/_b.py": "from %s import _c\n" % PKG,
        "module_utils/_c.py": "import %s._a\n" % PKG,
        "modules/m.py": "from %s import _a, _c\nimport json\n" % PKG,
    })
    proc = _run("--root", root)
    assert proc.returncode == 1
    assert "import cycle: module_utils/_a <-> module_utils/_b <-> module_utils/_c" in proc.stderr
    assert "- `modules/m` -> `module_utils/_a`, `module_utils/_c`\n" in proc.stdout


def test_an_import_inside_a_function_is_drawn_apart_and_its_cycle_is_a_note_unless_strict(tmp_path):
    root = _tree(tmp_path, {
        "module_utils/_iface.py": "def backend():\n    from %s._impl import Impl\n    return Impl()\n" % PKG,
        "module_utils/_impl.py": "from %s._iface import backend\n" % PKG,
    })
    proc = _run("--root", root)
    assert proc.returncode == 0, proc.stderr
    assert "- `module_utils/_iface` -> (none) (inside functions: `module_utils/_impl`)" in proc.stdout
    assert "note: cycle through imports inside functions" in proc.stderr
    assert _run("--root", root, "--strict").returncode == 1


def test_write_replaces_only_the_marked_block(tmp_path):
    root = _tree(tmp_path, {"module_utils/_a.py": "", "modules/m.py": "from %s import _a\n" % PKG})
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n%s\nold\n%s\n\nafter\n" % (import_graph.START, import_graph.END))
    assert _run("--root", root, "--check", str(page)).returncode == 1
    assert _run("--root", root, "--write", str(page)).returncode == 0
    text = page.read_text()
    assert text.startswith("# Title\n\n") and text.endswith("\n\nafter\n") and "old" not in text
    assert "- `modules/m` -> `module_utils/_a`" in text
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
