# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only stdout callback: the whole run as one JSON document, in the shape of ansible.posix.json
(plays -> tasks -> hosts -> result, then stats). ansible-core 2.19 no longer ships a json callback, and the
tests need no collection from Galaxy. Each task also has "times": {host: [start, end]}, the wall-clock times (time.time)
at which the task was queued for the host and its result came back (bench/driver_flow.py splits a node's window by
them)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: json_results
type: stdout
short_description: The run as one JSON document (tests only)
description: Plays, tasks, per-host results and stats as JSON, like ansible.posix.json.
"""

import json
import resource
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "json_results"

    def __init__(self, display=None):
        super(CallbackModule, self).__init__(display)
        self.results = []
        self._started = {}

    def v2_playbook_on_play_start(self, play):
        self.results.append({"play": {"name": play.get_name()}, "tasks": []})

    def _task_start(self, task, **kwargs):
        if not self.results:
            self.results.append({"play": {"name": "adhoc"}, "tasks": []})
        # action: the module or action as the task names it (bench/fleet.py's floor play runs one of them again)
        self.results[-1]["tasks"].append({"task": {"name": task.get_name(), "action": task.action}, "hosts": {}})

    v2_playbook_on_task_start = _task_start
    v2_playbook_on_handler_task_start = _task_start

    def v2_runner_on_start(self, host, task):
        self._started[(host.get_name(), task._uuid)] = time.time()

    def _record(self, result, failed=False, **kwargs):
        if not self.results or not self.results[-1]["tasks"]:
            self._task_start(result._task)
        host = result._host.get_name()
        data = dict(result._result)
        data.pop("_ansible_verbose_always", None)
        data.pop("_ansible_no_log", None)
        if failed:
            data["failed"] = True
        self.results[-1]["tasks"][-1]["hosts"][host] = data
        self.results[-1]["tasks"][-1].setdefault("times", {})[host] = [
            self._started.pop((host, result._task._uuid), None), time.time()]

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result):
        self._record(result)

    def v2_playbook_on_stats(self, stats):
        summary = dict((h, stats.summarize(h)) for h in sorted(stats.processed))
        # controller.cpu: CPU seconds of ansible-playbook's main process alone (its workers are not in it), so a
        # bench can tell the strategy's own cost from the tasks' (bench/fleet_slices.py)
        own = resource.getrusage(resource.RUSAGE_SELF)
        self._display.display(json.dumps({"plays": self.results, "stats": summary,
                                          "controller": {"cpu": round(own.ru_utime + own.ru_stime, 3)}},
                                         indent=1, sort_keys=True, default=str))

    # ad-hoc runs end without a stats event in some versions: print what we have on exit
    def v2_playbook_on_no_hosts_matched(self):
        pass
