# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only notification callback: counts what an ansible run costs, for the tests' per-file cost table
(tests/support/test_costs.py). With GPUOPS_TEST_ANSIBLE_RUNS naming a file, each ansible-playbook or ad-hoc ansible
run appends one line when it starts ("start playbook" or "start adhoc") and one when it ends ("modules N": the module
runs of its hosts' tasks). Without the variable it does nothing.

A module run: a host's task result that was not skipped, of an action that runs a module on the host (not set_fact,
debug, assert, include_* and the other actions that the controller answers itself); a loop counts its items. An action
plugin that runs several modules (copy: stat, then copy) counts once. A run killed before its end has its start line
only. Loaded without being enabled (tests/support/ansible_run.py points ANSIBLE_CALLBACK_PLUGINS here and sets
ANSIBLE_LOAD_CALLBACK_PLUGINS for the ad-hoc runs)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: ansible_runs
type: notification
short_description: Counts runs and module runs into the file named by GPUOPS_TEST_ANSIBLE_RUNS (tests only)
description:
  - One line when a run starts, one with its module runs when it ends (tests/support/test_costs.py reads them).
"""

import os

from ansible.plugins.callback import CallbackBase

VARIABLE = "GPUOPS_TEST_ANSIBLE_RUNS"
# actions the controller answers without a module process on the host
CONTROLLER_ACTIONS = frozenset((
    "add_host", "assert", "debug", "fail", "group_by", "import_playbook", "import_role", "import_tasks",
    "include", "include_role", "include_tasks", "include_vars", "meta", "pause", "set_fact", "set_stats",
    "validate_argument_spec",
))


def runs_a_module(action):
    """Whether a task of ``action`` (as the task names it: short or ansible.builtin./ansible.legacy.) runs a module."""
    name = action or ""
    for prefix in ("ansible.builtin.", "ansible.legacy."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name not in CONTROLLER_ACTIONS


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "ansible_runs"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._path = os.environ.get(VARIABLE)
        self.modules = 0

    def _write(self, line):
        if not self._path:
            return
        # one short write in append mode: lines of runs that end at once do not interleave; a file that cannot be
        # written loses the count, never the run (no warning in its output either)
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            return
        try:
            os.write(fd, (line + "\n").encode("utf-8"))
        except OSError:
            pass
        finally:
            os.close(fd)

    def v2_playbook_on_start(self, playbook):
        adhoc = getattr(playbook, "_file_name", None) == "__adhoc_playbook__"
        self._write("start adhoc" if adhoc else "start playbook")

    def v2_playbook_on_stats(self, stats):
        self._write("modules %d" % self.modules)

    def _count(self, result, **kwargs):
        # a loop's own result comes after its items', which were counted one by one
        if runs_a_module(result._task.action) and not isinstance(result._result.get("results"), list):
            self.modules += 1

    def _count_item(self, result, **kwargs):
        if runs_a_module(result._task.action):
            self.modules += 1

    v2_runner_on_ok = _count
    v2_runner_on_failed = _count
    v2_runner_item_on_ok = _count_item
    v2_runner_item_on_failed = _count_item
