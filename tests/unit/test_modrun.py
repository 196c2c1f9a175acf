"""tests/support/modrun.py, the in-process module runner the unit tests use for a module's logic (issue 49): its
result is what a module process returns, whatever the test worker imported before."""
import pytest
from ansible.module_utils.basic import AnsibleModule

# controller code, as a test file that tests a filter plugin imports it: from then on, in this worker, ansible-core
# 2.19's AnsibleModule.warn prints to the controller's display unless the runner says it is a module process
from ansible_collections.gpuops.nvidia.plugins.filter import device_plugin_profiles  # noqa: F401  # pylint: disable=unused-import
from tests.support.modrun import run_here, run_main


def _warns():
    module = AnsibleModule(argument_spec=dict(text=dict(type="str", required=True)))
    module.warn(module.params["text"])
    module.exit_json(changed=False)


def test_a_warning_comes_back_in_the_result_once_per_run():
    for _run in range(2):
        res = run_main(_warns, {"text": "GPU 0 is busy"})
        assert len(res["warnings"]) == 1 and "GPU 0 is busy" in str(res["warnings"][0]), res


def test_only_this_collections_modules():
    with pytest.raises(ValueError, match="runs this collection's modules"):
        run_here("ansible.builtin.ping")
