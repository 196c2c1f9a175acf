"""The handlers that reload systemd after the roles' declared files are written (now one declared_files run per task)
run when they ran with the copy loops: mig's when a file with a shown diff changed (its unit among them), not on a
directory or the diff-less bundle alone; compute_mode's when its unit changed. Their conditions, as the roles' own
YAML states them, evaluated with ansible-core's templar against the module's changed_paths."""
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def condition(role, name):
    with open(os.path.join(ROOT, "roles", role, "handlers", "main.yml")) as handle:
        handlers = yaml.safe_load(handle)
    return [h for h in handlers if h["name"] == name][0]["when"]


def holds(expression, variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    # (the role's handlers file is trusted as ansible-core trusts a role's own files)
    return Templar(loader=DataLoader(), variables=variables).evaluate_conditional(trust_as_template(expression))


MIG_FILES = [
    {"path": "/usr/local/lib/gpuops", "state": "directory", "mode": "0755", "diff": True},
    {"path": "/usr/local/lib/gpuops/gpuops-mig-lib.json", "state": "file", "mode": "0644", "diff": False},
    {"path": "/usr/local/lib/gpuops/gpuops-mig-apply.py", "state": "file", "mode": "0755", "diff": True},
    {"path": "/etc/systemd/system/gpuops-mig.service", "state": "file", "mode": "0644", "diff": True},
    {"path": "/var/lib/gpuops/mig-reboot-attempted", "state": "absent", "diff": True},
]


@pytest.mark.parametrize("changed, manage, runs", [
    (["/etc/systemd/system/gpuops-mig.service"], True, True),
    (["/usr/local/lib/gpuops", "/usr/local/lib/gpuops/gpuops-mig-apply.py"], True, True),
    (["/usr/local/lib/gpuops/gpuops-mig-lib.json"], True, False),       # the bundle alone (copy task without notify)
    (["/usr/local/lib/gpuops"], True, False),                           # a directory alone (file task without notify)
    ([], True, False),
    (["/etc/systemd/system/gpuops-mig.service"], False, False),         # mig_manage_systemd false
])
def test_mig_reload_systemd_runs_where_a_file_with_a_shown_diff_changed(changed, manage, runs):
    variables = {"mig_manage_systemd": manage, "__mig_declared": {"files": MIG_FILES},
                 "__mig_files_written": {"changed": bool(changed), "changed_paths": changed}}
    assert holds(condition("mig", "Reload systemd"), variables) is runs


@pytest.mark.parametrize("changed, manage, runs", [
    (["/etc/systemd/system/gpuops-compute-mode.service"], True, True),
    (["/etc/systemd/system", "/etc/systemd/system/gpuops-compute-mode.service"], True, True),
    (["/etc/systemd/system"], True, False),
    (["/etc/systemd/system/gpuops-compute-mode.service"], False, False),
])
def test_compute_mode_reload_runs_where_its_unit_changed(changed, manage, runs):
    variables = {"compute_mode_manage_systemd": manage,
                 "__compute_mode_declared": {"boot_unit": {"path": "/etc/systemd/system/gpuops-compute-mode.service"}},
                 "__compute_mode_files": {"changed": bool(changed), "changed_paths": changed}}
    assert holds(condition("compute_mode", "Reload systemd for compute_mode"), variables) is runs
