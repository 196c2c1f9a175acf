"""The MIG boot script's bundle (roles/mig/vars/main.yml __mig_lib_files) holds every module_util that its files
import: the boot script runs without the collection installed, so a missing one fails only at boot (found when
_mig_apply.py began to read config files through _input_file.py)."""
import os
import re

import yaml

from tests.support.ansible_run import ROOT

UTILS = os.path.join(ROOT, "plugins", "module_utils")
IMPORT = re.compile(r"ansible_collections\.gpuops\.nvidia\.plugins\.module_utils\.(\w+)"
                    r"(?:\.(\w+)| import \(?([\w, ]+))")


def imported(name, path=None):
    """The module_utils files (``package/_name.py``) that ``name`` (or the file at ``path``) imports."""
    with open(path or os.path.join(UTILS, name)) as handle:
        text = handle.read()
    out = set()
    for package, single, many in IMPORT.findall(text):
        for module in ([single] if single else [m.split()[0] for m in many.split(",") if m.strip()]):
            if module and os.path.exists(os.path.join(UTILS, package, module + ".py")):
                out.add("%s/%s.py" % (package, module))
    return out


def test_the_bundle_holds_what_its_files_import():
    with open(os.path.join(ROOT, "roles", "mig", "vars", "main.yml")) as handle:
        variables = yaml.safe_load(handle)
    # with mig_cdi (the boot script's CDI step), both lists; the step imports only from the second
    bundle = set(variables["__mig_lib_files"]) | set(variables["__mig_cdi_lib_files"])
    assert "node/_mig_apply.py" in bundle
    missing = {}
    script = imported(None, os.path.join(ROOT, "roles", "mig", "files", "gpuops-mig-apply.py"))
    assert "node/_mig_apply.py" in script and "plan/_mig_plan.py" in script
    if script - bundle:
        missing["gpuops-mig-apply.py"] = sorted(script - bundle)
    for name in sorted(bundle):
        lacking = imported(name) - bundle
        if lacking:
            missing[name] = sorted(lacking)
    assert not missing, "roles/mig/vars/main.yml __mig_lib_files lacks what these import: %s" % missing


def test_the_import_scan_sees_both_forms():
    assert {"common/_input_file.py", "plan/_mig_plan.py"} <= imported("node/_mig_apply.py")
    assert "plan/_mig_profiles.py" in imported("plan/_mig_plan.py")     # the parenthesised, one name a line form
