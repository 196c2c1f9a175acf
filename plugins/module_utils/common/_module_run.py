# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one shape of a gpuops.nvidia module (PRIVATE: do not use from other collections).

A module is a subclass of ``ModuleRun`` that names its argument spec and fills four hooks, and a ``main()`` that is
``run_module(TheClass)``::

    validate() -> lock(): converge(): retry( read() -> plan(current) -> apply(current, changes) outside check mode,
                                             or only report -> after(current, changes) )

The decisions stay in the pure planners the hooks call; the class does the I/O in its hooks and puts what the user
needs into ``self.result``. What every module did in its own words is done here once:

- ``changed`` is whether ``plan`` returned changes; ``diff`` (before/after) is set by ``set_diff`` only in diff mode;
- a failure before any change is worded one way: ``refuse_input(errors)`` ("invalid input, nothing changed: ...")
  for the parameters, ``refuse(msg)`` ("...; nothing changed") for the rest (``nothing_changed``), and an error of a
  type named in ``refusals`` (a planner's, raised before any write) is reported that way too;
- one mapping of the collection's errors to failures (``failure``): the error's message (``msg`` where it has one),
  the fields it carries (the Kubernetes API's ``status`` and ``reason``, helm's ``rc``/``stdout``/``stderr``, a
  planner's ``errors``, the processes that hold a GPU as ``busy``) and the result so far. A class lets an error
  through to it by naming its type in ``errors``;
- an answer known before any plan (a skip, a verified state that still holds) is ``raise Done(**fields)`` from
  ``read`` or ``plan``: the run ends there, successfully, with those fields;
- the facilities a hook calls instead of writing its own loop: ``wait(name, read)`` (the one table of waits,
  _waits.WAITS, with the run's ``clock`` and ``sleep``, which a test replaces), ``retry`` (the read -> plan -> apply
  of a run tried again where another writer came first: the Kubernetes modules' base, _kube_service.KubeRun, fills
  it with the conflict retry) and, in the GPU modules' base (_gpu_run.GpuRun), ``read_gpus()``. Those two bases live
  with their layers so that a module bundles only the client it uses (ansible-core sends a module every file it
  imports, also inside a function).

The shape of community.docker's modules, one manager class per module and a ``main`` that only runs it
(ansible-collections/community.docker at 4.0.0, plugins/modules/docker_volume.py: ``DockerVolumeManager``); the code
here is this collection's own. Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import copy

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _waits

# The one wording of a failure that happened before anything was changed.
NOTHING_CHANGED = "nothing changed"

# What an error carries into the failure besides its message, when it has the attribute.
ERROR_FIELDS = ("status", "reason", "rc", "stdout", "stderr", "errors", "busy")


def nothing_changed(msg):
    """``msg`` (what is wrong and what is valid) as a failure before any change: "<msg>; nothing changed"."""
    return "%s; %s" % (msg.rstrip().rstrip(".;"), NOTHING_CHANGED)


def invalid_input(errors):
    """The parameters' errors, all of them, as one failure before anything was read or changed."""
    return "invalid input, %s: %s" % (NOTHING_CHANGED, "; ".join(errors))


class Failure(Exception):
    """A failure raised to the module's base instead of calling ``fail_json`` where it is found: ``run_module`` ends
    the run with ``msg``, the result so far and ``fields``, more keys of the failure (``busy``, ``changes``, the
    step's report; they win over the result's). Raise it from a hook, a check or a helper the hooks call."""

    def __init__(self, msg, **fields):
        super(Failure, self).__init__(msg)
        self.msg = msg
        self.fields = fields


class Refusal(Failure):
    """A Failure before any change (a check of gpu_node_plan's step registry, say): ``msg`` says what is wrong and what
    is valid; it reports ``changed=False`` whatever the result so far planned. Its caller decides what else the result
    carries (the node plan still reads the GPUs' health, so that a refused plan does not hide a blocking finding)."""

    def __init__(self, msg, **fields):
        fields.setdefault("changed", False)
        super(Refusal, self).__init__(msg, **fields)


class Done(Exception):
    """Raised by ``read`` or ``plan`` when the run's answer is known before any plan (a skip, a verified state that
    still holds): the run ends successfully with the result so far updated by ``fields``; nothing is applied and
    ``after`` does not run."""

    def __init__(self, **fields):
        super(Done, self).__init__("done")
        self.fields = fields


def refusal(exc):
    """``exc``, an error of a type a module names in ``refusals`` (a planner's, raised before any write), as the
    Refusal it is reported as: its message with "nothing changed", and its ``errors`` where it lists them."""
    fields = {"errors": list(exc.errors)} if isinstance(getattr(exc, "errors", None), (list, tuple)) else {}
    return Refusal(nothing_changed(getattr(exc, "msg", None) or str(exc)), **fields)


def failure(exc, result=None):
    """The keyword arguments of ``fail_json`` for ``exc``, one of the collection's errors: its message, the fields it
    carries (``ERROR_FIELDS``) and ``result`` (what the run had done so far; the error's fields win)."""
    out = dict(result or {})
    for field in ERROR_FIELDS:
        if hasattr(exc, field):
            out[field] = getattr(exc, field)
    out.update(getattr(exc, "fields", None) or {})
    out["msg"] = getattr(exc, "msg", None) or str(exc)
    return out


class ModuleRun(object):
    """One module's run. A subclass sets ``argument_spec`` (and ``module_options``: other AnsibleModule keywords such
    as ``mutually_exclusive``), ``errors`` (the error types mapped to failures by ``failure``), and fills the hooks.

    ``apply_in_check_mode``: ``apply`` runs in check mode too (a Kubernetes write then is the API server's dry run,
    whose answer is still checked); it must then write nothing itself."""

    argument_spec = None
    module_options = {}
    errors = ()
    refusals = ()
    apply_in_check_mode = False
    # The clock and the sleep of the run's waits (``wait``); None: time.monotonic and time.sleep. A test replaces
    # them on the class (a function of the run: ``lambda self: ...``).
    clock = None
    sleep = None

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.result = dict(changed=False)

    # ---- hooks ---------------------------------------------------------------------------------------------------
    def validate(self):
        """Every parameter checked before anything is read: a list of what is wrong (empty: valid)."""
        return []

    def read(self):
        """The current state (I/O, nothing changed)."""
        return None

    def plan(self, current):
        """What must change, from a pure planner (falsy: the state is as declared). Put the reasons and, with
        ``set_diff``, the diff into ``self.result``."""
        raise NotImplementedError

    def apply(self, current, changes):
        """Make ``changes`` (outside check mode, unless ``apply_in_check_mode``), then re-read and verify."""
        raise NotImplementedError

    def after(self, current, changes):
        """The last step, also when nothing changed and in check mode: a verification or record that runs on every
        apply run (test ``self.module.check_mode`` before writing), warnings."""

    def lock(self):
        """The lock held from the read to the end (a node lock for a module that changes the node): a context
        manager."""
        return contextlib.nullcontext()

    def retry(self, attempt):
        """Run ``attempt`` (one read -> plan -> apply -> after) and return what it returns. The base of a layer
        whose writes can lose to another writer tries it again there (_kube_service.KubeRun: on 409 Conflict)."""
        return attempt()

    def failing(self, exc):
        """``exc`` ends the run: the last word on the result so far before the failure is reported (what was written
        before the error stays written: say so). What it returns, where not None, is the failure reported instead
        (a library error worded as what to install, say)."""
        return None

    # ---- facilities the hooks call -------------------------------------------------------------------------------
    def wait(self, name, read, timeout=None, interval=None):
        """The wait ``name`` of the one table (_waits.WAITS): ``read()`` until the row's condition holds or
        ``timeout`` seconds passed (None: the row's defaults), on the run's ``clock`` and ``sleep``. Returns
        _poll.Polled(done, seen, waited)."""
        return _waits.wait(name, read, timeout, interval, clock=self.clock, sleep=self.sleep)

    # ---- what every module does the same way ---------------------------------------------------------------------
    def set_diff(self, before, after, header=None):
        """The diff, only in diff mode: ``before`` and ``after`` (with one header naming what they are)."""
        if self.module._diff:
            diff = dict(before=before, after=after)
            if header:
                diff.update(before_header=header, after_header=header)
            self.result["diff"] = diff

    def fail(self, msg, **extra):
        """Fail with ``msg`` and the result so far (``extra`` wins)."""
        self.module.fail_json(msg=msg, **dict(self.result, **extra))

    def refuse(self, msg, **extra):
        """Fail before any change: ``msg`` says what is wrong and what is valid; the wording adds "nothing changed"."""
        self.fail(nothing_changed(msg), **dict(extra, changed=False))

    def refuse_input(self, errors):
        """Fail on the parameters' errors, all in one failure, before anything was read."""
        self.module.fail_json(msg=invalid_input(errors), errors=list(errors), changed=False)

    def converge(self):
        """read -> plan -> apply or report -> after, as one ``attempt`` that ``retry`` may make again. A module whose
        read and write are one operation of its runner (a Lease's compare-and-swap, with check mode the runner's dry
        run) overrides this one hook instead, and still fills ``self.result`` and returns it; it never retries,
        waits or reads GPUs itself (tests/unit/test_module_shape.py)."""
        return self.retry(self.attempt)

    def attempt(self):
        try:
            current = self.read()
            changes = self.plan(current)
        except Done as done:
            self.result.update(done.fields)
            return self.result
        self.result["changed"] = bool(changes)
        if changes and (self.apply_in_check_mode or not self.module.check_mode):
            self.apply(current, changes)
        self.after(current, changes)
        return self.result

    def run(self):
        errors = self.validate()
        if errors:
            self.refuse_input(errors)
        with self.lock():
            return self.converge()


def run_module(run_class):
    """A module's ``main()``: build the AnsibleModule from ``run_class``'s argument spec, run it, exit with its result;
    an error of a type named in ``errors`` ends the run with ``failure`` (its fields and the result so far)."""
    module = AnsibleModule(argument_spec=copy.deepcopy(run_class.argument_spec), supports_check_mode=True,
                           **copy.deepcopy(run_class.module_options))
    run = run_class(module)
    caught = (Failure,) + tuple(run.errors) + tuple(run.refusals)
    try:
        result = run.run()
    except caught as exc:  # pylint: disable=catching-non-exception
        if run.refusals and isinstance(exc, tuple(run.refusals)) and not isinstance(exc, Failure):
            exc = refusal(exc)
        exc = run.failing(exc) or exc
        module.fail_json(**failure(exc, run.result))
    module.exit_json(**result)
