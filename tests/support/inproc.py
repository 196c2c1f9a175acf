"""Run a module's main() in this process (fast; for loops such as fault injection). Real-ansible runs
(tests.support.ansible_run) remain the end-to-end check."""
import contextlib
import io
import json

from ansible.module_utils.testing import patch_module_args


def run_main(main, args, check=False, diff=False):
    args = dict(args)
    args["_ansible_check_mode"] = check
    args["_ansible_diff"] = diff
    buf = io.StringIO()
    with patch_module_args(args):
        with contextlib.redirect_stdout(buf):
            try:
                main()
            except SystemExit:
                pass
    return json.loads(buf.getvalue())


def run_main_ok(main, args):
    """run_main outside check mode, raising RuntimeError with the module's message when it failed."""
    res = run_main(main, args)
    if res.get("failed"):
        raise RuntimeError(res["msg"])
    return res
