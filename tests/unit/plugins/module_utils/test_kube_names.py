"""_kube_names: label keys and values checked with apimachinery's rules before any API call."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names


@pytest.mark.parametrize("key", ["app", "example.com/app", "nvidia.com/device-plugin.config", "a.b-c/x_y.z",
                                 "k" * 63, "%s/x" % ("a" * 253)])
def test_valid_label_keys(key):
    assert _kube_names.label_key_errors(key) == []


@pytest.mark.parametrize("value", ["", "true", "mps-4", "A_b.c-1", "v" * 63])
def test_valid_label_values(value):
    assert _kube_names.label_value_errors("k", value) == []


def test_prefix_length_limit():
    assert "no more than 253" in _kube_names.label_key_errors("%s/x" % ("a" * 254))[0]


def test_normalize_label_value():
    assert _kube_names.normalize_label_value(True) == "true"
    assert _kube_names.normalize_label_value(False) == "false"
    assert _kube_names.normalize_label_value(4) == "4"
    assert _kube_names.normalize_label_value("x") == "x"


@pytest.mark.parametrize("value,ok", [
    ("nvidia.com", True), ("gpu-0", True), ("a", True), ("0.a-b.c", True),
    ("Nvidia.com", False), ("-gpu", False), ("gpu-", False), ("a..b", False), ("", False), ("a_b", False),
    (None, False), (3, False),
])
def test_is_dns_subdomain_is_the_one_shape_check(value, ok):
    # the DRA names, helm release names and device-plugin resource names are all checked with this one rule
    assert _kube_names.is_dns_subdomain(value) is ok
    if isinstance(value, str) and value:
        assert (not _kube_names.dns_subdomain_errors(value)) is ok
