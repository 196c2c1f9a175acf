"""Run a module's main() in-process with ansible-core's patch_module_args and return its JSON result."""
import contextlib
import io
import json

from ansible.module_utils.testing import patch_module_args


def run_main(main, args, check_mode=False, diff=False):
    args = dict(args)
    args["_ansible_check_mode"] = check_mode
    args["_ansible_diff"] = diff
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit:
            pass
    text = out.getvalue()
    return json.loads(text[text.index("{"):])
