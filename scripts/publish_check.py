"""Publishing checks of the collection: what Galaxy and the Ansible docs toolchain would say about it.

    python scripts/publish_check.py check   # `make publish-check` (part of `make test`): all three below
    python scripts/publish_check.py docs    # `make docs`: the documentation site only, into build/docs/html

1. importer: `ansible-galaxy collection build`, then galaxy-importer (the checker Galaxy and Automation Hub run on
   every upload) on the artifact. Fails on an import error, and on any ERROR or WARNING line, since each names a
   problem in our content (a missing role README, an ansible-lint finding, a sanity ignore file, ...).
   The importer's ansible-lint step runs here as a step of its own (`lint_as_importer`), the same command on the same
   layout, without the importer's fixed 180 s limit: beside pytest on CI's 2 cores it ran past that limit and the
   importer reported a timeout, not a finding (CI of f2109d8).
2. docs lint: `antsibull-docs lint-collection-docs --plugin-docs`: every plugin's and role's documentation validates
   against the schemas a docs site build uses, and every cross-reference (M(), R(), O(), ...) points at something.
3. docs site: antsibull-docs writes the RST of every module, filter and role entry point and takes the guides, the
   collection's extra docs (docs/docsite/extra-docs.yml and rst/); Sphinx builds it with docs/site/conf.py, warnings
   as errors. Before it, `scripts/docsite_guides.py check`: each guide's RST copy in docs/docsite/rst/ must be its
   Markdown (docs/<guide>.md) converted, or the site would show a guide as it was (`make docs` checks that too).

The tools live in their own virtualenv, tools/publish/ (requirements-publish.txt, installed by `make setup`).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools", "publish", "bin")
BUILD = os.path.join(ROOT, "build")
SITE = os.path.join(ROOT, "docs", "site")
IMPORT_DONE = "Importer processing completed successfully"


class CheckFailed(Exception):
    pass


def importer_problems(output, returncode):
    """The lines of galaxy-importer's output that fail the check: each ERROR or WARNING line, and a missing success
    line or a non-zero exit status (said as a line of its own)."""
    problems = [line for line in output.splitlines() if line.startswith(("ERROR", "WARNING"))]
    if returncode != 0:
        problems.append("galaxy-importer exited with status %d" % returncode)
    if IMPORT_DONE not in output:
        problems.append("galaxy-importer did not print %r" % IMPORT_DONE)
    return problems


def tool_env(scratch):
    """The environment of the publishing tools: their virtualenv first on PATH (galaxy-importer runs ansible-doc and
    ansible-lint from PATH), this checkout as the collection gpuops.nvidia, and ``scratch`` as their TMPDIR: the docs
    lint's rstcheck writes each code block it checks to a temporary file that it never removes (rstcheck-core's
    checker.py, NamedTemporaryFile with delete=False; 8 files a run in /tmp), so the tools' temporary files go to a
    folder of the run's own, removed at its end (main)."""
    if not os.path.exists(os.path.join(TOOLS, "antsibull-docs")):
        raise CheckFailed("the publishing tools are not installed in %s: run `make setup`" % os.path.dirname(TOOLS))
    env = dict(os.environ)
    env["PATH"] = TOOLS + os.pathsep + env.get("PATH", "")
    env["ANSIBLE_COLLECTIONS_PATH"] = os.path.join(ROOT, ".collections")
    env["TMPDIR"] = scratch
    env.pop("VIRTUAL_ENV", None)
    return env


def run(argv, env, cwd=ROOT, capture=False):
    print("publish-check: %s" % " ".join(argv), flush=True)
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.STDOUT if capture else None, universal_newlines=True, check=False)
    return proc


# galaxy-importer 0.4.44, galaxy_importer/loaders/collection.py, CollectionLoader._lint_collection: the arguments
# it gives ansible-lint (requirements-publish.txt pins that version; compare them when it moves)
IMPORTER_LINT_ARGS = ["--profile", "production", "--exclude", "tests/integration/", "--exclude", "tests/unit/",
                      "--format=pep8", "--nocolor", "-x",
                      "yaml,var-naming,avoid-dot-notation,import-task-no-when,single-entry-point,use-loop",
                      "--offline"]


def lint_problems(stdout, stderr):
    """What the importer makes of ansible-lint's output: every stdout line is a WARNING, a stderr line starting with
    CRITICAL or ERROR too (galaxy_importer.constants.ANSIBLE_LINT_ERROR_PREFIXES), and a traceback an ERROR."""
    problems = ["WARNING: %s" % line.strip() for line in stdout.splitlines() if line.strip()]
    problems += ["WARNING: %s" % line.rstrip() for line in stderr.splitlines() if line.startswith(("CRITICAL", "ERROR"))]
    if "Traceback (most recent call last):" in stderr:
        problems.append("ERROR: ansible-lint crashed:\n%s" % stderr)
    return problems


def lint_as_importer(artifact, env):
    """galaxy-importer's ansible-lint step, run as the importer runs it: the artifact extracted under
    ansible_collections/<namespace>/<name> of its MANIFEST.json (where the importer has moved it by then), that
    ansible_collections folder as the collections path, a fresh cache, --offline (the importer's default), the same
    rules left out; no time limit."""
    # a temporary folder as the importer's, outside this checkout: ansible-lint looks upwards for the project's root
    # (a .git) and would otherwise lint the artifact as part of this repository
    with tempfile.TemporaryDirectory(prefix="gpuops-publish-lint-") as work:
        # the data filter where this Python has it (3.8.17+, 3.11.4+), as the importer extracts
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        with tarfile.open(artifact) as tar:
            info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
            extract_dir = os.path.join(work, "ansible_collections", info["namespace"], info["name"])
            os.makedirs(extract_dir)
            tar.extractall(extract_dir, **kwargs)
        tmp = os.path.join(work, "tmp")
        os.makedirs(tmp)
        lint_env = dict(env, ANSIBLE_COLLECTIONS_PATH=os.path.join(work, "ansible_collections"),
                        ANSIBLE_LOCAL_TEMP=tmp, XDG_CACHE_HOME=tmp)
        argv = [os.path.join(TOOLS, "ansible-lint")] + IMPORTER_LINT_ARGS
        print("publish-check: %s (in the importer's layout)" % " ".join(argv), flush=True)
        proc = subprocess.run(argv, env=lint_env, cwd=extract_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
    problems = lint_problems(proc.stdout, proc.stderr)
    if problems:
        raise CheckFailed("galaxy-importer's ansible-lint step on %s:\n  %s"
                          % (os.path.basename(artifact), "\n  ".join(problems)))
    print("publish-check: galaxy-importer's ansible-lint step: no findings")


def check_importer(env):
    out_dir = os.path.join(BUILD, "publish")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    built = run([os.path.join(ROOT, ".venv", "bin", "ansible-galaxy"), "collection", "build", "--force",
                 "--output-path", out_dir, "."], env)
    if built.returncode != 0:
        raise CheckFailed("ansible-galaxy collection build failed (status %d)" % built.returncode)
    artifact = glob.glob(os.path.join(out_dir, "*.tar.gz"))[0]
    # its own ansible-lint call has a fixed 180 s limit: lint_as_importer below runs that step instead
    proc = run([os.path.join(TOOLS, "python"), "-m", "galaxy_importer.main", artifact],
               dict(env, GALAXY_IMPORTER_RUN_ANSIBLE_LINT="false"), cwd=out_dir, capture=True)
    problems = importer_problems(proc.stdout, proc.returncode)
    if problems:
        sys.stdout.write(proc.stdout)
        raise CheckFailed("galaxy-importer on %s:\n  %s" % (os.path.basename(artifact), "\n  ".join(problems)))
    print("publish-check: galaxy-importer: %s, no ERROR or WARNING" % IMPORT_DONE)
    lint_as_importer(artifact, env)


def check_docs_lint(env):
    proc = run([os.path.join(TOOLS, "antsibull-docs"), "lint-collection-docs", "--plugin-docs", "."], env)
    if proc.returncode != 0:
        raise CheckFailed("antsibull-docs lint-collection-docs --plugin-docs: status %d (its findings are above)"
                          % proc.returncode)


def check_guides():
    """The guides' RST copies (docs/docsite/rst/) against their Markdown; run by this Python, whose virtualenv (.venv)
    has the converter's pandoc (pypandoc-binary, requirements-dev.txt)."""
    proc = run([sys.executable, os.path.join(ROOT, "scripts", "docsite_guides.py"), "check"], dict(os.environ))
    if proc.returncode != 0:
        raise CheckFailed("scripts/docsite_guides.py check: status %d (what differs is above)" % proc.returncode)


def build_docs(env):
    docs = os.path.join(BUILD, "docs")
    rst = os.path.join(docs, "rst")
    shutil.rmtree(docs, ignore_errors=True)
    os.makedirs(rst)
    os.chmod(rst, 0o755)   # antsibull-docs refuses a destination others can write to
    shutil.copy(os.path.join(SITE, "index.rst"), rst)
    proc = run([os.path.join(TOOLS, "antsibull-docs"), "--config-file", os.path.join(SITE, "antsibull-docs.cfg"),
                "collection", "--use-current", "--dest-dir", rst, "gpuops.nvidia"], env)
    if proc.returncode != 0:
        raise CheckFailed("antsibull-docs collection: status %d" % proc.returncode)
    html = os.path.join(docs, "html")
    proc = run([os.path.join(TOOLS, "sphinx-build"), "-b", "html", "-c", SITE, "-W", "--keep-going", "-q", rst,
                html], env)
    if proc.returncode != 0:
        raise CheckFailed("sphinx-build: status %d (warnings are errors; they are above)" % proc.returncode)
    print("publish-check: docs site in %s" % os.path.join(html, "index.html"))


def main(argv):
    if len(argv) != 1 or argv[0] not in ("check", "docs"):
        sys.stderr.write("usage: python scripts/publish_check.py check|docs\n")
        return 2
    os.makedirs(BUILD, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="publish-tmp-", dir=BUILD)
    try:
        env = tool_env(scratch)
        check_guides()
        if argv[0] == "check":
            check_importer(env)
            check_docs_lint(env)
        build_docs(env)
    except CheckFailed as exc:
        sys.stderr.write("publish-check: FAILED: %s\n" % exc)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
