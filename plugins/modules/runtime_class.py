#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: runtime_class
short_description: Manage the C(nvidia) RuntimeClass that lets pods select the NVIDIA container runtime
version_added: 0.1.0
description:
  - Creates, updates or removes a Kubernetes RuntimeClass (C(node.k8s.io/v1)), by default C(nvidia) with handler
    C(nvidia) - the containerd runtime that C(nvidia-ctk runtime configure --runtime=containerd) defines.
  - Needed when the nvidia runtime is B(not) containerd's default runtime - pods (and the device plugin chart, through
    its C(runtimeClassName) value) must then name it. NVIDIA's chart does not create the object itself. Give
    O(containerd_default_runtime) and the module does nothing when nvidia already is the default.
  - The handler of a RuntimeClass cannot be changed in place; a different handler is refused unless
    O(recreate=true).
  - Check mode uses the API's server-side dry run.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  name:
    description: RuntimeClass name (what pods put in C(runtimeClassName)).
    type: str
    default: nvidia
  handler:
    description: The containerd runtime handler name (C(plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<handler>)).
    type: str
    default: nvidia
  state:
    description: Whether the RuntimeClass must exist.
    type: str
    choices: [present, absent]
    default: present
  containerd_default_runtime:
    description:
      - containerd's default runtime name on the GPU nodes (for example C(runc), or C(nvidia) after
        C(nvidia-ctk runtime configure --set-as-default)). When it equals O(handler), pods get the nvidia runtime
        without a RuntimeClass, and O(state=present) changes nothing.
    type: str
  node_selector:
    description: C(scheduling.nodeSelector) - pods using this class only land on nodes with these labels.
    type: dict
  recreate:
    description: Delete and recreate the object when its handler differs (the API forbids changing it in place).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Server-side dry run.
  diff_mode:
    support: full
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: RuntimeClass nvidia, unless containerd already runs everything with nvidia
  gpuops.nvidia.runtime_class:
    containerd_default_runtime: "{{ containerd_result.default_runtime | default(omit) }}"
    node_selector:
      nvidia.com/gpu.present: "true"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
runtime_class:
  description: The RuntimeClass after the run (as the dry run answered in check mode); empty when absent.
  returned: always
  type: dict
  sample: {"name": "nvidia", "handler": "nvidia", "scheduling": null}
skipped_reason:
  description: Why nothing was needed.
  returned: when containerd's default runtime already is the handler
  type: str
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Done, run_module


def _view(obj):
    if not obj:
        return {}
    return {"name": obj["metadata"]["name"], "handler": obj.get("handler"),
            "scheduling": obj.get("scheduling") or None}


class RuntimeClass(KubeRun):
    """validate -> read the RuntimeClass (none needed where containerd's default runtime is the handler: done) ->
    plan (create, patch, recreate or delete) -> apply (in check mode the API server's dry run) and read back."""

    argument_spec = dict(
        name=dict(type="str", default="nvidia"),
        handler=dict(type="str", default="nvidia"),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        containerd_default_runtime=dict(type="str"),
        node_selector=dict(type="dict"),
        recreate=dict(type="bool", default=False),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    apply_in_check_mode = True

    def validate(self):
        p = self.params
        errors = (_kube_names.dns_subdomain_errors(p["name"], "name")
                  + _kube_names.dns_label_errors(p["handler"], "handler"))
        self.selector = dict((k, _kube_names.normalize_label_value(v)) for k, v in (p["node_selector"] or {}).items())
        errors += _kube_names.validate_labels(self.selector)
        return errors

    def read(self):
        p = self.params
        if p["state"] == "present" and p["containerd_default_runtime"] == p["handler"]:
            raise Done(runtime_class={}, skipped_reason=(
                "containerd's default runtime already is %s: pods get it without a RuntimeClass" % p["handler"]))
        self.path = _kube.runtime_class_path(p["name"])
        try:
            return self.kube.get("read RuntimeClass %s" % p["name"], self.path)
        except KubeError as exc:
            if exc.status != 404:
                raise
            return None

    def plan(self, current):
        p = self.params
        self.result["runtime_class"] = _view(current) if p["state"] == "present" else {}
        if p["state"] == "absent":
            return "delete" if current else None
        scheduling = {"nodeSelector": self.selector} if self.selector else None
        self.body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": p["name"]},
                     "handler": p["handler"]}
        if scheduling:
            self.body["scheduling"] = scheduling
        want = {"name": p["name"], "handler": p["handler"], "scheduling": scheduling}
        if current and current.get("handler") != p["handler"]:
            if not p["recreate"]:
                self.refuse("RuntimeClass %s has handler %r, not %r; the API does not allow changing a handler in "
                            "place. Set recreate: true to delete and recreate it (pods created in between cannot use "
                            "it)" % (p["name"], current.get("handler"), p["handler"]))
            return "recreate"
        if not current:
            return "create"
        return "patch" if _view(current) != want else None

    def apply(self, current, changes):
        p, kube, dry, path = self.params, self.kube, self.module.check_mode, self.path
        if changes == "delete":
            kube.delete("delete RuntimeClass %s" % p["name"], path, dry_run=dry)
            after = {}
        else:
            if changes == "recreate":
                kube.delete("delete RuntimeClass %s" % p["name"], path, dry_run=dry)
                answer = kube.create("create RuntimeClass %s" % p["name"], _kube.runtime_class_path(), self.body) \
                    if not dry else self.body
            elif changes == "create":
                answer = kube.create("create RuntimeClass %s" % p["name"], _kube.runtime_class_path(), self.body,
                                     dry_run=dry)
            else:
                answer = kube.patch("patch RuntimeClass %s" % p["name"], path,
                                    {"scheduling": self.body.get("scheduling")}, dry_run=dry)
            after = _view(answer)
            if not dry:
                after = _view(kube.get("read RuntimeClass %s" % p["name"], path))
        self.result["runtime_class"] = after
        self.set_diff(_view(current), after)


def main():
    run_module(RuntimeClass)


if __name__ == "__main__":
    main()
