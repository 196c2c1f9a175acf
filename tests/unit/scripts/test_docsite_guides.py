"""scripts/docsite_guides.py (issue 48 item 4): the guides' Markdown becomes the docs site's RST with the links a
reader can follow there, a guide left out of the site without a reason fails, and a docsite copy that is not its
guide converted is found (`make publish-check` runs the check on the real files)."""
import importlib.util
import os
import subprocess
import sys

import pytest

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("docsite_guides", os.path.join(ROOT, "scripts", "docsite_guides.py"))
docsite_guides = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(docsite_guides)

GUIDES = ["mig", "sharing", "sharing-mps"]
ROLES = ["mig", "gpu_node"]
MODULES = ["gpu_info"]
PREFIX = "ansible_collections.gpuops.nvidia.docsite."


@pytest.fixture(scope="module")
def pandoc():
    return docsite_guides.pandoc_path()


def convert(pandoc, markdown, guide="mig"):
    return docsite_guides.convert(guide, markdown, GUIDES, ROLES, MODULES, pandoc)


def test_headings_get_labels_with_antsibull_docs_prefix(pandoc):
    rst = convert(pandoc, "# MIG with gpuops.nvidia\n\ntext\n\n## A layout, and its `name`\n\nmore\n")
    lines = rst.splitlines()
    first = lines.index("MIG with gpuops.nvidia")
    assert lines[first - 3:first] == [".. _%smig:" % PREFIX, ".. _%smig.mig-with-gpuopsnvidia:" % PREFIX, ""]
    second = lines.index("A layout, and its ``name``")
    assert lines[second - 2:second] == [".. _%smig.a-layout-and-its-name:" % PREFIX, ""]
    assert rst.startswith(".. Generated from docs/mig.md by scripts/docsite_guides.py")
    # every label carries the prefix antsibull-docs requires of an extra doc's labels
    labels = [line for line in lines if line.startswith(".. _")]
    assert len(labels) == 3 and all(label.startswith(".. _" + PREFIX) for label in labels)


def test_links_to_guides_become_refs_with_the_page_or_section_title(pandoc):
    rst = convert(pandoc, "See [sharing.md](sharing.md), [the MPS limits](sharing-mps.md#limits), "
                          "[below](#a-heading) and [mig.md](mig.md#a-heading).\n", guide="sharing")
    assert ":ref:`%ssharing`," % PREFIX in rst                          # the file name: the page's own title
    assert ":ref:`the MPS limits <%ssharing_mps.limits>`" % PREFIX in rst
    assert ":ref:`below <%ssharing.a-heading>`" % PREFIX in rst
    assert ":ref:`%smig.a-heading`." % PREFIX in rst


def test_links_to_roles_and_modules_become_their_reference_pages(pandoc):
    rst = convert(pandoc, "The [mig role](../roles/mig/README.md) and [gpu_info](../plugins/modules/gpu_info.py); "
                          "[a role without a page](../roles/nothing/README.md).\n")
    assert ":ansplugin:`mig role <gpuops.nvidia.mig#role>`" in rst
    assert ":ansplugin:`gpu_info <gpuops.nvidia.gpu_info#module>`" in rst
    assert "a role without a page (``roles/nothing/README.md``)" in rst


def test_other_files_become_their_path_in_the_collection(pandoc):
    rst = convert(pandoc, "Measured: [readings/chart-flow-2cores.md](readings/chart-flow-2cores.md), "
                          "[the plan](readings/h200-plan.json), [README](../README.md), "
                          "[architecture.md](architecture.md#layers).\n\n"
                          "![growth with nodes](readings/fleet-site-2cores.svg)\n")
    assert "Measured: ``docs/readings/chart-flow-2cores.md``, the plan (``docs/readings/h200-plan.json``), " \
           "README (``README.md``), ``docs/architecture.md``." in rst
    assert "growth with nodes: ``docs/readings/fleet-site-2cores.svg``" in rst
    assert "`__" not in rst                                              # no link left that the site cannot follow


def test_web_links_stay_links(pandoc):
    rst = convert(pandoc, "See [NVIDIA's guide](https://docs.nvidia.com/x.html).\n")
    assert "`NVIDIA's guide <https://docs.nvidia.com/x.html>`__" in rst


def test_raw_html_in_prose_is_kept_as_text(pandoc):
    rst = convert(pandoc, "Each node's root is lab-state/<node> here.\n\n<!-- a comment -->\n")
    assert "lab-state/<node> here." in rst
    assert "a comment" not in rst


def test_a_ref_touching_a_word_is_separated_by_an_escaped_space(pandoc):
    rst = convert(pandoc, "the [MIG](mig.md)s and x[MIG](mig.md)\n", guide="sharing")
    assert "the :ref:`MIG <%smig>`\\ s and x\\ :ref:`MIG <%smig>`" % (PREFIX, PREFIX) in rst


def test_a_link_outside_the_repository_is_refused(pandoc):
    with pytest.raises(docsite_guides.GuideError, match="outside the repository"):
        convert(pandoc, "[x](../../shared/reference/mig.md)\n")


def test_guide_problems_name_each_guide_out_of_place():
    names = ["mig.md", "sharing.md", "architecture.md", "new-guide.md"]
    problems = docsite_guides.guide_problems(["mig", "sharing", "mig", "gone"], names,
                                             not_in_site={"architecture.md": "developers"})
    assert problems == [
        "mig is named 2 times in docs/docsite/extra-docs.yml",
        "docs/docsite/extra-docs.yml names gone, but there is no docs/gone.md",
        "docs/new-guide.md is neither in a section of docs/docsite/extra-docs.yml nor in NOT_IN_SITE of "
        "scripts/docsite_guides.py (with the reason it is not in the site)",
    ]
    assert docsite_guides.guide_problems(["mig", "sharing"], names[:3],
                                         not_in_site={"architecture.md": "developers"}) == []


def test_the_repository_lists_every_guide_once():
    """Every docs/*.md is in docs/docsite/extra-docs.yml or left out with a reason."""
    names = [name for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")]
    assert docsite_guides.guide_problems(docsite_guides.site_guides(), names) == []


def test_differences_name_missing_stale_and_left_over_copies():
    want = {"mig.rst": "a", "sharing.rst": "b", "dra.rst": "c"}
    have = {"mig.rst": "a", "sharing.rst": "old", "gone.rst": "d"}
    assert docsite_guides.differences(want, have) == [
        "docs/docsite/rst/dra.rst is missing (docs/dra.md is in extra-docs.yml)",
        "docs/docsite/rst/gone.rst has no guide in extra-docs.yml: remove it",
        "docs/docsite/rst/sharing.rst differs from docs/sharing.md converted",
    ]
    assert docsite_guides.differences(want, dict(want)) == []


def test_check_fails_on_a_stale_copy_and_write_mends_it(tmp_path, pandoc):
    """The command on a copy of docs/: an edited guide fails `check` until `write` has run."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "docs" / "docsite").mkdir(parents=True)
    for name in ("roles", "plugins/modules"):
        (root / name).mkdir(parents=True)
    (root / "scripts" / "docsite_guides.py").write_text(
        open(os.path.join(ROOT, "scripts", "docsite_guides.py"), encoding="utf-8").read())
    (root / "docs" / "docsite" / "extra-docs.yml").write_text("sections:\n  - title: Guides\n    toctree:\n      - mig\n")
    (root / "docs" / "mig.md").write_text("# MIG\n\nOne.\n")
    (root / "docs" / "architecture.md").write_text("# Architecture\n")

    def run(command):
        return subprocess.run([sys.executable, str(root / "scripts" / "docsite_guides.py"), command],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)

    first = run("check")
    assert first.returncode == 1 and "docs/docsite/rst/mig.rst is missing" in first.stdout
    assert run("write").returncode == 0
    assert "One." in (root / "docs" / "docsite" / "rst" / "mig.rst").read_text()
    assert run("check").returncode == 0

    (root / "docs" / "mig.md").write_text("# MIG\n\nTwo.\n")
    stale = run("check")
    assert stale.returncode == 1 and "docs/docsite/rst/mig.rst differs from docs/mig.md converted" in stale.stdout
    assert "One." in (root / "docs" / "docsite" / "rst" / "mig.rst").read_text()     # check changes nothing
    assert run("write").returncode == 0 and run("check").returncode == 0
    assert "Two." in (root / "docs" / "docsite" / "rst" / "mig.rst").read_text()

    (root / "docs" / "dra.md").write_text("# DRA\n")
    unlisted = run("check")
    assert unlisted.returncode == 1 and "docs/dra.md is neither in a section" in unlisted.stdout
