#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: health_report
short_description: Write the fleet health sweep's report, as JSON and as one self-contained HTML page
version_added: 0.3.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Builds the report of one fleet health sweep from the sweep's facts (O(sweep)) and one row per node (O(rows)),
    validates both, and writes it into O(dest) as C(health-report-<time>.json) and C(health-report-<time>.html)
    (C(<time>) the sweep's time in UTC, C(YYYYmmddTHHMMSSZ)), and as C(health-report-latest.json) and
    C(health-report-latest.html) where this sweep is the newest report there.
  - The HTML page needs nothing else (no external asset, no script); every value on it is escaped. It has the sweep's
    time, whether it ran in check mode, the quarantine breaker's state, one table row per node and, where O(dest) holds
    earlier reports, a plot of findings and quarantined nodes per sweep.
  - Every file is written through a temporary file in O(dest) and renamed over its name, and only where its bytes
    differ; a report of the same sweep time and rows written again changes nothing.
  - Runs on the controller (the sweep's playbook delegates it to localhost, once per sweep).
options:
  dest:
    description:
      - The directory the reports are written to; created (with its parents) if missing.
    type: path
    required: true
  sweep:
    description:
      - "The sweep: C(time) (RFC 3339 with an offset, such as C(2026-11-29T06:17:10Z); written in UTC, whole
        seconds), C(check_mode) (bool, default false), C(id) (a non-empty string) and C(breaker): null where no
        cluster was swept, else M(gpuops.nvidia.health_quarantine)'s RV(gpuops.nvidia.health_quarantine#module:breaker)
        - C(open) (bool), C(limit) (int), C(window_hours) (a number, 0 or more), C(quarantined_in_window) (the
        nodes' names, or their count) and C(held) (the node names the open breaker held back, default none), and
        optionally C(gpu_nodes), C(percent), C(max_nodes) and C(quarantined_now), kept as given."
      - An unknown key or a bad value is an error naming the field and what is valid; nothing is written.
    type: dict
    required: true
  rows:
    description:
      - "One row per node: C(node) (name), C(gpus) (count), C(state) (one of C(healthy), C(unhealthy) (a blocking
        finding where no cluster quarantines), C(quarantined),
        C(released), C(held_by_breaker), C(unresponsive)), C(findings) (a list of C(gpu) (index or null),
        C(bus_id) (or null), C(kind), C(message), C(action) (C(block) or C(warn))), C(actions) (strings, such as
        C(quarantined) or C(healthy sweep 1 of 2)), C(quarantined_since) (RFC 3339 or null) and
        C(quarantine_seconds) (int or null)."
      - The report lists them sorted by node name; a node this sweep quarantined is a row in state C(quarantined)
        whose C(actions) include C(quarantined).
      - A bad row is an error naming the row (index and node) and the field, and listing what is valid; nothing is
        written.
    type: list
    elements: dict
    required: true
  history:
    description:
      - How many earlier JSON reports in O(dest) (the newest ones older than this sweep) the HTML page's plot is
        drawn from; C(0) draws no plot. An earlier file that cannot be read as a report is left out with a warning.
    type: int
    default: 30
  keep:
    description:
      - How many reports (a JSON and an HTML file of one time stamp) O(dest) keeps, this one included; the oldest
        beyond that are removed. Only files named C(health-report-YYYYmmddTHHMMSSZ.json) or C(.html) are ever removed.
    type: int
    default: 90
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Builds the report, reads O(dest) and returns the report and the paths it would write; writes nothing.
  diff_mode:
    support: full
    details: The before and after of C(health-report-latest.json).
  idempotent:
    support: full
    details: The same sweep time and rows give the same bytes, and a file with the same bytes is not written again.
notes:
  - The report's time is the sweep's, never the clock's, so that its files are a function of the input alone.
  - The files are named by the sweep's time and, where the sweep's C(id) is not its time (an AWX job id), by that id
    too, so that job slices sweeping in the same second each keep their report. Outside check mode the module holds a
    lock file in O(dest) (C(.health-report.lock)) from its read to its last write, so two sweeps writing at once leave
    C(health-report-latest.*) as the later one's.
"""

EXAMPLES = r"""
- name: Write the sweep's report on the controller
  gpuops.nvidia.health_report:
    dest: /var/lib/gpuops/health-reports
    sweep:
      time: "{{ sweep_time }}"
      check_mode: "{{ ansible_check_mode }}"
      id: "{{ sweep_id }}"
      breaker:
        open: false
        limit: 3
        window_hours: 24
        quarantined_in_window: 1
        held: []
    rows:
      - node: gpu-node-1
        gpus: 8
        state: quarantined
        findings:
          - {gpu: 3, bus_id: "00000000:47:00.0", kind: xid_79, message: "GPU has fallen off the bus", action: block}
        actions: [quarantined]
        quarantined_since: "{{ sweep_time }}"
        quarantine_seconds: 0
      - {node: gpu-node-2, gpus: 8, state: healthy, findings: [], actions: [],
         quarantined_since: null, quarantine_seconds: null}
  delegate_to: localhost
  run_once: true
  register: health

- name: Say where the page is
  ansible.builtin.debug:
    msg: "{{ health.html_path }}: {{ health.report.totals.quarantined }} node(s) quarantined"
  run_once: true
"""

RETURN = r"""
report:
  description: The report as written to the JSON file (also in check mode).
  returned: success
  type: dict
  contains:
    version: {description: The report format's version (1)., type: int}
    sweep:
      description: The sweep - C(time) (RFC 3339, UTC), C(check_mode), C(id) and C(breaker) (C(open), C(limit),
        C(window_hours), C(quarantined_in_window), C(held)).
      type: dict
    nodes:
      description: The rows as validated (every key present), sorted by node name.
      type: list
      elements: dict
    totals:
      description: C(nodes), C(healthy), C(quarantined), C(newly_quarantined), C(released), C(held_by_breaker),
        C(unresponsive) (nodes per state or action) and C(findings) (of all nodes).
      type: dict
  sample:
    version: 1
    sweep: {time: "2026-11-29T06:00:00Z", check_mode: false, id: sweep-42,
            breaker: {open: false, limit: 3, window_hours: 24, quarantined_in_window: 0, held: []}}
    nodes: [{node: gpu-node-2, gpus: 8, state: healthy, findings: [], actions: [], quarantined_since: null,
             quarantine_seconds: null}]
    totals: {nodes: 1, healthy: 1, quarantined: 0, newly_quarantined: 0, released: 0, held_by_breaker: 0,
             unresponsive: 0, findings: 0}
json_path:
  description: The report's time-stamped JSON file (in check mode, the file it would write).
  returned: success
  type: str
  sample: /var/lib/gpuops/health-reports/health-report-20261129T060000Z.json
html_path:
  description: The report's time-stamped HTML page (in check mode, the file it would write).
  returned: success
  type: str
  sample: /var/lib/gpuops/health-reports/health-report-20261129T060000Z.html
written:
  description: The files of O(dest) written (in check mode, that would be written) because their bytes differ.
  returned: success
  type: list
  elements: str
  sample: [health-report-20261129T060000Z.json, health-report-20261129T060000Z.html, health-report-latest.json]
removed:
  description: The older report files removed (in check mode, that would be removed) to keep O(keep) reports.
  returned: success
  type: list
  elements: str
  sample: [health-report-20260801T060000Z.json, health-report-20260801T060000Z.html]
"""

import contextlib
import fcntl
import json
import os
import tempfile

# (first: the collection's module_utils below are compiled once, or read from the bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_report as hr
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, ModuleRun, run_module

# An earlier report bigger than this is not loaded for the plot (a report of thousands of nodes is far smaller).
MAX_REPORT_BYTES = 64 * 1024 * 1024
# (in O(dest); held from the read to the last write, outside check mode)
LOCK_FILE = ".health-report.lock"


def _read(path):
    """The bytes of a regular file, None when absent; OSError when unreadable or not a regular file."""
    if not os.path.lexists(path):
        return None
    if not os.path.isfile(path):
        raise OSError("not a regular file")
    with open(path, "rb") as handle:
        return handle.read(MAX_REPORT_BYTES + 1)


def write_atomic(directory, name, data):
    """``data`` into ``directory/name`` through a hidden temporary file of the same directory and os.replace: a
    reader sees the old file or the new one, never a part. The file gets 0644 under the process's umask."""
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o644 & ~umask)
        os.replace(tmp, os.path.join(directory, name))
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


class HealthReport(ModuleRun):
    """validate (the report) -> read dest -> plan (the files' bytes, what to prune) -> write and prune."""

    argument_spec = dict(
        dest=dict(type="path", required=True),
        sweep=dict(type="dict", required=True),
        rows=dict(type="list", elements="dict", required=True),
        history=dict(type="int", default=30),
        keep=dict(type="int", default=90),
    )

    def validate(self):
        errors = []
        dest = self.params["dest"]
        if not dest or "\x00" in dest:
            errors.append("dest: %r is not a directory path" % (dest,))
        elif os.path.lexists(dest) and not os.path.isdir(dest):
            errors.append("dest: %s exists and is not a directory (give the directory the reports go to)" % dest)
        if not 0 <= self.params["history"] <= 10000:
            errors.append("history: %d is not a number of earlier reports (0 to 10000)" % self.params["history"])
        if not 1 <= self.params["keep"] <= 100000:
            errors.append("keep: %d is not a number of reports to keep (1 to 100000)" % self.params["keep"])
        try:
            self.report = hr.report(self.params["sweep"], self.params["rows"])
        except hr.ReportError as exc:
            errors.extend(exc.errors)
        return errors

    def read(self):
        dest = self.params["dest"]
        try:
            names = sorted(os.listdir(dest)) if os.path.isdir(dest) else []
        except OSError as exc:
            raise Failure("dest: cannot list %s: %s; nothing changed" % (dest, exc.strerror or exc), changed=False)
        current = {}
        for name in set(self._files() + hr.LATEST):
            try:
                current[name] = _read(os.path.join(dest, name))
            except OSError as exc:
                raise Failure("dest: cannot read %s: %s; nothing changed" % (
                    os.path.join(dest, name), getattr(exc, "strerror", None) or exc), changed=False)
        return {"names": names, "files": current}

    def _files(self):
        return hr.report_files(self.report["sweep"]["time"], self.report["sweep"]["id"])

    def lock(self):
        """The directory's lock file, held from the read to the last write outside check mode: two sweeps (job slices)
        writing at once each keep their report, and health-report-latest.* is the newer one's."""
        if self.module.check_mode:
            return super(HealthReport, self).lock()
        return _locked(self.params["dest"])

    def _history(self, names, now, removed):
        """The earlier reports of the plot: the last ``history`` older than this sweep among those kept."""
        kept = [n for n in names if n not in removed]
        history = []
        for name in hr.history_files(kept, self.params["history"], before=now):
            path = os.path.join(self.params["dest"], name)
            try:
                data = _read(path)
                if data is None or len(data) > MAX_REPORT_BYTES:
                    raise ValueError("missing or over %d bytes" % MAX_REPORT_BYTES)
                earlier = json.loads(data.decode("utf-8"))
                hr.history_point(earlier)
            except (OSError, ValueError) as exc:
                self.module.warn("health_report: %s is left out of the plot: %s" % (path, exc))
                continue
            history.append(earlier)
        return history

    def plan(self, current):
        dest = self.params["dest"]
        report = self.report
        now = hr.key(report["sweep"]["time"], report["sweep"]["id"])
        json_name, html_name = self._files()
        removed = hr.prune_files(current["names"], self.params["keep"], now)
        text = json.dumps(report, indent=2, sort_keys=True) + "\n"
        page = hr.render_html(report, self._history(current["names"], now, removed))
        wanted = {json_name: text.encode("utf-8"), html_name: page.encode("utf-8")}
        newer = hr.history_files(current["names"], 1)
        if not newer or hr.stamp_of(newer[0]) <= now:
            wanted[hr.LATEST[0]], wanted[hr.LATEST[1]] = wanted[json_name], wanted[html_name]
        else:
            self.module.warn("health_report: %s is newer than this sweep; health-report-latest.* left as they are"
                             % newer[0])
        self.writes = dict((name, data) for name, data in sorted(wanted.items()) if current["files"].get(name) != data)
        self.result.update(report=report, json_path=os.path.join(dest, json_name),
                           html_path=os.path.join(dest, html_name), written=sorted(self.writes), removed=removed)
        before = current["files"].get(hr.LATEST[0])
        self.set_diff(before.decode("utf-8", "replace") if before is not None else "",
                      wanted.get(hr.LATEST[0], before or b"").decode("utf-8", "replace"),
                      header=os.path.join(dest, hr.LATEST[0]))
        return self.writes or removed

    def apply(self, current, changes):
        dest = self.params["dest"]
        done = []
        try:
            os.makedirs(dest, exist_ok=True)
            # the time-stamped files first, latest last: a reader of latest never finds it ahead of its report
            for name in sorted(self.writes, key=lambda n: (n in hr.LATEST, n)):
                write_atomic(dest, name, self.writes[name])
                done.append(name)
            for name in self.result["removed"]:
                os.unlink(os.path.join(dest, name))
                done.append(name)
        except OSError as exc:
            raise Failure("dest: cannot write the report into %s: %s; %s" % (
                dest, getattr(exc, "strerror", None) or exc,
                "done before it: %s" % ", ".join(done) if done else "nothing was written"), changed=bool(done))


@contextlib.contextmanager
def _locked(dest):
    try:
        os.makedirs(dest, exist_ok=True)
        handle = open(os.path.join(dest, LOCK_FILE), "a")
    except OSError as exc:
        raise Failure("dest: cannot lock %s: %s; nothing changed" % (dest, getattr(exc, "strerror", None) or exc),
                      changed=False)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()


def main():
    run_module(HealthReport)


if __name__ == "__main__":
    main()
