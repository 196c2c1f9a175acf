# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The device plugin's Xid health check made to agree with the health gate (PRIVATE). Pure: no I/O.

NVIDIA's device plugin marks a GPU unhealthy on every Xid it does not skip, and never marks it healthy again while it
runs (NVIDIA/k8s-device-plugin internal/rm/health.go and internal/plugin/server.go; issue 234). Its skip list is its
built-in one (``default_skips``) plus the environment variable DP_DISABLE_HEALTHCHECKS of the plugin container. The
collection's gate (``_gpu_health``) decides per node, by the policy ``gpu_node_health_policy``, which Xid finding kinds
block a node. Where the policy does not block an Xid that the plugin would count as fatal, the GPU would stay out of
the allocatable count for good while the gate says the node is healthy; this module computes the Xids the plugin
should skip so that the two agree, and how to tell the plugin.

The facts (tests/fixtures/device-plugin/health-checks.yaml records them with their sources): the variable's value is
``all`` (or ``xids``: the Xid check off) or a comma-separated list of Xids skipped in addition to the built-in ones;
from v0.18.0 an item ``0`` also turns the whole check off. NVIDIA's chart has no value that sets an environment
variable on the plugin container, so the value is written on the release's plugin DaemonSet (``env_plan``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _xid
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import HealthPolicyError, validate_policy

DISABLE_ENV = "DP_DISABLE_HEALTHCHECKS"
PLUGIN_CONTAINER = "nvidia-device-plugin-ctr"
# The DaemonSet annotation that says which value of DISABLE_ENV this collection wrote (a value without it, or with
# another, is someone else's and is left alone).
MARK = "gpuops.nvidia/dp-disable-healthchecks"
ALL = "all"
XID_KINDS = ("xid_fatal", "xid_gpu", "xid_application")
# The largest Xid code the collection's kernel-log reader reads (_xid: 1 to 5 digits).
MAX_XID = 99999
# (first chart version, the Xids the plugin skips whatever its environment says), newest last.
DEFAULT_SKIPS = (("0.0.0", (13, 31, 43, 45, 68)), ("0.17.1", (13, 31, 43, 45, 68, 109)))
SETTING_RULE = ("'auto' (from every GPU node's gpu_node_health_policy), 'all' (the plugin's Xid check off), or a "
                "list of Xid codes (whole numbers from 1 to %d) that the plugin skips besides its own %s; [] leaves "
                "only the plugin's own" % (MAX_XID, ", ".join(str(c) for c in DEFAULT_SKIPS[-1][1])))


def _version_tuple(version):
    parts = []
    for part in str(version or "").lstrip("v").partition("-")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple((parts + [0, 0, 0])[:3])


def default_skips(chart_version):
    """The Xids the plugin of ``chart_version`` (the chart's version is the plugin's) skips on its own; the newest
    list when the version is not known."""
    if not chart_version:
        return frozenset(DEFAULT_SKIPS[-1][1])
    found = DEFAULT_SKIPS[0][1]
    for since, codes in DEFAULT_SKIPS:
        if _version_tuple(chart_version) >= _version_tuple(since):
            found = codes
    return frozenset(found)


def gate_kinds(code):
    """The finding kinds the gate can give an Xid of ``code`` (``_gpu_health.xid_kind`` of ``_xid.classify``): a code
    outside NVIDIA's catalog is xid_fatal; 154 is xid_fatal or xid_gpu by its message, which the plugin does not see."""
    if code not in _xid.CATALOG:
        return ("xid_fatal",)
    if code == 154:
        return ("xid_fatal", "xid_gpu")
    event = _xid.classify(code)
    if event["fatal"]:
        return ("xid_fatal",)
    return ("xid_application",) if event["cause"] == "application" else ("xid_gpu",)


def node_skips(policy):
    """The Xids one node's health policy does not block (``ALL`` when it blocks no Xid kind: then no Xid, known or
    not, blocks the node), as a frozenset of catalog codes otherwise. Raises HealthPolicyError on a bad policy."""
    merged = validate_policy(policy)
    blocking = set(kind for kind in XID_KINDS if merged[kind] == "block")
    if not blocking:
        return ALL
    return frozenset(code for code in _xid.CATALOG if not blocking.intersection(gate_kinds(code)))


def fleet_skips(policies):
    """The Xids the plugin may skip on every node of ``policies`` ({node: its health policy}): one chart serves the
    whole fleet, so an Xid is skipped only when no node's policy blocks it (the intersection of ``node_skips``), and
    the check is off (``ALL``) only when every node blocks no Xid. Returns {"skip": ALL or a sorted list, "differ":
    whether the nodes' policies differ on Xids, "held": {code: [the nodes whose policy blocks it]} for the Xids some
    node would skip and another blocks}. No node: nothing to skip ([])."""
    per_node = dict((node, node_skips(policy)) for node, policy in policies.items())
    if not per_node:
        return {"skip": [], "differ": False, "held": {}}
    sets = list(per_node.values())
    if all(s == ALL for s in sets):
        return {"skip": ALL, "differ": False, "held": {}}
    universe = frozenset(_xid.CATALOG)
    concrete = dict((node, universe if s == ALL else s) for node, s in per_node.items())
    common = frozenset.intersection(*concrete.values())
    anywhere = frozenset.union(*concrete.values())
    held = dict((code, sorted(node for node, s in concrete.items() if code not in s))
                for code in sorted(anywhere - common))
    return {"skip": sorted(common), "differ": len(set(per_node.values())) > 1, "held": held}


def _is_code(value):
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_XID


def setting_errors(setting, what, auto=True):
    """What is wrong with a user's skip setting (``SETTING_RULE``; without ``auto`` where no policy is at hand), or
    []. ``what`` names it in the messages."""
    rule = SETTING_RULE if auto else SETTING_RULE.replace(
        "'auto' (from every GPU node's gpu_node_health_policy), ", "")
    if isinstance(setting, str):
        if setting == ALL or (auto and setting == "auto"):
            return []
        return ["%s: %r is not a valid setting; give %s" % (what, setting[:80], rule)]
    if not isinstance(setting, (list, tuple)):
        return ["%s: a %s is not a valid setting; give %s" % (what, type(setting).__name__, rule)]
    errors = []
    for index, code in enumerate(setting):
        if not _is_code(code):
            hint = " (0 is the plugin's own word for every Xid since v0.18.0: use 'all' to turn the check off)" \
                if code == 0 and not isinstance(code, bool) else ""
            errors.append("%s[%d]: %s is not an Xid code, a whole number from 1 to %d%s"
                          % (what, index, repr(code)[:80], MAX_XID, hint))
        if len(errors) >= 5:
            break
    return errors


def resolve(setting, policies, what="skip setting"):
    """The skip decision: ``setting`` 'auto' computes it from ``policies`` (``fleet_skips``), 'all' or a list gives
    it. Returns fleet_skips' dict plus "source" ("policy" or "setting"). Raises ValueError naming what is wrong (a bad
    setting, or a node whose policy is not valid)."""
    errors = setting_errors(setting, what)
    if errors:
        raise ValueError("; ".join(errors))
    if setting != "auto":
        skip = ALL if setting == ALL else sorted(set(setting))
        return {"skip": skip, "differ": False, "held": {}, "source": "setting"}
    try:
        decided = fleet_skips(policies)
    except HealthPolicyError as exc:
        raise ValueError(str(exc))
    decided["source"] = "policy"
    return decided


def env_value(skip, chart_version):
    """DP_DISABLE_HEALTHCHECKS for a skip decision: "all", or the Xids beyond the plugin's own (its built-in list is
    skipped anyway), ascending and comma-separated; None when nothing is to be added (the variable is then left
    unset)."""
    if skip == ALL:
        return ALL
    extra = sorted(set(skip) - default_skips(chart_version))
    return ",".join(str(code) for code in extra) or None


def plugin_skips_blocked(skip, chart_version):
    """The Xids the plugin skips on its own although the decision does not skip them (the policy blocks them): the
    gate keeps such a node out of service, the plugin keeps its GPU allocatable. DP_ENABLE_HEALTHCHECKS (v0.18.0 and
    later) could make the plugin check them; this collection does not set it."""
    if skip == ALL:
        return []
    return sorted(default_skips(chart_version) - set(skip))


# ---- the plugin DaemonSet ------------------------------------------------------------------------------------------
def plugin_daemonsets(documents, default_namespace):
    """(namespace, name) of each DaemonSet among rendered chart ``documents`` (dicts) that runs the plugin container
    (``PLUGIN_CONTAINER``), in their order."""
    found = []
    for doc in documents or []:
        if not isinstance(doc, dict) or doc.get("kind") != "DaemonSet":
            continue
        spec = (((doc.get("spec") or {}).get("template") or {}).get("spec") or {})
        if any(isinstance(c, dict) and c.get("name") == PLUGIN_CONTAINER for c in spec.get("containers") or []):
            meta = doc.get("metadata") or {}
            found.append((meta.get("namespace") or default_namespace, meta.get("name")))
    return found


def _container(daemonset):
    spec = ((((daemonset or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
    for container in spec.get("containers") or []:
        if isinstance(container, dict) and container.get("name") == PLUGIN_CONTAINER:
            return container
    return None


def live_value(daemonset):
    """DISABLE_ENV on the plugin container of ``daemonset``: its value (a valueFrom counts as the text
    "(valueFrom)"), or None when unset or when the DaemonSet or its container is missing."""
    for entry in (_container(daemonset) or {}).get("env") or []:
        if isinstance(entry, dict) and entry.get("name") == DISABLE_ENV:
            return entry["value"] if "value" in entry else "(valueFrom)"
    return None


def env_plan(daemonset, desired):
    """What to do on the plugin DaemonSet (a dict as the API returns it, or None when it does not exist) so that
    DISABLE_ENV is ``desired`` (None: unset): {"action": "none" | "set" | "remove" | "unmark" | "foreign" |
    "missing", "before", "after"}. "foreign": the variable holds a value this collection did not write (no MARK, or
    another value in it): it is left alone. "unmark": nothing to change but a stale MARK. "missing": no DaemonSet."""
    if daemonset is None:
        return {"action": "missing", "before": None, "after": desired}
    live = live_value(daemonset)
    mark = (((daemonset.get("metadata") or {}).get("annotations")) or {}).get(MARK)
    if live is not None and live != mark:
        return {"action": "foreign" if live != desired else "none", "before": live, "after": live}
    if live == desired:
        action = "none" if mark == desired else ("unmark" if desired is None else "set")
        return {"action": action, "before": live, "after": desired}
    return {"action": "set" if desired is not None else "remove", "before": live, "after": desired}


def env_patch(desired):
    """The strategic merge patch that sets DISABLE_ENV on the plugin container to ``desired`` and records it in MARK,
    or (``desired`` None) removes both. Other containers, variables and annotations are not touched (containers and
    env merge by name)."""
    if desired is None:
        entry = {"name": DISABLE_ENV, "$patch": "delete"}
    else:
        entry = {"name": DISABLE_ENV, "value": desired}
    return {"metadata": {"annotations": {MARK: desired}},
            "spec": {"template": {"spec": {"containers": [{"name": PLUGIN_CONTAINER, "env": [entry]}]}}}}
