"""The fabric facts' decoder (_gpu_fabric): NVML's health mask fields at the shifts and widths nvml.h gives (checked
against pynvml's own constants), the mask's round trip, and the cluster UUID's text as GFD writes it."""
import uuid

import pynvml
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_fabric as fabric
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import NOT_SUPPORTED


@pytest.mark.parametrize("field,suffix", [
    ("degraded_bandwidth", "DEGRADED_BW"), ("route_recovery_in_progress", "ROUTE_RECOVERY"),
    ("route_unhealthy", "ROUTE_UNHEALTHY"), ("access_timeout_recovery", "ACCESS_TIMEOUT_RECOVERY"),
    ("incorrect_configuration", "INCORRECT_CONFIGURATION"), ("partition_assigned", "PARTITION_ASSIGNED"),
    ("gfm_state", "GFM_STATE"),
])
def test_each_field_sits_where_pynvml_puts_it(field, suffix):
    name, shift, width, dummy = [f for f in fabric.HEALTH_FIELDS if f[0] == field][0]
    assert shift == getattr(pynvml, "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_" + suffix)
    assert width == getattr(pynvml, "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_" + suffix)


def test_values_are_named_as_nvml_h_names_them():
    assert pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE == 1
    assert pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE == 2
    for code, name in fabric.INCORRECT_CONFIGURATION.items():
        const = "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_" + name.upper()
        assert getattr(pynvml, const) == code, const
    assert pynvml.NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED == 2
    assert fabric.FABRIC_STATE_CODES == {"not_started": pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED,
                                         "in_progress": pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
                                         "completed": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED}


def test_the_gb200_nvl72_reading_0xaa_is_a_healthy_mask():
    # NVIDIA/nccl#2186 quotes healthMask 0xaa from a GB200 NVL72: the four two-bit fields all FALSE
    health = fabric.decode_health(0xAA)
    assert health == {"degraded_bandwidth": False, "route_recovery_in_progress": False, "route_unhealthy": False,
                      "access_timeout_recovery": False, "incorrect_configuration": NOT_SUPPORTED,
                      "partition_assigned": NOT_SUPPORTED, "gfm_state": NOT_SUPPORTED}
    assert fabric.troubles({"health": health}) == []


def test_a_degraded_and_misconfigured_mask_names_its_troubles():
    mask = 0xA9 | (5 << 8) | (2 << 14)
    health = fabric.decode_health(mask)
    assert health["degraded_bandwidth"] is True and health["incorrect_configuration"] == "insufficient_nvlinks"
    assert fabric.troubles({"health": health}) == [
        "NVLink bandwidth degraded", "the global fabric manager is disconnected",
        "incorrect configuration (insufficient_nvlinks)"]


def test_unknown_codes_and_bits_are_kept_not_dropped():
    health = fabric.decode_health((3 << 0) | (0xF << 8) | (1 << 20))
    assert health["degraded_bandwidth"] == "unknown (3)" and health["incorrect_configuration"] == "unknown (15)"
    assert health["unknown_bits"] == "0x00100000"


field_values = st.fixed_dictionaries({}, optional=dict(
    (name, st.sampled_from([NOT_SUPPORTED] + list(values.values()))) for name, dummy, dummy2, values in fabric.HEALTH_FIELDS))


@settings(max_examples=300, deadline=None)
@given(field_values)
def test_encode_then_decode_gives_the_fields_back(fields):
    decoded = fabric.decode_health(fabric.encode_health(fields))
    assert decoded == dict((name, fields.get(name, NOT_SUPPORTED)) for name in fabric.HEALTH_FIELD_NAMES)


def test_decode_then_encode_gives_every_named_mask_back():
    """Every 16-bit mask, not a sample: a tenth of them decode to named values only (6561 = 3 ** 8), too few for
    Hypothesis to draw by filtering (its filter_too_much health check failed a run)."""
    named = 0
    for mask in range(0x10000):
        decoded = fabric.decode_health(mask)
        if any(str(v).startswith("unknown") for v in decoded.values()) or "unknown_bits" in decoded:
            continue
        named += 1
        assert fabric.encode_health(decoded) == mask, mask
    assert named == 3 ** 8


def test_encode_refuses_a_value_nvml_has_no_code_for():
    with pytest.raises(fabric.FabricValueError, match="incorrect_configuration needs one of"):
        fabric.encode_health({"incorrect_configuration": "broken"})
    with pytest.raises(fabric.FabricValueError, match="degraded_bandwidth"):
        fabric.encode_health({"degraded_bandwidth": 1})      # a bool, not NVML's code


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_cluster_uuid_text_is_the_canonical_lower_case_form(raw):
    text = fabric.cluster_uuid_text(raw)
    assert text == text.lower() and len(text) == 36 and uuid.UUID(text).bytes == raw
    assert fabric.cluster_uuid_bytes(text) == raw


def test_facts_of_the_v1_struct_have_no_mask_and_state_0_is_no_fabric():
    raw = uuid.UUID("6a130f54-faaa-4b8f-847f-be44ab70f917").bytes
    got = fabric.facts(3, "SUCCESS", raw, 32766)
    assert got == {"state": "completed", "status": "SUCCESS", "cluster_uuid": "6a130f54-faaa-4b8f-847f-be44ab70f917",
                   "clique_id": 32766, "health_mask": NOT_SUPPORTED, "health": NOT_SUPPORTED}
    assert fabric.health_entry(got) == {"state": "completed", "status": "SUCCESS", "degraded_bandwidth": NOT_SUPPORTED}
    assert fabric.facts(0, "SUCCESS", raw, 1, 0xAA) == NOT_SUPPORTED
    with pytest.raises(fabric.FabricValueError, match="32 hex digits"):
        fabric.cluster_uuid_bytes("rack-a")
