# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rack check of NVL racks before ComputeDomains (issue 52): over the inventory's racks (host variable
``gpu_node_nvl_rack``), from what the cluster play read on each node after the nodes' play. Documentation in
nvl_rack_checks.yml beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible.module_utils.six.moves.collections_abc import Mapping

RACK_VAR = "gpu_node_nvl_rack"
GPUS_VAR = "gpu_node_nvl_rack_gpus"


def _read(hostvars, node, name):
    value = hostvars[node].get(name) if name in hostvars[node] else None
    if not isinstance(value, Mapping) or value.get("failed") or value.get("skipped"):
        return None
    return value


def _texts(value):
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def _unit_words(units):
    out = []
    for unit, seen in sorted((units or {}).items() if isinstance(units, Mapping) else [], key=lambda kv: str(kv[0])):
        if isinstance(seen, Mapping) and seen.get("present") and (
                seen.get("active") or seen.get("enabled") not in ("masked", "masked-runtime")):
            out.append("%s (%s%s)" % (unit, seen.get("enabled"), ", running" if seen.get("active") else ""))
    return out


def nvl_rack_checks(hostvars, hosts, gpus="__gpuops_rack_gpus", imex="__gpuops_rack_imex", plan="__gpu_node_plan",
                    check_mode=False):
    # imported here: ansible-core loads every filter file of the collection to find one
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _host_imex
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _nvlink_rack
    if not isinstance(hostvars, Mapping):
        raise AnsibleFilterError("nvl_rack_checks: expects hostvars, got %s" % type(hostvars).__name__)
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h in hostvars
                                                       and isinstance(hostvars[h], Mapping) for h in hosts):
        raise AnsibleFilterError("nvl_rack_checks: hosts must be a list of inventory hosts (names in hostvars), got %r"
                                 % (hosts,))
    racks, order = {}, []
    for node in hosts:
        name = hostvars[node].get(RACK_VAR)
        if name in (None, ""):
            continue
        if not isinstance(name, str):
            raise AnsibleFilterError("nvl_rack_checks: %s of %s must be a rack's name (a string), got %r"
                                     % (RACK_VAR, node, name))
        count = hostvars[node].get(GPUS_VAR, _nvlink_rack.NVL72_GPUS)
        if name not in racks:
            racks[name] = {"nodes": [], "counts": {}}
            order.append(name)
        racks[name]["nodes"].append(node)
        racks[name]["counts"].setdefault(str(count), []).append(node)
    out = []
    for name in order:
        rack = racks[name]
        if len(rack["counts"]) > 1:
            raise AnsibleFilterError(
                "nvl_rack_checks: the nodes of rack %s declare different GPU counts (%s): set %s once for the rack "
                "(in its group's variables)" % (name, "; ".join("%s: %s" % (c, ", ".join(n)) for c, n in sorted(
                    rack["counts"].items())), GPUS_VAR))
        count = hostvars[rack["nodes"][0]].get(GPUS_VAR, _nvlink_rack.NVL72_GPUS)
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)      # (an inventory's "72")
        node_gpus, extra = {}, []
        for node in rack["nodes"]:
            read = _read(hostvars, node, gpus)
            node_gpus[node] = read["gpus"] if read and isinstance(read.get("gpus"), list) else None
            if node_gpus[node] is None:
                continue
            for text in _host_imex.driver_problems(str(read.get("driver_version") or "")):
                extra.append({"node": node, "message": "rack %s: node %s: %s" % (name, node, text)})
            units = _read(hostvars, node, imex)
            report = (_read(hostvars, node, plan) or {}).get("host_imex") or {}
            if check_mode is True and isinstance(report, Mapping) and report.get("state") == "masked":
                units = {"commands": []}        # (this run's node play, in check mode, would have masked them)
            if units is None:
                extra.append({"node": node, "message": "rack %s: node %s: its host IMEX units were not read: run "
                                                       "site.yml on it" % (name, node)})
            elif units.get("commands"):
                running = _unit_words(units.get("units"))
                extra.append({"node": node, "message": (
                    "rack %s: node %s: the host's IMEX service is not masked: %s - it holds the IMEX session the "
                    "ComputeDomain daemons need: set gpu_node_dra_compute_domains: true for the node (the node play "
                    "then stops, disables and masks it) or run systemctl disable --now and systemctl mask for it" % (
                        name, node, ", ".join(running)))})
            channels = report.get("channels") if isinstance(report, Mapping) else None
            for text in _texts(channels.get("problems") if isinstance(channels, Mapping) else None):
                extra.append({"node": node, "message": "rack %s: node %s: %s" % (name, node, text)})
        try:
            checked = _nvlink_rack.rack_check({"name": name, "nodes": rack["nodes"], "gpus": count}, node_gpus)
        except (ValueError, TypeError, KeyError) as exc:     # (RackDeclarationError is a ValueError)
            raise AnsibleFilterError("nvl_rack_checks: %s" % exc)
        problems = [p for p in checked["problems"] if p["node"] is not None] + extra + \
            [p for p in checked["problems"] if p["node"] is None]
        ready = not problems
        out.append({"rack": name, "nodes": rack["nodes"], "gpus": count, "ready": ready,
                    "clique": "%s.%s" % (checked["cluster_uuid"], checked["clique_id"]) if ready else None,
                    "gpus_in_clique": checked["gpus"], "problems": problems})
    return out


def nvl_rack_labels(checks, nodes):
    """{node: the nvidia.com/gpu.clique value it carries (None: none)} for ``nodes``: a ready rack's clique on its
    nodes, none on every other node."""
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) for n in nodes):
        raise AnsibleFilterError("nvl_rack_labels: nodes must be a list of node names, got %r" % (nodes,))
    if not isinstance(checks, (list, tuple)) or not all(
            isinstance(r, Mapping) and isinstance(r.get("nodes"), (list, tuple)) and isinstance(r.get("ready"), bool)
            and (r.get("clique") is None or isinstance(r.get("clique"), str)) for r in checks):
        raise AnsibleFilterError("nvl_rack_labels: expects nvl_rack_checks' result (racks with nodes, ready and "
                                 "clique), got %r" % (checks,))
    out = dict((node, None) for node in nodes)
    for rack in checks:
        for node in rack["nodes"]:
            if node in out:
                out[node] = rack["clique"] if rack["ready"] else None
    return out


class FilterModule(object):
    def filters(self):
        return {"nvl_rack_checks": nvl_rack_checks, "nvl_rack_labels": nvl_rack_labels}
