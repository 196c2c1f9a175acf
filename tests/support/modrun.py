"""Run a module's main() in this process (fast: no Ansible start-up, no new Python) and return its JSON result.

ansible-core's patch_module_args hands the module its arguments; the module's exit_json/fail_json output is taken
from stdout. Real-ansible runs (tests.support.ansible_run) remain the end-to-end check."""
import contextlib
import importlib
import io
import json
import os

from ansible.module_utils import _internal as _module_internal
from ansible.module_utils.common import warnings as _warnings
from ansible.module_utils.testing import patch_module_args

from tests.support.ansible_run import ansible_env


@contextlib.contextmanager
def _as_a_module_process():
    """What a module process starts with: no warnings or deprecations collected yet, and (ansible-core 2.19+) not the
    controller: once a test worker has imported controller code (a filter plugin, ansible.template), AnsibleModule.warn
    would print to the controller's display instead of returning the warning in the result."""
    _warnings._global_warnings.clear()        # pylint: disable=protected-access  # (a list or a dict by version)
    _warnings._global_deprecations.clear()    # pylint: disable=protected-access
    controller = getattr(_module_internal, "is_controller", None)
    if controller is not None:
        _module_internal.is_controller = False
    try:
        yield
    finally:
        if controller is not None:
            _module_internal.is_controller = controller


def run_main(main, args, check_mode=False, diff=False, **internal):
    """``main``'s result for ``args``, as a module process would return it (_as_a_module_process); ``internal``:
    further ``_ansible_*`` arguments (e.g. _ansible_tmpdir). An exception the module lets escape propagates (in a real
    run: MODULE FAILURE with a traceback)."""
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff, **internal)
    out = io.StringIO()
    with patch_module_args(args), _as_a_module_process(), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit:
            pass
    text = out.getvalue()
    return json.loads(text[text.index("{"):])


def run_main_ok(main, args):
    """run_main outside check mode, raising RuntimeError with the module's message when it failed."""
    res = run_main(main, args)
    if res.get("failed"):
        raise RuntimeError(res["msg"])
    return res


@contextlib.contextmanager
def _environment(env):
    """os.environ is ``env`` while the block runs, as it was after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_here(module, args=None, env=None, check=False, diff=False):
    """The result of module ``module`` (gpuops.nvidia.<name>) for ``args``, from its main() in this process, for a
    test about the module's logic rather than Ansible's process model (issue 49: an ad-hoc ``ansible`` run costs about
    2 CPU s, most of it Ansible's start-up). The module sees the environment a real run gives it
    (ansible_run.ansible_env(env)) while it runs, and starts as a module process would (run_main). Each test file keeps
    its check/apply/re-run through real ansible (ansible_run.run_module)."""
    prefix = "gpuops.nvidia."
    if not module.startswith(prefix):
        raise ValueError("run_here runs this collection's modules (%s<name>), not %r" % (prefix, module))
    main = importlib.import_module("ansible_collections.gpuops.nvidia.plugins.modules." + module[len(prefix):]).main
    with _environment(ansible_env(env)):
        result = run_main(main, args or {}, check_mode=check, diff=diff)
    if result.get("warnings"):
        # as the controller hands them on: each warning's message (ansible-core 2.19 writes a WarningSummary object)
        result["warnings"] = [w["event"]["msg"] if isinstance(w, dict) else w for w in result["warnings"]]
    return result
