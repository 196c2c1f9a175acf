# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime's verified-state stamp (PRIVATE to gpuops.nvidia).

A full run of containerd_runtime runs nvidia-ctk and containerd four to five times. After one that found nothing to
change, it records what it verified beside the config (``Stamp``); a later run, or gpu_node_plan
(``verified_state``), that finds every input unchanged knows the result without running either tool.

Here also the one way both find those tools (``find_tools``), so that the plan checks the stamp for exactly the
binaries the module would run. This module only reads: the run writes the stamp's text (``Stamp.record``).
It imports only the pure config analysis and the safe file reader, and reads the source of the rest of the run's
code (``CODE_MODULES``) without loading it, so that gpu_node_plan's check stays cheap.
Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import importlib.util
import json
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (
    CTK_PACKAGE, import_pattern, list_strings, toml_reader, wrong_drop_in_1180)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    ToolNotFound, binary_identity, file_digest, find_tool, load_stamp, require_tool, stamp_text)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import stamp_path as live_stamp_path


def find_tools(get_bin_path, params):
    """(nvidia-ctk, containerd or None): the paths ``nvidia_ctk_path`` and ``containerd_path`` name, else what
    ``get_bin_path`` (AnsibleModule.get_bin_path) finds in PATH, /usr/bin, /usr/local/bin or /usr/sbin.
    ToolNotFound when a named path is not an executable file, or no nvidia-ctk is found; without containerd the
    candidate is only not validated (containerd_runtime warns)."""
    ctk = require_tool(get_bin_path, params, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
    return ctk, find_tool(get_bin_path, params, "containerd_path", "containerd")


# ------------------------------------------------------------------------------------------------------
# The verified-state stamp: a later run with nothing changed skips nvidia-ctk and containerd
# ------------------------------------------------------------------------------------------------------
STAMP_SCHEMA = 1
STAMP_SUFFIX = ".gpuops-verified.json"
# every parameter that the result depends on (backup only matters when something is written)
STAMP_PARAMS = ("config_path", "drop_in_path", "edit_mode", "runtime_name", "set_as_default", "cdi_enabled",
                "runtime_path")


def stamp_path(config_path):
    """``/etc/containerd/.config.toml.gpuops-verified.json``: beside the config, like the backups; never matched
    by a ``*.toml`` import."""
    return live_stamp_path(config_path, STAMP_SUFFIX)


def _imports_of(path):
    """The import patterns of a TOML file, resolved against its directory; [] when it cannot be read or parsed
    (its digest is recorded either way, so any change to it is still seen)."""
    loads, error, _name = toml_reader()
    try:
        tree = loads(read_text(path, "file"))
    except Exception:  # pylint: disable=broad-except  # unreadable, not UTF-8, not TOML: recorded by digest
        return []
    return [entry if os.path.isabs(entry) else os.path.join(os.path.dirname(path), entry)
            for entry in list_strings(tree, "imports")]


def watched_files(config_path, drop_in_path):
    """Every file whose bytes the result depends on: the config, the drop-in, nvidia-ctk 1.18.0's wrong drop-in
    (a warning depends on it), every file of the drop-in directory's ``*.toml`` (validated with it), and every
    file any of them imports, followed through imports of imports."""
    paths = set([config_path, drop_in_path])
    wrong = wrong_drop_in_1180(drop_in_path)
    if wrong:
        paths.add(wrong)
    todo = [config_path] + sorted(glob.glob(import_pattern(drop_in_path)))
    paths.update(todo)
    seen = set()
    while todo:
        path = todo.pop()
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        for pattern in _imports_of(path):
            matches = sorted(glob.glob(pattern))  # a file added later is a new key: a miss
            paths.update(matches)
            todo.extend(matches)
    paths.discard(stamp_path(config_path))
    return sorted(paths)


# The module_utils whose code decides containerd_runtime's result (package._name below module_utils); the
# stamp's code digest hashes each one's source, so code can move between them.
# tests/unit/plugins/module_utils/test_containerd_stamp.py fails when a module_utils file that
# containerd_runtime imports is missing here.
CODE_PACKAGE = "ansible_collections.gpuops.nvidia.plugins.module_utils"
CODE_MODULES = ("plan._containerd_config", "node._containerd_run", "node._containerd_stamp", "common._input_file",
                "node._live_file", "common._module_run", "node._nvidia_ctk", "common._poll", "common._waits",
                "node._containerd_distribution", "plan._containerd_target")


def _payload():  # pragma: no cover  # never called
    """Never called: it names for ansible-core the modules of CODE_MODULES that this one does not import.
    ansible-core puts into a module's payload every module_utils file that an import statement of its code names,
    run or not (ansible/executor/module_common.py, ``ModuleDepFinder``), so gpu_node_plan, which imports only this
    module and the config analysis, carries their sources for ``code_digest`` without loading them."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import (  # noqa: F401  # pylint: disable=unused-import
        _containerd_distribution, _containerd_run, _nvidia_ctk)


def _source(name):
    """The source of module_utils ``name``, read by its loader without importing it; None when it has none."""
    fullname = CODE_PACKAGE + "." + name
    try:
        spec = importlib.util.find_spec(fullname)
        return spec.loader.get_source(fullname)
    except Exception:  # pylint: disable=broad-except  # no loader, no source: nothing is trusted
        return None


def code_digest():
    """sha256 over the sources of CODE_MODULES (the code that decides the result), or None when a loader cannot
    give one (then nothing is ever recorded or trusted)."""
    digest = hashlib.sha256()
    for name in CODE_MODULES:
        source = _source(name)
        if not source:
            return None
        data = source.encode("utf-8")
        digest.update(("%s %d\n" % (name, len(data))).encode("utf-8"))
        digest.update(data)
    return digest.hexdigest()


class Stamp(object):
    """What a full run verified, recorded beside the config (``stamp_path``), and its check.

    Why a hit cannot hide a change: the result of a full run is a function of (1) the bytes of the files it reads
    (``watched_files``: the config, the drop-in, the other ``*.toml`` files of the drop-in directory, everything
    they import), (2) the parameters (``STAMP_PARAMS``), (3) what nvidia-ctk and containerd do, fixed by their
    binaries (``binary_identity``), (4) the code of CODE_MODULES (``code_digest``) and the TOML reader. The stamp
    records all of them, as they were after a full evaluation found nothing to change, with that evaluation's
    result. A later run recomputes them; only when every one is equal does it return the recorded result without
    running the tools. Any difference (a file edited, added to conf.d or deleted, a package upgrade, another
    parameter, a new collection version) is a miss and a full run. Assumed, not checked: that the tools read no
    other input (environment variables, other files) than the arguments the module passes and the files above; a
    wrapper script that runs another file is identified by its own bytes only.
    """

    def __init__(self, params, ctk_path, containerd_path):
        self.path = stamp_path(params["config_path"])
        self.params = params
        self.ctk_path = ctk_path
        self.containerd_path = containerd_path

    def inputs(self):
        code = code_digest()
        if code is None:
            return None
        return {"schema": STAMP_SCHEMA, "code": code, "toml": toml_reader()[2],
                "params": dict((k, self.params[k]) for k in STAMP_PARAMS),
                "nvidia_ctk": binary_identity(self.ctk_path), "containerd": binary_identity(self.containerd_path),
                "files": dict((path, file_digest(path))
                              for path in watched_files(self.params["config_path"], self.params["drop_in_path"]))}

    def verified_result(self):
        """The recorded result when every input is as recorded, else None."""
        recorded = load_stamp(self.path)
        if recorded is None:
            return None
        now = self.inputs()
        if now is None or recorded.get("inputs") != json.loads(json.dumps(now)):
            return None
        result = recorded.get("result")
        return dict(result, verified_earlier=True) if isinstance(result, dict) else None

    def record(self, evaluation):
        """The stamp's text for a full ``evaluation`` that found nothing to change (the run writes it to ``path``),
        or None when the code digest cannot be computed."""
        now = self.inputs()
        if now is None:
            return None
        result = dict(evaluation.fields, changed=False, restart_required=False, files_changed=[],
                      files=[{"path": item["path"], "action": "none"} for item in evaluation.plan],
                      trap_warnings=evaluation.warnings)
        return stamp_text({"inputs": now, "result": result})


def verified_state(module, params):
    """gpu_node_plan's check: would containerd_runtime, run now with ``params``, return a recorded result without
    running either tool? The tools are found as the module finds them; a tool it would not find or run is work
    (the module then fails with its own message). Returns ({"verified": True, "result": the recorded result},
    None) or ({"verified": False}, the reason the step has work)."""
    if toml_reader()[0] is None:
        return {"verified": False}, "containerd: no TOML reader on this Python"
    try:
        ctk, containerd = find_tools(module.get_bin_path, params)
    except ToolNotFound as exc:
        return {"verified": False}, "containerd: %s" % exc.reason
    recorded = Stamp(params, ctk, containerd).verified_result()
    if recorded is None:
        return {"verified": False}, "containerd: no verified state matches %s and what it loads" % params["config_path"]
    return {"verified": True, "result": recorded}, None
