"""The guides (docs/*.md) in the documentation site beside the module reference, as antsibull-docs' extra docs.

    python scripts/docsite_guides.py write   # after editing a guide: docs/docsite/rst/<guide>.rst from docs/<guide>.md
    python scripts/docsite_guides.py check   # exit 1 when a guide and its docsite copy differ (`make publish-check`)

The Markdown in docs/ is the one source of a guide: it is what the README links to and what a repository's web page
shows. antsibull-docs takes a collection's extra docs only as reStructuredText in docs/docsite/rst/, named in
docs/docsite/extra-docs.yml (the layout community.docker and kubernetes.core publish theirs with), and those files
travel in the collection's artifact, so the RST copies are committed, written by this script and never by hand.

docs/docsite/extra-docs.yml says which guides are in the site, under which section, in which order; every other
docs/*.md must be named in NOT_IN_SITE with the reason. The conversion is pandoc's (the binary that the PyPI package
pypandoc-binary ships, pinned in requirements-dev.txt: another pandoc writes other RST, so the version is checked),
GitHub-flavoured Markdown to pandoc's document tree, then to RST, with the tree changed in between where the site
differs from the repository:

- every heading gets a label, ansible_collections.gpuops.nvidia.docsite.<guide>.<its GitHub anchor>, and each page's
  first heading ansible_collections.gpuops.nvidia.docsite.<guide> too (antsibull-docs' required label prefix);
- a link to a guide in the site (`mig.md`, `sharing.md#device-plugin-or-dra`, `#a-heading`) becomes a :ref: to that
  label, so that Sphinx (nitpicky, warnings as errors) fails on an anchor that no heading has;
- a link to a role's README becomes the role's page (:ansplugin:), to a module's source the module's page;
- a link or image to any other file of the repository (a reading, the README, a guide left out of the site) becomes
  the file's path in the collection, as code: the site has no copy of it, the collection's artifact has;
- raw HTML (`<node>` written in prose) is kept as text: pandoc's RST writer would drop it.
"""
import json
import os
import posixpath
import re
import subprocess
import sys
import unicodedata

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
DOCSITE = os.path.join(DOCS, "docsite")
RST_DIR = os.path.join(DOCSITE, "rst")
EXTRA_DOCS = os.path.join(DOCSITE, "extra-docs.yml")
COLLECTION = "gpuops.nvidia"
LABEL_PREFIX = "ansible_collections.%s.docsite." % COLLECTION
# pypandoc-binary 1.17 ships pandoc 3.9 (requirements-dev.txt): the committed RST is this pandoc's output
PANDOC_VERSION = "3.9"
COLUMNS = "120"

# docs/*.md that are not in the site, and why
NOT_IN_SITE = {
    "architecture.md": "the developers' map of the code (layers, imports, where a new step goes), not a guide to "
                       "using the collection; its import graph is generated into the Markdown by scripts/import_graph.py",
}

HEADER = (".. Generated from docs/{name} by scripts/docsite_guides.py: edit the Markdown, then run\n"
          "   `python scripts/docsite_guides.py write`. `make publish-check` fails while the two differ.\n\n")


class GuideError(Exception):
    pass


def pandoc_path():
    """The pandoc that pypandoc-binary ships (not one on PATH: another version writes other RST)."""
    try:
        import pypandoc  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise GuideError("the Python package pypandoc-binary is not installed: run `make setup-dev` "
                         "(requirements-dev.txt)") from None
    path = os.path.join(os.path.dirname(os.path.realpath(pypandoc.__file__)), "files", "pandoc")
    if not os.access(path, os.X_OK):
        raise GuideError("%s has no pandoc: install pypandoc-binary (requirements-dev.txt), not pypandoc" % path)
    version = subprocess.run([path, "--version"], stdout=subprocess.PIPE, universal_newlines=True,
                             check=True).stdout.split("\n", 1)[0].split()[-1]
    if version != PANDOC_VERSION:
        raise GuideError("pandoc %s found; the docsite copies are written with pandoc %s (pypandoc-binary in "
                         "requirements-dev.txt): install that version, or change both together"
                         % (version, PANDOC_VERSION))
    return path


def pandoc(path, text, source, target):
    proc = subprocess.run([path, "--from", source, "--to", target, "--columns", COLUMNS, "--wrap", "preserve"],
                          input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    if proc.returncode != 0:
        raise GuideError("pandoc --from %s --to %s: status %d: %s" % (source, target, proc.returncode, proc.stderr))
    return proc.stdout


# -- which guides ------------------------------------------------------------------------------------------------

def site_guides(index_path=EXTRA_DOCS):
    """The guides extra-docs.yml puts in the site, in its order: each toctree ref names docs/<ref>.md."""
    with open(index_path, encoding="utf-8") as handle:
        index = yaml.safe_load(handle) or {}
    guides = []
    for section in index.get("sections") or []:
        for entry in section.get("toctree") or []:
            ref = entry["ref"] if isinstance(entry, dict) else entry
            guides.append(ref)
    return guides


def guide_problems(guides, markdown_names, not_in_site=None):
    """What is wrong with the site's list of guides against the Markdown files of docs/."""
    not_in_site = NOT_IN_SITE if not_in_site is None else not_in_site
    problems = []
    for ref in sorted(set(guides), key=guides.index):
        if guides.count(ref) > 1:
            problems.append("%s is named %d times in docs/docsite/extra-docs.yml" % (ref, guides.count(ref)))
        if ref + ".md" not in markdown_names:
            problems.append("docs/docsite/extra-docs.yml names %s, but there is no docs/%s.md" % (ref, ref))
        if ref + ".md" in not_in_site:
            problems.append("docs/%s.md is both in docs/docsite/extra-docs.yml and in NOT_IN_SITE" % ref)
    for name in sorted(markdown_names):
        if name[:-3] not in guides and name not in not_in_site:
            problems.append("docs/%s is neither in a section of docs/docsite/extra-docs.yml nor in NOT_IN_SITE of "
                            "scripts/docsite_guides.py (with the reason it is not in the site)" % name)
    return problems


# -- the tree between the two pandoc runs ------------------------------------------------------------------------

def page_label(guide):
    return LABEL_PREFIX + guide.replace("-", "_")


def section_label(guide, anchor):
    return "%s.%s" % (page_label(guide), anchor)


def stringify(inlines):
    """The plain text of pandoc inlines (a :ref:'s title cannot hold markup)."""
    out = []
    for node in inlines:
        kind, content = node["t"], node.get("c")
        if kind == "Str":
            out.append(content)
        elif kind in ("Space", "SoftBreak", "LineBreak"):
            out.append(" ")
        elif kind in ("Code", "Math", "RawInline"):
            out.append(content[1])
        elif kind in ("Emph", "Strong", "Strikeout", "Underline", "SmallCaps", "Superscript", "Subscript"):
            out.append(stringify(content))
        elif kind in ("Link", "Image", "Span"):
            out.append(stringify(content[1]))
        elif kind == "Quoted":
            out.append(stringify(content[1]))
    return "".join(out)


def rst_role(role, title, target):
    """`:role:`title <target>``, the title escaped for RST."""
    title = re.sub(r"([\\`<])", r"\\\1", title.strip())
    return ":%s:`%s <%s>`" % (role, title, target) if title else ":%s:`%s`" % (role, target)


def code(text):
    return {"t": "Code", "c": [["", [], []], text]}


def raw_rst(text):
    return {"t": "RawInline", "c": ["rst", text]}


class Converter:
    """Rewrites one guide's pandoc tree for the site (see the module's docstring)."""

    def __init__(self, guide, guides, roles, modules):
        self.guide = guide
        self.guides = set(guides)
        self.roles = set(roles)
        self.modules = set(modules)

    def target(self, url, title):
        """The inline (a raw RST role, or None to keep the link) for a link to ``url`` with the text ``title``."""
        if re.match(r"^[a-z][a-z0-9+.-]*:", url):                    # https:, mailto:
            return None
        path, anchor = (url.split("#", 1) + [""])[:2]
        if title.strip() in (url, path, posixpath.basename(path)):
            title = ""                                  # "see health.md": the page's or the section's own title
        if not path:
            return raw_rst(rst_role("ref", title, section_label(self.guide, anchor)))
        repo_path = posixpath.normpath(posixpath.join("docs", path))
        name = posixpath.basename(repo_path)
        if posixpath.dirname(repo_path) == "docs" and name.endswith(".md") and name[:-3] in self.guides:
            label = section_label(name[:-3], anchor) if anchor else page_label(name[:-3])
            return raw_rst(rst_role("ref", title, label))
        match = re.match(r"^roles/([a-z0-9_]+)/README\.md$", repo_path)
        if match and match.group(1) in self.roles and not anchor:
            return raw_rst(rst_role("ansplugin", title, "%s.%s#role" % (COLLECTION, match.group(1))))
        match = re.match(r"^plugins/modules/([a-z0-9_]+)\.py$", repo_path)
        if match and match.group(1) in self.modules:
            return raw_rst(rst_role("ansplugin", title, "%s.%s#module" % (COLLECTION, match.group(1))))
        if repo_path.startswith("../"):
            raise GuideError("docs/%s.md links to %s, outside the repository" % (self.guide, url))
        return repo_path

    def inlines(self, nodes):
        out = []
        for node in nodes:
            kind = node["t"]
            if kind in ("Link", "Image"):
                _attr, text, (url, _title) = node["c"]
                title = stringify(text)
                replacement = self.target(url, title)
                if replacement is None:
                    node["c"][1] = self.inlines(text)
                    out.append(node)
                elif isinstance(replacement, dict):
                    out.append(replacement)
                else:                                  # a file of the repository: its path as code
                    if title.strip("`") in (url, replacement, posixpath.basename(replacement)) or kind == "Image":
                        if kind == "Image" and title:
                            out.extend([{"t": "Str", "c": title + ":"}, {"t": "Space"}])
                        out.append(code(replacement))
                    else:
                        out.extend(self.inlines(text) + [{"t": "Space"}, {"t": "Str", "c": "("}, code(replacement),
                                                         {"t": "Str", "c": ")"}])
            elif kind == "RawInline" and node["c"][0] == "html":
                out.append({"t": "Str", "c": node["c"][1]})
            else:
                self.walk(node)
                out.append(node)
        return separate_raw(out)

    def blocks(self, nodes):
        out = []
        first_heading = True
        for node in nodes:
            kind = node["t"]
            if kind == "Header":
                level, (anchor, classes, attrs), text = node["c"]
                if first_heading and level == 1:
                    out.append({"t": "RawBlock", "c": ["rst", ".. _%s:" % page_label(self.guide)]})
                first_heading = False
                # pandoc's RST writer writes a heading's identifier as the label before it
                node["c"] = [level, [section_label(self.guide, anchor), classes, attrs], self.inlines(text)]
                out.append(node)
            elif kind == "RawBlock" and node["c"][0] == "html":
                if node["c"][1].lstrip().startswith("<!--"):
                    continue                           # an HTML comment: not shown on GitHub either
                out.append({"t": "Para", "c": [{"t": "Str", "c": node["c"][1].strip()}]})
            else:
                self.walk(node)
                out.append(node)
        return out

    def walk(self, node):
        """Rewrite the inlines and blocks inside ``node`` (lists, tables, quotes, ...), whatever holds them."""
        content = node.get("c") if isinstance(node, dict) else None
        if content is None:
            return
        node["c"] = self._walk_value(content)

    def _walk_value(self, value):
        if isinstance(value, list):
            if value and all(isinstance(item, dict) and "t" in item for item in value):
                if any(item["t"] in INLINE_KINDS for item in value):
                    return self.inlines(value)
                return self.blocks(value)
            return [self._walk_value(item) for item in value]
        if isinstance(value, dict) and "t" in value:
            self.walk(value)
        return value


INLINE_KINDS = {"Str", "Emph", "Underline", "Strong", "Strikeout", "Superscript", "Subscript", "SmallCaps", "Quoted",
                "Cite", "Code", "Space", "SoftBreak", "LineBreak", "Math", "RawInline", "Link", "Image", "Note",
                "Span"}


def _starts_ok(char):
    """Whether an inline role may follow ``char`` (docutils' inline markup recognition rules)."""
    return char.isspace() or char in "-:/'\"<([{" or unicodedata.category(char) in ("Pd", "Po", "Ps", "Pi", "Pf")


def _ends_ok(char):
    """Whether ``char`` may follow an inline role."""
    return char.isspace() or char in "-.,:;!?\\/'\")]}>" or unicodedata.category(char) in ("Pd", "Po", "Pe", "Pi", "Pf")


def separate_raw(inlines):
    """An escaped space (`\\ `, nothing in the output) between a raw role and a word that touches it: RST sees a role
    only with a space or punctuation on either side."""
    out = []
    for index, node in enumerate(inlines):
        if node["t"] == "RawInline" and node["c"][0] == "rst":
            before = inlines[index - 1] if index else None
            after = inlines[index + 1] if index + 1 < len(inlines) else None
            text = node["c"][1]
            if before is not None and before["t"] == "Str" and not _starts_ok(before["c"][-1]):
                text = "\\ " + text
            if after is not None and after["t"] == "Str" and not _ends_ok(after["c"][0]):
                text = text + "\\ "
            node = raw_rst(text)
        out.append(node)
    return out


def convert(guide, markdown, guides, roles, modules, pandoc_bin):
    """docs/<guide>.md's text as its docsite RST."""
    tree = json.loads(pandoc(pandoc_bin, markdown, "gfm", "json"))
    tree["blocks"] = Converter(guide, guides, roles, modules).blocks(tree["blocks"])
    rst = pandoc(pandoc_bin, json.dumps(tree), "json", "rst")
    return HEADER.format(name=guide + ".md") + rst


# -- the commands ------------------------------------------------------------------------------------------------

def collection_names():
    roles = sorted(name for name in os.listdir(os.path.join(ROOT, "roles"))
                   if os.path.exists(os.path.join(ROOT, "roles", name, "meta", "argument_specs.yml")))
    modules = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                     if name.endswith(".py") and not name.startswith("_"))
    return roles, modules


def expected(pandoc_bin):
    """{rst file name: its text} for every guide of the site; GuideError when the list of guides is wrong."""
    guides = site_guides()
    markdown_names = [name for name in os.listdir(DOCS) if name.endswith(".md")]
    problems = guide_problems(guides, markdown_names)
    if problems:
        raise GuideError("\n  ".join(["the site's guides:"] + problems))
    roles, modules = collection_names()
    result = {}
    for guide in guides:
        with open(os.path.join(DOCS, guide + ".md"), encoding="utf-8") as handle:
            result[guide + ".rst"] = convert(guide, handle.read(), guides, roles, modules, pandoc_bin)
    return result


def present():
    if not os.path.isdir(RST_DIR):
        return {}
    out = {}
    for name in sorted(os.listdir(RST_DIR)):
        with open(os.path.join(RST_DIR, name), encoding="utf-8") as handle:
            out[name] = handle.read()
    return out


def differences(want, have):
    """One line per docsite file that is missing, stale or left over."""
    lines = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            lines.append("docs/docsite/rst/%s is missing (docs/%s.md is in extra-docs.yml)" % (name, name[:-4]))
        elif name not in want:
            lines.append("docs/docsite/rst/%s has no guide in extra-docs.yml: remove it" % name)
        elif want[name] != have[name]:
            lines.append("docs/docsite/rst/%s differs from docs/%s.md converted" % (name, name[:-4]))
    return lines


def main(argv):
    if len(argv) != 1 or argv[0] not in ("write", "check"):
        sys.stderr.write("usage: python scripts/docsite_guides.py write|check\n")
        return 2
    try:
        want = expected(pandoc_path())
    except GuideError as exc:
        sys.stderr.write("docsite-guides: %s\n" % exc)
        return 1
    have = present()
    lines = differences(want, have)
    if argv[0] == "check":
        if lines:
            sys.stderr.write("docsite-guides: the docsite copies of the guides are not the guides:\n  %s\n"
                             "run `python scripts/docsite_guides.py write` and commit docs/docsite/rst/\n"
                             % "\n  ".join(lines))
            return 1
        print("docsite-guides: %d guides, each docs/docsite/rst/ copy is its Markdown converted" % len(want))
        return 0
    os.makedirs(RST_DIR, exist_ok=True)
    for name in have:
        if name not in want:
            os.remove(os.path.join(RST_DIR, name))
    for name, text in want.items():
        if have.get(name) != text:
            with open(os.path.join(RST_DIR, name), "w", encoding="utf-8") as handle:
                handle.write(text)
    print("docsite-guides: %d guides written to docs/docsite/rst/ (%d changed)" % (len(want), len(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
