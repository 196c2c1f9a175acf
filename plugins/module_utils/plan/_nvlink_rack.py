# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rack-scale NVLink (GB200/GB300 NVL72): the node's clique label and the rack check. Pure: no I/O; they read the
fabric facts gpu_info reports per GPU (_gpu_fabric's shape, each GPU's "fabric").

``clique_label`` gives the value of ``nvidia.com/gpu.clique`` as GPU Feature Discovery computes it, and None in the
same cases, from NVIDIA/k8s-device-plugin v0.20.0 (commit 1b826acc6af3079d8923bac395c3124b8861a9a6):
internal/lm/imex.go (newImexLabeler, getFabricIDs), internal/resource/nvml-device.go (GetFabricIDs) and go-nvlib
v0.12.0's device.IsFabricAttached (pkg/nvlib/device/device.go):
- a GPU counts only when it is attached to a fabric: its fabric info answered (NOT_SUPPORTED: not attached), its
  state is COMPLETED, its cluster UUID is not all zero bytes (an HGX baseboard's GPUs complete with a zero UUID) and
  its status is SUCCESS; the GPUs that are not attached are skipped, they do not stop the label;
- the attached GPUs' cluster UUIDs (as text, lower case) and clique ids (decimal) are collected apart: more than one
  cluster UUID, or more than one clique id, gives no label (GFD logs a warning); no attached GPU gives no label;
- else the value is "<cluster UUID>.<clique id>".
(A fabric read that fails with another error fails GFD's labelling as a whole; gpu_info fails its read then, so it
has no case here.)

``rack_check`` compares the nodes an inventory group declares as one NVL72 rack: every GPU completed with SUCCESS,
every node in one cluster and clique, the declared GPU count held.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

CLIQUE_LABEL = "nvidia.com/gpu.clique"
NOT_SUPPORTED = "not supported"         # (_gpu_health.NOT_SUPPORTED: what gpu_info reports for a GPU without fabric)
NO_CLUSTER = "00000000-0000-0000-0000-000000000000"
NVL72_GPUS = 72

FIX_NOT_COMPLETED = ("the Fabric Manager has not registered it: check the rack's NVLink fabric manager (the NVLink switch "
                     "trays' NMX) and the node's nvidia-fabricmanager/nvidia-imex logs, and reset the GPU if it stays "
                     "in progress; its state must read completed")
FIX_STATUS = ("the fabric probe failed: reset the GPU or reboot the node, and check its NVLinks (nvidia-smi nvlink -s) "
              "if it fails again")
FIX_NO_FABRIC = ("NVML reports no NVLink fabric for it: the node is not an NVL tray, or its driver does not see the "
                 "fabric (check the driver branch and that the node is cabled to the rack's NVLink spine)")
FIX_OTHER_CLIQUE = ("the tray sits in another NVLink partition than the rest of the rack (a tray swap, or a partition "
                    "change not applied): check the rack's NVLink partition in NMX and reset the tray's GPUs, or "
                    "declare the node in the rack group it belongs to")
FIX_OTHER_CLUSTER = ("the tray belongs to another NVLink domain (another rack): declare it in that rack's group, or "
                     "check its NVLink cabling")
FIX_MIXED = "its GPUs disagree, so no clique label can be written for it: reset the tray's GPUs, then read them again"
FIX_SHORT = ("NVML lists fewer GPUs than a tray holds: see gpu_info's health findings (gpu_missing, gpu_lost) for the "
             "missing GPU and reboot or service the tray")
FIX_UNREAD = "its GPUs were not read: run gpuops.nvidia.gpu_info on it (it must be reachable) and check again"


class RackDeclarationError(ValueError):
    """A rack declaration that is not {"name", "nodes", "gpus"} as documented."""


def fabric_attached(fabric):
    """GFD's (go-nvlib's) IsFabricAttached over one GPU's fabric facts: state completed, status SUCCESS, a cluster UUID
    that is not all zero."""
    return (isinstance(fabric, dict) and fabric.get("state") == "completed" and fabric.get("status") == "SUCCESS"
            and str(fabric.get("cluster_uuid") or NO_CLUSTER).lower() != NO_CLUSTER)


def _check_gpus(gpus, where="gpus"):
    if not isinstance(gpus, (list, tuple)):
        raise ValueError("%s must be a list of gpu_info's GPU entries (each with index and fabric); got %r"
                         % (where, type(gpus).__name__))
    for gpu in gpus:
        if not isinstance(gpu, dict) or "fabric" not in gpu:
            raise ValueError("%s: each GPU entry is a mapping with its fabric facts (gpu_info's gpus[].fabric); got %r"
                             % (where, gpu))
        fabric = gpu["fabric"]
        if fabric != NOT_SUPPORTED and not (isinstance(fabric, dict) and "state" in fabric):
            raise ValueError("%s: GPU %s's fabric is neither fabric facts nor %r; got %r"
                             % (where, gpu.get("index"), NOT_SUPPORTED, fabric))


def fabric_ids(gpus):
    """GFD's getFabricIDs: ({cluster UUID: [GPU positions]}, {clique id text: [GPU positions]}) over the attached GPUs
    (positions in ``gpus``' order, as GFD keeps its device indexes)."""
    _check_gpus(gpus)
    clusters, cliques = {}, {}
    for position, gpu in enumerate(gpus):
        fabric = gpu["fabric"]
        if not fabric_attached(fabric):
            continue
        clusters.setdefault(str(fabric["cluster_uuid"]).lower(), []).append(position)
        cliques.setdefault("%d" % int(fabric["clique_id"]), []).append(position)
    return clusters, cliques


def clique_label(gpus):
    """The value GFD writes as ``nvidia.com/gpu.clique`` for a node with these GPUs (gpu_info's ``gpus``), and why:
    {"value": "<cluster UUID>.<clique id>" or None, "reason": None or why there is no label}."""
    clusters, cliques = fabric_ids(gpus)
    if len(clusters) > 1:
        return {"value": None, "reason": "the GPUs are in %d NVLink clusters (%s)" % (len(clusters), _spread(
            clusters, gpus))}
    if len(cliques) > 1:
        return {"value": None, "reason": "the GPUs are in %d cliques (%s)" % (len(cliques), _spread(cliques, gpus))}
    if not clusters:
        return {"value": None, "reason": "no GPU is attached to an NVLink fabric (state completed, status SUCCESS, a "
                                         "cluster UUID)"}
    return {"value": "%s.%s" % (list(clusters)[0], list(cliques)[0]), "reason": None}


def _spread(groups, gpus):
    return "; ".join("%s: GPU %s" % (key, ", ".join(str(gpus[p].get("index", p)) for p in positions))
                     for key, positions in sorted(groups.items()))


def validate_rack(rack):
    """A rack declaration {"name", "nodes": [node names], "gpus": the GPU count the rack must hold (default 72)} ->
    the same with defaults; RackDeclarationError naming what is wrong and what is valid."""
    if not isinstance(rack, dict):
        raise RackDeclarationError("a rack declaration is a mapping with name, nodes and gpus; got %r" % (rack,))
    unknown = sorted(set(rack) - {"name", "nodes", "gpus"})
    if unknown:
        raise RackDeclarationError("rack declaration: unknown key(s) %s; valid: name, nodes, gpus" % ", ".join(unknown))
    name = rack.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RackDeclarationError("rack declaration: name must be a non-empty string; got %r" % (name,))
    nodes = rack.get("nodes")
    if not isinstance(nodes, (list, tuple)) or not nodes or not all(isinstance(n, str) and n for n in nodes):
        raise RackDeclarationError("rack %s: nodes must be a non-empty list of node names; got %r" % (name, nodes))
    dupes = sorted(set(n for n in nodes if list(nodes).count(n) > 1))
    if dupes:
        raise RackDeclarationError("rack %s: node(s) listed twice: %s" % (name, ", ".join(dupes)))
    gpus = rack.get("gpus", NVL72_GPUS)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise RackDeclarationError("rack %s: gpus must be a whole number, 1 or more (72 for an NVL72); got %r"
                                   % (name, gpus))
    return {"name": name, "nodes": list(nodes), "gpus": gpus}


def _pair(fabric):
    return (str(fabric["cluster_uuid"]).lower(), int(fabric["clique_id"]))


def _gpu_list(indexes):
    return ("GPU %s" if len(indexes) == 1 else "GPUs %s") % ", ".join(str(i) for i in indexes)


def rack_check(rack, node_gpus):
    """The rack check: ``rack`` (validate_rack's declaration) against ``node_gpus`` ({node name: gpu_info's ``gpus``
    of that node, or None where it could not be read}). Returns {"rack", "ready" (no problem), "cluster_uuid",
    "clique_id" (the rack's: the pair most of its completed GPUs hold, ties to the smaller), "gpus" (the GPUs in that
    clique), "labels" ({node: clique_label's value}), "problems": [{"node" (None: the rack as a whole), "message"}]},
    each message naming the rack, the node, what is wrong and what to do."""
    rack = validate_rack(rack)
    name, problems, labels = rack["name"], [], {}
    counts, read = {}, {}
    for node in rack["nodes"]:
        gpus = node_gpus.get(node) if isinstance(node_gpus, dict) else None
        if gpus is None:
            problems.append({"node": node, "message": "rack %s: node %s: %s" % (name, node, FIX_UNREAD)})
            continue
        _check_gpus(gpus, "node %s" % node)
        read[node] = gpus
        labels[node] = clique_label(gpus)["value"]
        for gpu in gpus:
            if fabric_attached(gpu["fabric"]):
                counts[_pair(gpu["fabric"])] = counts.get(_pair(gpu["fabric"]), 0) + 1
    ident = sorted(counts, key=lambda p: (-counts[p], p))[0] if counts else None
    per_node = rack["gpus"] // len(rack["nodes"]) if rack["gpus"] % len(rack["nodes"]) == 0 else None
    for node, gpus in read.items():
        problems.extend({"node": node, "message": "rack %s: node %s: %s" % (name, node, text)}
                        for text in _node_problems(gpus, ident, per_node))
    in_clique = sum(1 for gpus in read.values() for g in gpus
                    if fabric_attached(g["fabric"]) and _pair(g["fabric"]) == ident)
    if in_clique < rack["gpus"]:
        where = "cluster %s clique %d" % (ident[0], ident[1]) if ident else "any NVLink clique"
        problems.append({"node": None, "message": (
            "rack %s: %d of the declared %d GPUs are in %s (%d node(s) declared%s): fix the nodes named above, or "
            "declare the rack's GPU count as it is built" % (
                name, in_clique, rack["gpus"], where, len(rack["nodes"]),
                "" if per_node else "; %d GPUs do not divide over them" % rack["gpus"]))})
    return {"rack": name, "ready": not problems, "cluster_uuid": ident[0] if ident else None,
            "clique_id": ident[1] if ident else None, "gpus": in_clique, "labels": labels, "problems": problems}


def _node_problems(gpus, ident, per_node):
    out = []
    by_kind = {}
    for gpu in gpus:
        fabric, index = gpu["fabric"], gpu.get("index")
        if not isinstance(fabric, dict):
            by_kind.setdefault(("none", None), []).append(index)
        elif fabric.get("state") != "completed":
            by_kind.setdefault(("state", fabric.get("state")), []).append(index)
        elif fabric.get("status") != "SUCCESS":
            by_kind.setdefault(("status", fabric.get("status")), []).append(index)
        elif not fabric_attached(fabric):
            by_kind.setdefault(("zero", None), []).append(index)
        elif _pair(fabric)[0] != ident[0]:
            by_kind.setdefault(("cluster", _pair(fabric)), []).append(index)
        elif _pair(fabric)[1] != ident[1]:
            by_kind.setdefault(("clique", _pair(fabric)), []).append(index)
    for (kind, value), indexes in sorted(by_kind.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        gpu_words = _gpu_list(indexes)
        if kind == "none":
            out.append("%s: %s" % (gpu_words, FIX_NO_FABRIC))
        elif kind == "state":
            out.append("%s: fabric state %s, not completed - %s" % (gpu_words, value, FIX_NOT_COMPLETED))
        elif kind == "status":
            out.append("%s: fabric state completed with status %s, not SUCCESS - %s" % (gpu_words, value, FIX_STATUS))
        elif kind == "cluster":
            out.append("%s: in NVLink cluster %s, the rack's is %s - %s" % (gpu_words, value[0], ident[0],
                                                                            FIX_OTHER_CLUSTER))
        elif kind == "clique":
            out.append("%s: in clique %d, the rack's is %d (cluster %s) - %s" % (gpu_words, value[1], ident[1],
                                                                                 ident[0], FIX_OTHER_CLIQUE))
        else:
            out.append("%s: completed without a cluster UUID (a single-node NVSwitch baseboard, not a rack tray) - %s"
                       % (gpu_words, FIX_NO_FABRIC))
    clusters, cliques = fabric_ids(gpus)
    if len(clusters) > 1 or len(cliques) > 1:
        label = clique_label(gpus)
        out.append("no %s label: %s - %s" % (CLIQUE_LABEL, label["reason"], FIX_MIXED))
    if per_node is not None and len(gpus) < per_node:
        out.append("NVML lists %d GPU(s), a tray of this rack holds %d - %s" % (len(gpus), per_node, FIX_SHORT))
    return out
