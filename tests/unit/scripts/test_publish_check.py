"""scripts/publish_check.py: which galaxy-importer output fails the publishing check, and the role READMEs the
importer requires."""
import glob
import importlib.util
import os

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("publish_check", os.path.join(ROOT, "scripts", "publish_check.py"))
publish_check = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(publish_check)

# Lines galaxy-importer 0.4.44 printed for this collection before the fixes of issue 26 (with "Loading ..." lines
# left out), and after them.
BEFORE_READMES = """Importing with galaxy-importer 0.4.44
Getting doc strings via ansible-doc
Loading module_utils _simulator_state
Loading playbook site.yml
Loading role cluster
ERROR: The import failed for the following reason: No role readme found.
"""
LINT_WARNINGS = """Importing with galaxy-importer 0.4.44
Getting doc strings via ansible-doc
Finding content inside collection
Linting collection via ansible-lint 26.10.1...
WARNING: ERROR    Failed to find gpuops.nvidia.site playbook.
...ansible-lint run complete
WARNING: Ignore files skip ansible-test sanity tests, found ignore-2.19.txt with 6 statement(s)
Collection loading complete
Importer processing completed successfully
"""
CLEAN = """Importing with galaxy-importer 0.4.44
Getting doc strings via ansible-doc
Finding content inside collection
Linting collection via ansible-lint 26.10.1...
...ansible-lint run complete
Collection loading complete
Importer processing completed successfully
"""


def test_an_import_error_fails_with_its_line_and_the_missing_success_line():
    problems = publish_check.importer_problems(BEFORE_READMES, 1)
    assert problems == ["ERROR: The import failed for the following reason: No role readme found.",
                        "galaxy-importer exited with status 1",
                        "galaxy-importer did not print 'Importer processing completed successfully'"]


def test_warnings_fail_even_when_the_import_succeeds():
    problems = publish_check.importer_problems(LINT_WARNINGS, 0)
    assert problems == ["WARNING: ERROR    Failed to find gpuops.nvidia.site playbook.",
                        "WARNING: Ignore files skip ansible-test sanity tests, found ignore-2.19.txt with 6 statement(s)"]


def test_a_clean_import_passes():
    assert publish_check.importer_problems(CLEAN, 0) == []


def test_every_role_has_a_readme_that_points_at_its_argument_specs():
    roles = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "roles", "*", "tasks")))
    assert {"gpu_node", "mig", "container_toolkit"} <= set(roles)   # found at all (every role is then checked)
    for role in roles:
        path = os.path.join(ROOT, "roles", role, "README.md")
        assert os.path.exists(path), "roles/%s has no README.md (Galaxy's importer refuses the collection)" % role
        with open(path) as f:
            text = f.read()
        assert text.startswith("# gpuops.nvidia.%s\n" % role)
        assert "ansible-doc -t role gpuops.nvidia.%s" % role in text
        assert "(meta/argument_specs.yml)" in text and "## Example" in text


def test_usage():
    assert publish_check.main([]) == 2
    assert publish_check.main(["publish"]) == 2


def test_the_importers_lint_step_fails_on_what_the_importer_would_warn_about():
    # the importer logs every line ansible-lint prints on stdout as a WARNING, an error line of stderr too
    stdout = "roles/mig/tasks/main.yml:3: name[casing]: All names should start with an uppercase letter.\n\n"
    stderr = "WARNING  Listing 1 violation(s)\nERROR    Failed to find gpuops.nvidia.site playbook.\n"
    assert publish_check.lint_problems(stdout, stderr) == [
        "WARNING: roles/mig/tasks/main.yml:3: name[casing]: All names should start with an uppercase letter.",
        "WARNING: ERROR    Failed to find gpuops.nvidia.site playbook."]
    crash = "Traceback (most recent call last):\n  File x\nKeyError: 'y'\n"
    assert publish_check.lint_problems("", crash)[-1].startswith("ERROR: ansible-lint crashed:")
    assert publish_check.lint_problems("", "INFO     Identified /x as project root\n") == []


def test_the_tools_temporary_files_go_to_a_folder_removed_at_the_end(monkeypatch, tmp_path):
    """rstcheck (the docs lint) leaves a temporary file per code block it checks: the tools' TMPDIR is a folder of the
    run's own under build/, removed when the run ends, whether it passed or failed."""
    seen = []

    def tool(env):
        assert os.path.dirname(env["TMPDIR"]) == str(tmp_path)
        with open(os.path.join(env["TMPDIR"], "tmpleft.bash"), "w") as handle:   # what rstcheck leaves
            handle.write("echo left\n")
        seen.append(env["TMPDIR"])

    def failing(env):
        tool(env)
        raise publish_check.CheckFailed("planted")

    monkeypatch.setattr(publish_check, "BUILD", str(tmp_path))
    monkeypatch.setattr(publish_check, "TOOLS", str(tmp_path))
    (tmp_path / "antsibull-docs").write_text("")
    monkeypatch.setattr(publish_check, "check_guides", lambda: None)
    monkeypatch.setattr(publish_check, "check_importer", tool)
    monkeypatch.setattr(publish_check, "check_docs_lint", tool)
    monkeypatch.setattr(publish_check, "build_docs", tool)
    assert publish_check.main(["check"]) == 0
    monkeypatch.setattr(publish_check, "build_docs", failing)
    assert publish_check.main(["docs"]) == 1
    assert len(seen) == 4 and len(set(seen[:3])) == 1 and seen[3] != seen[0]   # one folder a run
    assert not any(os.path.exists(folder) for folder in seen)
    assert sorted(os.listdir(str(tmp_path))) == ["antsibull-docs"]
