# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only notification callback: appends one line per task start to the file named by GPUOPS_TEST_PROGRESS, and
stops ansible-playbook (SIGSTOP, once the line is written) at the start of the task that GPUOPS_TEST_STOP_AT_TASK
numbers (1 = the first) or of the first whose name contains GPUOPS_TEST_STOP_AT_NAME, so that a test can kill the
run at exactly that point however loaded the machine is (tests/support/stop_points.py). At a task start no worker of
that task runs yet: the previous task is done on every host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: task_progress
type: notification
short_description: One line per task start in the file named by GPUOPS_TEST_PROGRESS (tests only)
description:
  - Lets tests kill a run at a given task (tests/reliability/test_sigkill_site.py).
  - With GPUOPS_TEST_STOP_AT_TASK (a task number) or GPUOPS_TEST_STOP_AT_NAME (part of a task name) set,
    ansible-playbook stops itself with SIGSTOP at the start of that task, after writing its line.
requirements:
  - enabled in callbacks_enabled
"""

import os
import signal

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "task_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._started = 0
        self._stopped = False

    def _mark(self, task, **kwargs):
        path = os.environ.get("GPUOPS_TEST_PROGRESS")
        name = task.get_name()
        self._started += 1
        if path:
            with open(path, "a") as handle:
                handle.write("%s\n" % name)
                handle.flush()
        at_task, at_name = os.environ.get("GPUOPS_TEST_STOP_AT_TASK"), os.environ.get("GPUOPS_TEST_STOP_AT_NAME")
        if not self._stopped and ((at_task and int(at_task) == self._started) or (at_name and at_name in name)):
            self._stopped = True
            os.kill(os.getpid(), signal.SIGSTOP)

    v2_playbook_on_task_start = _mark
    v2_playbook_on_handler_task_start = _mark
