"""docs/readings/README.md is the index of the readings (issue 48 item 4): every file of docs/readings/ is on one of
its lines, and every file it links to is there, so a reading added without its line, or removed without its line
going, fails."""
import os
import re

from tests.support.ansible_run import ROOT

READINGS = os.path.join(ROOT, "docs", "readings")


def index_text():
    with open(os.path.join(READINGS, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def linked(text):
    """The relative file links of a Markdown text, without their anchors."""
    return {target.split("#", 1)[0] for target in re.findall(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"^[a-z]+:", target) and not target.startswith("#")}


def test_the_index_links_every_reading():
    names = sorted(name for name in os.listdir(READINGS) if name != "README.md")
    missing = [name for name in names if name not in linked(index_text())]
    assert names and missing == [], "docs/readings/README.md has no line linking %s" % ", ".join(missing)


def test_every_link_of_the_index_names_a_reading_that_is_there():
    dangling = sorted(name for name in linked(index_text()) if not os.path.isfile(os.path.join(READINGS, name)))
    assert dangling == [], "docs/readings/README.md links to %s, not in docs/readings/" % ", ".join(dangling)


def test_linked_reads_relative_links_only():
    text = "[a](a.md), [b](b.json#x), [web](https://example.com/c.md), [here](#superseded-readings), `d.md`"
    assert linked(text) == {"a.md", "b.json"}
