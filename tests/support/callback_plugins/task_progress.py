# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only notification callback: appends one line per task start to the file named by GPUOPS_TEST_PROGRESS, so
a test can stop ansible-playbook at a chosen point of a run however loaded the machine is."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: task_progress
type: notification
short_description: One line per task start in the file named by GPUOPS_TEST_PROGRESS (tests only)
description: Lets tests kill a run at a given task (tests/reliability/test_sigkill_site.py).
requirements:
  - enabled in callbacks_enabled
"""

import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "task_progress"
    CALLBACK_NEEDS_ENABLED = True

    def _mark(self, task, **kwargs):
        path = os.environ.get("GPUOPS_TEST_PROGRESS")
        if path:
            with open(path, "a") as handle:
                handle.write("%s\n" % task.get_name())
                handle.flush()

    v2_playbook_on_task_start = _mark
    v2_playbook_on_handler_task_start = _mark
