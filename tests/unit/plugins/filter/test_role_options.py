"""role_options: the merged spec validate.yml gives validate_argument_spec is the one the former Jinja merge built
(each role's main options, top-level defaults dropped), without the documentation; bad input is refused."""
import copy
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.role_options import role_options

ROLES_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles")
SITE_ROLES = ["gpu_node", "mig", "compute_mode", "containerd_runtime", "container_toolkit", "cluster"]


def jinja_merge(roles):
    """What validate.yml's Jinja built before (query file | from_yaml | ... | combine, then default: none)."""
    merged = {}
    for role in roles:
        with open(os.path.join(ROLES_DIR, role, "meta", "argument_specs.yml")) as handle:
            merged.update(yaml.safe_load(handle)["argument_specs"]["main"]["options"])
    return dict((k, dict(v, default=None)) for k, v in merged.items())


def without_docs(spec, top=True):
    out = {}
    for name, option in spec.items():
        option = dict((k, v) for k, v in option.items() if k not in ("description", "version_added")
                      and not (top and k == "default"))
        if isinstance(option.get("options"), dict):
            option["options"] = without_docs(option["options"], top=False)
        out[name] = option
    return out


def test_same_spec_as_the_jinja_merge_less_the_documentation():
    new = role_options(SITE_ROLES, ROLES_DIR)
    assert new == without_docs(jinja_merge(SITE_ROLES))
    assert len(new) > 50 and all("description" not in o and "default" not in o for o in new.values())


@pytest.mark.parametrize("roles,roles_dir,words", [
    ("gpu_node", ROLES_DIR, "expects a list of role names"),
    (["../mig"], ROLES_DIR, "expects a list of role names"),
    (["nope"], ROLES_DIR, "role nope has no argument spec file"),
    (["mig"], "/dev", "role mig has no argument spec file"),
    (["mig"], "roles\x00", "must be a directory path"),
    (["mig", "mig"], ROLES_DIR, "option mig_gpus is declared by two of the roles"),
])
def test_refused(roles, roles_dir, words):
    with pytest.raises(AnsibleFilterError, match=words.replace("(", ".")):
        role_options(copy.deepcopy(roles), roles_dir)


def test_a_file_that_is_not_a_spec(tmp_path):
    (tmp_path / "r" / "meta").mkdir(parents=True)
    (tmp_path / "r" / "meta" / "argument_specs.yml").write_text("argument_specs: [1, 2]\n")
    with pytest.raises(AnsibleFilterError, match="has no argument_specs.main.options"):
        role_options(["r"], str(tmp_path))
