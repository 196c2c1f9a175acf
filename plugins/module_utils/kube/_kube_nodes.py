# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""This host's Kubernetes Node: finding it, and the collection's cordon mark (PRIVATE: do not use from other
collections).

Found by node name, hostname or InternalIP, as the modules' node_name / hostname / internal_ips / node_lookup
parameters say; the API calls go through ``_kube.Kube``. The cordon mark (``cordon_patch``) is shared by node_cordon
and node_health, so that a cordon either of them makes is released by the same rule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError, node_path
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import dns_subdomain_errors


# The annotation that says who cordoned a node (set in the same patch as spec.unschedulable).
OWNER_ANNOTATION = "gpuops.nvidia/cordoned-by"
# The node's burn-in record in short (gpu/_burn_in.summary), put there by the health gate (node_health).
BURN_IN_ANNOTATION = "gpuops.nvidia/burn-in"


def cordon_patch(want, before, marked_by, owner):
    """The merge patch that takes the node to ``want`` (True: cordoned), or None when nothing is to change.
    ``before``: node is cordoned now; ``marked_by``: its cordoned-by annotation (or None). A node already cordoned
    is left as it is (whoever cordoned it); with ``owner``, only a cordon marked with ``owner`` is released (its mark
    removed with it), so an administrator's cordon is never undone."""
    if want:
        if before:
            return None       # already cordoned: by us (marked) or by someone else (theirs to release)
        patch = {"spec": {"unschedulable": True}}
        if owner:
            patch["metadata"] = {"annotations": {OWNER_ANNOTATION: owner}}
        return patch
    if owner is None:
        return {"spec": {"unschedulable": False}} if before else None
    if marked_by != owner:
        return None           # not our cordon (or none): leave it
    patch = {"metadata": {"annotations": {OWNER_ANNOTATION: None}}}
    if before:
        patch["spec"] = {"unschedulable": False}
    return patch


def local_identity():
    """This host's hostname, FQDN and IP addresses (used when the module runs on the node itself)."""
    names = []
    for name in (socket.gethostname(), socket.getfqdn()):
        if name and name not in names:
            names.append(name)
    ips = []
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            addr = info[4][0]
            if addr not in ips and not addr.startswith("127.") and addr != "::1":
                ips.append(addr)
    except socket.error:
        pass
    return names, ips


def _node_addresses(node, kind):
    return [a.get("address") for a in ((node.get("status") or {}).get("addresses") or []) if a.get("type") == kind]


def find_node(nodes, node_name=None, hostnames=None, internal_ips=None, method="auto"):
    """Pick this host's Node from a list of node dicts.

    method: ``name`` (metadata.name == node_name), ``hostname`` (metadata.name, the Hostname address or the
    kubernetes.io/hostname label equals a hostname or its short form), ``internal_ip`` (an InternalIP address
    equals one of ours), or ``auto`` (those three in order). Returns (node, how). Raises KubeError when nothing or
    more than one node matches.
    """
    hostnames = [h for h in (hostnames or []) if h]
    short = []
    for h in hostnames:
        for cand in (h, h.split(".")[0]):
            if cand not in short:
                short.append(cand)
    internal_ips = [ip for ip in (internal_ips or []) if ip]
    order = ["name", "hostname", "internal_ip"] if method == "auto" else [method]
    tried = []
    for how in order:
        if how == "name":
            if not node_name:
                continue
            tried.append("node name %r" % node_name)
            found = [n for n in nodes if n["metadata"]["name"] == node_name]
        elif how == "hostname":
            if not short:
                continue
            tried.append("hostname %s" % "/".join(short))
            found = [n for n in nodes
                     if n["metadata"]["name"] in short
                     or set(_node_addresses(n, "Hostname")) & set(short)
                     or ((n["metadata"].get("labels") or {}).get("kubernetes.io/hostname") in short)]
        else:
            if not internal_ips:
                continue
            tried.append("InternalIP %s" % ", ".join(internal_ips))
            found = [n for n in nodes if set(_node_addresses(n, "InternalIP")) & set(internal_ips)]
        if len(found) == 1:
            return found[0], how
        if len(found) > 1:
            raise KubeError("%d nodes match %s (%s): give node_name to say which one is this host"
                            % (len(found), tried[-1], ", ".join(sorted(n["metadata"]["name"] for n in found))))
    if not tried:
        raise KubeError("cannot look up this host's node: give node_name, hostname or internal_ips")
    raise KubeError("no Kubernetes node matches %s (node_lookup=%s); the cluster has %s. Give node_name (the name "
                    "`kubectl get nodes` shows) if the node is registered under another name"
                    % (" or ".join(tried), method,
                       ", ".join(sorted(n["metadata"]["name"] for n in nodes)) or "no nodes"))


def find_this_node(kube, params):
    """This host's Node, from the modules' node_name / hostname / internal_ips / node_lookup parameters;
    hostnames and IPs not given default to those of the machine the module runs on. Returns (node, how)."""
    hostnames, ips = params["hostname"], params["internal_ips"]
    if hostnames is None or ips is None:
        local_names, local_ips = local_identity()
        hostnames = local_names if hostnames is None else hostnames
        ips = local_ips if ips is None else ips
    return lookup_node(kube, node_name=params["node_name"], hostnames=hostnames, internal_ips=ips,
                       method=params["node_lookup"])


def lookup_node(kube, node_name=None, hostnames=None, internal_ips=None, method="auto"):
    """Find this host's Node through the API: a direct GET by name first, then a list for hostname/IP matches."""
    if node_name and dns_subdomain_errors(node_name):
        raise KubeError("node_name %s is not a Kubernetes node name (a lowercase RFC 1123 subdomain of 1 to 253 "
                        "characters); nothing changed" % repr(node_name)[:120])
    if node_name and method in ("auto", "name"):
        try:
            return kube.get("read node %s" % node_name, node_path(node_name)), "name"
        except KubeError as exc:
            if exc.status != 404 or method == "name":
                if exc.status == 404:
                    raise KubeError("node %r does not exist in the cluster (404); check node_name" % node_name,
                                    status=404)
                raise
    nodes = kube.get("list nodes", "/api/v1/nodes").get("items") or []
    return find_node(nodes, node_name=node_name, hostnames=hostnames, internal_ips=internal_ips, method=method)
