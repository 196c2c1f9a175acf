# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes name and label syntax, checked before any API call (PRIVATE: do not use from other collections).

The rules and their wording are apimachinery's (k8s.io/apimachinery/pkg/util/validation/validation.go:
IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain, IsDNS1123Label), so a message reads as the API server's
would. Pure functions: no I/O, no client.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = re.compile("^" + QUALIFIED_NAME_FMT + "$")
_DNS1123_SUBDOMAIN = re.compile("^" + DNS1123_SUBDOMAIN_FMT + "$")
_DNS1123_LABEL = re.compile("^" + DNS1123_LABEL_FMT + "$")

NAME_RULE = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation is '%s')"
             % QUALIFIED_NAME_FMT)
PREFIX_RULE = ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
               "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
               "validation is '%s')" % DNS1123_SUBDOMAIN_FMT)
VALUE_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
              "must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', or '12345', regex "
              "used for validation is '(%s)?')" % QUALIFIED_NAME_FMT)
# node-feature-discovery's label for a node with an NVIDIA (PCI vendor 10de) display controller, in both of its
# formats. NFD's own default (sources.pci.deviceLabelFields [class, vendor]: kubernetes-sigs/node-feature-discovery
# source/pci/pci.go, the default since its PCI source appeared in v0.4.0, commit b0fedab7; the same at v0.19.0) names the
# device class too: pci-0300_10de (VGA controller) and pci-0302_10de (3D controller: the data-centre GPUs). The NFD that
# NVIDIA's charts deploy is configured with deviceLabelFields [vendor] (NVIDIA/gpu-operator v26.7.0
# deployments/gpu-operator/values.yaml, NVIDIA/k8s-device-plugin v0.20.0 deployments/helm/nvidia-device-plugin/
# values.yaml): pci-10de. NVIDIA's GPU Operator takes any of the three as a GPU node (its gpuNodeLabels,
# controllers/state_manager.go, since v1.2.0) and labels it nvidia.com/gpu.present=true itself; the device plugin
# chart's node affinity names only pci-10de (NFD_CHART_GPU_LABELS).
NFD_PCI_GPU_LABELS = ("feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/pci-0302_10de.present",
                      "feature.node.kubernetes.io/pci-0300_10de.present")
# The NFD labels (key -> value) that the required node affinity of NVIDIA's device plugin chart admits (its values.yaml
# `affinity`, the same in v0.17.0 and v0.20.0; the DRA driver's kubelet plugin has the same terms): pci-10de, and the
# CPU vendor NVIDIA of Tegra nodes. A node NFD labels only in the class-prefixed form is not among them.
NFD_CHART_GPU_LABELS = ((NFD_PCI_GPU_LABELS[0], "true"), ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"))


def nfd_gpu_labels(labels):
    """The NFD labels of ``labels`` (a node's) that mark it as an NVIDIA GPU node, in any of NFD's formats: the PCI
    labels of NFD_PCI_GPU_LABELS set to ``true``, and the Tegra CPU vendor; sorted."""
    labels = labels or {}
    found = [key for key in NFD_PCI_GPU_LABELS if labels.get(key) == "true"]
    found += [key for key, value in NFD_CHART_GPU_LABELS[1:] if labels.get(key) == value]
    return sorted(found)


# is_label_value's rule, in the words of a message about a name the collection turns into a label value
LABEL_VALUE_RULE = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"


def is_dns_subdomain(value):
    """Whether ``value`` has the shape of a lowercase RFC 1123 subdomain (length not checked: callers bound it)."""
    return isinstance(value, str) and bool(_DNS1123_SUBDOMAIN.match(value))


def dns_subdomain_errors(value, what="value"):
    if not value:
        return ["%s must not be empty" % what]
    errs = []
    if len(value) > 253:
        errs.append("%s %r must be no more than 253 characters" % (what, value))
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append("%s %r: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                    "or '.', and must start and end with an alphanumeric character (regex used for validation is "
                    "'%s')" % (what, value, DNS1123_SUBDOMAIN_FMT))
    return errs


def dns_label_errors(value, what="value"):
    if not value or len(value) > 63 or not _DNS1123_LABEL.match(value):
        return ["%s %r: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', must "
                "start and end with an alphanumeric character and be at most 63 characters (regex used for "
                "validation is '%s')" % (what, value, DNS1123_LABEL_FMT)]
    return []


def label_key_errors(key):
    """Errors for a label key, worded like the API server's (IsQualifiedName)."""
    if not isinstance(key, str) or not key:
        return ["label key %r: name part must be non-empty" % (key,)]
    errs = []
    name = key
    if "/" in key:
        prefix, name = key.split("/", 1)
        if not prefix:
            errs.append("label key %r: prefix part must be non-empty" % key)
        else:
            if len(prefix) > 253:
                errs.append("label key %r: prefix part must be no more than 253 characters" % key)
            if not _DNS1123_SUBDOMAIN.match(prefix):
                errs.append("label key %r: %s" % (key, PREFIX_RULE))
    if not name:
        errs.append("label key %r: name part must be non-empty" % key)
        return errs
    if len(name) > 63:
        errs.append("label key %r: name part must be no more than 63 characters" % key)
    if not _QUALIFIED_NAME.match(name):
        errs.append("label key %r: %s" % (key, NAME_RULE))
    return errs


def label_value_errors(key, value):
    if not isinstance(value, str):
        return ["label %s: value %s must be a string, got a %s"
                % (repr(key)[:100], repr(value)[:100], type(value).__name__)]
    errs = []
    if len(value) > 63:
        errs.append("label %r: value %r must be no more than 63 characters" % (key, value))
    if value and not _QUALIFIED_NAME.match(value):
        errs.append("label %r: value %r: %s" % (key, value, VALUE_RULE))
    return errs


def is_label_value(value):
    """Whether ``value`` is a label value that is not empty (IsValidLabelValue): the test of a name the collection
    writes as a label value (a device plugin profile, a DRA claim template set or profile); LABEL_VALUE_RULE says it."""
    return isinstance(value, str) and 0 < len(value) <= 63 and bool(_QUALIFIED_NAME.match(value))


def to_label_value(text, fallback):
    """``text`` made a valid label value (also a taint's value): each character outside ``[A-Za-z0-9_.-]`` becomes
    '-', at most 63 characters, starting and ending with an alphanumeric character; ``fallback`` when nothing is
    left."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text if isinstance(text, str) else "")[:63]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    return value if value else fallback


def normalize_label_value(value):
    """YAML turns ``true`` and ``4`` into bool/int; Kubernetes labels are strings ("true", "4")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or isinstance(value, float):
        return str(value)
    return value


def validate_labels(labels):
    """Return a list of errors for a {key: value} dict (values may be None when removing)."""
    errs = []
    for key, value in (labels or {}).items():
        errs.extend(label_key_errors(key))
        if value is not None:
            errs.extend(label_value_errors(key, value))
    return errs
