# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG profile names and what one GPU offers: the grammar of a MIG device name and a per-GPU catalog of its
GPU-instance profiles, their placements and compute-instance profiles.

Pure functions over GPU facts (the ``gpus`` list that ``gpu_info`` returns); no I/O.

* A *MIG device* name is what mig-parted calls a profile in ``mig-devices``: a GPU-instance profile name
  (``3g.20gb``: one GPU instance with one compute instance spanning it) or a compute-instance sub-profile
  (``1c.3g.20gb``: a compute instance of 1 slice inside a ``3g.20gb`` GPU instance).

Names are never hard-coded: they are resolved against each GPU's own profile list (``gi_profiles``), so the
same layout file works on every modelled GPU, A100 to Blackwell (the MIG user guide's profile tables,
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/). A name follows go-nvlib's grammar
(``parse_profile_name``): ``[<C>c.]<G>g.<GB>gb``, then optionally ``+`` or ``-`` and a comma-separated list of
attributes (``+me``, ``+me.all``, ``+gfx``, ``-me``), compared as a set.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# go-nvlib pkg/nvlib/device/mig_profile.go parseMigProfile, as vendored in NVIDIA/mig-parted@bd7160f4
# (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/mig_profile.go): a name carries either '+' attributes or '-'
# attributes, never both; each attribute starts with a letter, holds letters, digits and dots, does not end with a
# dot and appears once in its list.
# Numbers are ASCII digits, as Go's regexp \d and strconv.Atoi take them (Python's \d also takes '\uff11' and other
# unicode digits), and at most 9 of them: no GPU has 10**9 slices or GB, and int() refuses more than 4300 digits.
DEVICE_NAME_RE = re.compile(r"^(?:(?P<c>[0-9]{1,9})c\.)?(?P<g>[0-9]{1,9})g\.(?P<gb>[0-9]{1,9})gb"
                            r"(?:(?P<sign>[+-])(?P<attrs>.*))?$")
_ATTRIBUTE_RE = re.compile(r"^[A-Za-z](?:[A-Za-z0-9.]*[A-Za-z0-9])?$")
NAME_FORMS = ("<G>g.<GB>gb, optionally followed by +attributes or -attributes (e.g. 3g.40gb, 1g.10gb+me, "
              "1g.24gb+gfx, 1g.24gb+me.all, 1g.24gb-me), and <C>c.<G>g.<GB>gb with the same suffixes for a "
              "compute-instance sub-profile (e.g. 1c.3g.40gb, 1c.2g.48gb+gfx)")


# ---------------------------------------------------------------------------------------------------------
# Profile names


def parse_profile_name(name):
    """``(c, g, gb, plus_attributes, minus_attributes)`` of a MIG device name (attribute tuples sorted), or None
    when ``name`` does not follow go-nvlib's grammar. Two names with equal tuples name the same profile."""
    if not isinstance(name, str):
        return None
    m = DEVICE_NAME_RE.match(name)
    if not m:
        return None
    attrs = ()
    if m.group("sign"):
        attrs = m.group("attrs").split(",")
        if len(set(attrs)) != len(attrs) or not all(_ATTRIBUTE_RE.match(a) for a in attrs):
            return None
        attrs = tuple(sorted(attrs))
    g = int(m.group("g"))
    c = int(m.group("c")) if m.group("c") else g
    plus = attrs if m.group("sign") == "+" else ()
    minus = attrs if m.group("sign") == "-" else ()
    return (c, g, int(m.group("gb")), plus, minus)


def format_profile_name(parsed):
    """The name of a ``parse_profile_name`` tuple (attributes in sorted order, as go-nvlib joins them)."""
    c, g, gb, plus, minus = parsed
    suffix = ("+" + ",".join(plus)) if plus else (("-" + ",".join(minus)) if minus else "")
    if c == g:
        return "%dg.%dgb%s" % (g, gb, suffix)
    return "%dc.%dg.%dgb%s" % (c, g, gb, suffix)


def is_plain_profile(name):
    """True for a profile name without attribute suffixes (+me, -me, +gfx ...)."""
    parsed = parse_profile_name(name)
    return bool(parsed) and not parsed[3] and not parsed[4]


# ---------------------------------------------------------------------------------------------------------
# Per-GPU catalog of profiles


def gpu_label(gpu):
    return "GPU %s (%s, %s)" % (gpu.get("index"), gpu.get("name"), gpu.get("uuid"))


class Catalog(object):
    """What one GPU model offers: GPU-instance profiles, their placements and compute-instance profiles."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.gi_by_name = {}
        self.gi_by_id = {}
        self.devices = {}   # MIG-device name -> (gi profile dict, ci profile dict, full: bool)
        self.memory_slices = 0
        self.compute_slices = 0
        for prof in gpu.get("gi_profiles") or []:
            name = prof["name"]
            self.gi_by_name[name] = prof
            self.gi_by_id[prof["id"]] = prof
            for pl in prof.get("placements") or []:
                self.memory_slices = max(self.memory_slices, pl["start"] + pl["size"])
            self.compute_slices = max(self.compute_slices, prof.get("slices") or 0)
            cis = prof.get("ci_profiles") or []
            full_seen = False
            for ci in cis:
                full = ci.get("slices") == prof.get("slices")
                if full:
                    dev_name = name
                    if full_seen:
                        continue
                    full_seen = True
                else:
                    dev_name = "%dc.%s" % (ci["slices"], name)
                self.devices.setdefault(dev_name, (prof, ci, full))
                if ci.get("name") and ci["name"] not in self.devices and ci["name"] != dev_name:
                    self.devices[ci["name"]] = (prof, ci, full)
            if not full_seen:
                # No CI profile listed (e.g. read while MIG is disabled): the full-GI CI always exists.
                self.devices.setdefault(name, (prof, {"id": None, "slices": prof.get("slices"),
                                                      "max_instances": 1, "name": name}, True))
        # name as go-nvlib parses it -> the name this GPU uses (so +gfx,me and +me,gfx are one profile)
        self.by_key = {}
        for dev_name in self.devices:
            key = parse_profile_name(dev_name)
            if key is not None:
                self.by_key.setdefault(key, dev_name)

    def lookup(self, name):
        """This GPU's name for the MIG device ``name`` (any spelling go-nvlib accepts), or None."""
        if name in self.devices:
            return name
        key = parse_profile_name(name)
        return self.by_key.get(key) if key is not None else None

    # names ------------------------------------------------------------------------------------------------
    def canonical(self, name):
        """Canonical MIG-device name for ``name`` (which may be an alias from ``ci_profiles``)."""
        prof, ci, full = self.devices[name]
        return prof["name"] if full else "%dc.%s" % (ci["slices"], prof["name"])

    def valid_names(self):
        return sorted(set(self.canonical(n) for n in self.devices), key=name_sort_key)

    def plain_profile(self, size):
        """The plain GPU-instance profile of ``size`` compute slices using the fewest memory slices."""
        cands = [p for p in self.gi_by_name.values() if p.get("slices") == size and is_plain_profile(p["name"])]
        if not cands:
            return None
        return min(cands, key=lambda p: (p.get("memory_slices") or profile_size(p), p["id"]))

    def ci_name_of(self, gi_prof, ci_profile_id, fallback):
        for ci in gi_prof.get("ci_profiles") or []:
            if ci.get("id") == ci_profile_id:
                if ci.get("slices") == gi_prof.get("slices"):
                    return gi_prof["name"]
                return "%dc.%s" % (ci["slices"], gi_prof["name"])
        return fallback

    def max_fit(self, prof):
        """How many GPU instances of ``prof`` fit on an empty GPU (placements and max_instances)."""
        best = [0]
        pls = prof.get("placements") or []

        def rec(i, mask, n):
            best[0] = max(best[0], n)
            if n >= prof.get("max_instances", 99):
                return
            for j in range(i, len(pls)):
                m = placement_mask(pls[j])
                if not mask & m:
                    rec(j + 1, mask | m, n + 1)
        rec(0, 0, 0)
        return best[0]


def profile_size(prof):
    pls = prof.get("placements") or []
    return pls[0]["size"] if pls else 0


def placement_mask(pl):
    return ((1 << pl["size"]) - 1) << pl["start"]


def name_sort_key(name):
    parsed = parse_profile_name(name)
    if not parsed:
        return (99, 99, 0, name)
    c, g, gb, dummy, dummy2 = parsed
    return (g, c, gb, name)


def format_placements(prof):
    pls = prof.get("placements") or []
    starts = ",".join(str(p["start"]) for p in pls)
    size = profile_size(prof)
    return "start %s (%d memory slice%s each)" % (starts or "none", size, "" if size == 1 else "s")
