"""The compute-mode boot unit: byte for byte what the compute_mode role's Jinja template wrote before the text moved
into Python (so nodes converged by earlier releases see no change), with and without persistence mode."""
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.compute_mode_unit import compute_mode_unit

GPUS = [{"index": 1, "uuid": "GPU-bf6be205-0034-59aa-bc14-1ea5064735c8", "nvidia_smi_mode": "PROHIBITED"},
        {"index": 0, "uuid": "GPU-1ed5672c-74f2-5008-89d0-f0141d8e60cf", "nvidia_smi_mode": "DEFAULT"}]
HEADER = """# Managed by the gpuops.nvidia.compute_mode role: edits here are overwritten.
# Compute mode is not persistent: it returns to Default on reboot and when the driver de-initialises an idle
# GPU. This unit sets it again at boot, by GPU UUID (indices can change when GPUs are added or removed).
[Unit]
Description=Re-apply NVIDIA GPU compute modes (gpuops.nvidia)
After=nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
"""
FOOTER = "\n[Install]\nWantedBy=multi-user.target\n"


def test_unit_in_index_order_with_persistence():
    assert compute_mode_unit(GPUS) == HEADER + (
        "ExecStart=/usr/bin/nvidia-smi -i GPU-1ed5672c-74f2-5008-89d0-f0141d8e60cf -pm 1\n"
        "ExecStart=/usr/bin/nvidia-smi -i GPU-1ed5672c-74f2-5008-89d0-f0141d8e60cf -c DEFAULT\n"
        "ExecStart=/usr/bin/nvidia-smi -i GPU-bf6be205-0034-59aa-bc14-1ea5064735c8 -pm 1\n"
        "ExecStart=/usr/bin/nvidia-smi -i GPU-bf6be205-0034-59aa-bc14-1ea5064735c8 -c PROHIBITED\n") + FOOTER


def test_unit_without_persistence_and_another_nvidia_smi():
    assert compute_mode_unit(GPUS, persistence="no", nvidia_smi="/opt/nvidia/bin/nvidia-smi") == HEADER + (
        "ExecStart=/opt/nvidia/bin/nvidia-smi -i GPU-1ed5672c-74f2-5008-89d0-f0141d8e60cf -c DEFAULT\n"
        "ExecStart=/opt/nvidia/bin/nvidia-smi -i GPU-bf6be205-0034-59aa-bc14-1ea5064735c8 -c PROHIBITED\n") + FOOTER


@pytest.mark.parametrize("bad", [None, "GPU-1", [{"index": 0, "uuid": "GPU-1"}]])
def test_not_a_compute_mode_result(bad):
    with pytest.raises(AnsibleFilterError, match="compute_mode result"):
        compute_mode_unit(bad)


@pytest.mark.parametrize("gpu,fragment", [
    # a line break in a UUID or the path would add a directive of its own to the unit (found by the fuzzer)
    (dict(GPUS[0], uuid="GPU-1\nExecStart=/bin/sh -c id"), "gpus[0].uuid must be a GPU UUID"),
    (dict(GPUS[0], index="0"), "gpus[0].index must be a GPU index"),
    (dict(GPUS[0], index=True), "gpus[0].index must be a GPU index"),
    (dict(GPUS[0], nvidia_smi_mode="DEFAULT -pm 0"), "gpus[0].nvidia_smi_mode must be one of DEFAULT"),
])
def test_values_that_would_change_the_unit_are_refused(gpu, fragment):
    with pytest.raises(AnsibleFilterError, match=re.escape(fragment)):
        compute_mode_unit([gpu])


@pytest.mark.parametrize("path", ["nvidia-smi", "/usr/bin/nvidia smi", "/x\nExecStart=/bin/true", 5])
def test_nvidia_smi_must_be_one_absolute_path(path):
    with pytest.raises(AnsibleFilterError, match="nvidia_smi must be an absolute path"):
        compute_mode_unit(GPUS, nvidia_smi=path)


@pytest.mark.parametrize("value", [{}, [1], "maybe", 1.5])
def test_persistence_must_be_a_boolean(value):
    with pytest.raises(AnsibleFilterError, match="persistence must be a boolean"):
        compute_mode_unit(GPUS, persistence=value)


def test_a_mode_not_read_is_not_reapplied():
    unit = compute_mode_unit([dict(GPUS[1], nvidia_smi_mode=None)], persistence=False)
    assert unit == HEADER + FOOTER
