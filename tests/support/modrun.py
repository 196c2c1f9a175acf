"""Run a module's main() in this process (fast: no Ansible start-up, no new Python) and return its JSON result.

ansible-core's patch_module_args hands the module its arguments; the module's exit_json/fail_json output is taken
from stdout. Real-ansible runs (tests.support.ansible_run) remain the end-to-end check."""
import contextlib
import io
import json

from ansible.module_utils.testing import patch_module_args


def run_main(main, args, check_mode=False, diff=False, **internal):
    """``main``'s result for ``args``; ``internal``: further ``_ansible_*`` arguments (e.g. _ansible_tmpdir).
    An exception the module lets escape propagates (in a real run: MODULE FAILURE with a traceback)."""
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff, **internal)
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
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
