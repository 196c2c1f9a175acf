# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts: parse, validate and reconcile them with least disruption.

Pure functions over GPU facts (the ``gpus`` list that ``gpu_info`` returns); no I/O.

Vocabulary
----------
* A *MIG device* name is what mig-parted calls a profile in ``mig-devices``: a GPU-instance profile name
  (``3g.20gb``: one GPU instance with one compute instance spanning it) or a compute-instance sub-profile
  (``1c.3g.20gb``: a compute instance of 1 slice inside a ``3g.20gb`` GPU instance).
* A declared layout, per GPU, is ``{"mig_enabled": bool, "mig_devices": {name: count}}``.
  Like mig-parted, equality is by the multiset of MIG devices; unlike mig-parted, the reconciler keeps
  every existing instance it can and places new GPU instances explicitly.

Names are never hard-coded: they are resolved against each GPU's own profile list (``gi_profiles``), so the
same layout file works on every modelled GPU, A100 to Blackwell (reference/mig.md section 1.2). A name follows
go-nvlib's grammar (``parse_profile_name``): ``[<C>c.]<G>g.<GB>gb``, then optionally ``+`` or ``-`` and a
comma-separated list of attributes (``+me``, ``+me.all``, ``+gfx``, ``-me``), compared as a set.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import re
from collections import Counter

# go-nvlib pkg/nvlib/device/mig_profile.go parseMigProfile (reference/mig.md 1.2): a name carries either '+'
# attributes or '-' attributes, never both; each attribute starts with a letter, holds letters, digits and dots,
# does not end with a dot and appears once in its list.
DEVICE_NAME_RE = re.compile(r"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb(?:(?P<sign>[+-])(?P<attrs>.*))?$")
_ATTRIBUTE_RE = re.compile(r"^[A-Za-z](?:[A-Za-z0-9.]*[A-Za-z0-9])?$")
# mig-parted names its generated all-<profile> layouts with '+' turned into '.' (all-1g.24gb.me.all,
# all-1g.10gb.me: pkg/mig/builder normalizeProfileName, config-default.yaml); '-' stays (all-1g.24gb-me).
MIGPARTED_LAYOUT_PROFILE_RE = re.compile(r"^\d+g\.\d+gb(?:[.+-][A-Za-z][A-Za-z0-9.,]*)?$")
NAME_FORMS = ("<G>g.<GB>gb, optionally followed by +attributes or -attributes (e.g. 3g.40gb, 1g.10gb+me, "
              "1g.24gb+gfx, 1g.24gb+me.all, 1g.24gb-me), and <C>c.<G>g.<GB>gb with the same suffixes for a "
              "compute-instance sub-profile (e.g. 1c.3g.40gb, 1c.2g.48gb+gfx)")
PCI_FILTER_RE = re.compile(r"^0x(?P<dev>[0-9a-fA-F]{4})(?P<ven>[0-9a-fA-F]{4})"
                           r"(?::0x(?P<sdev>[0-9a-fA-F]{4})(?P<sven>[0-9a-fA-F]{4}))?$")
NAMED_LAYOUTS = ("all-disabled", "all-enabled", "all-balanced", "all-<size> (e.g. all-1g, all-3g)",
                 "all-<profile> (e.g. all-1g.10gb, all-1g.24gb+gfx, or mig-parted's spelling all-1g.24gb.gfx)")
SIZE_RE = re.compile(r"^all-(\d+)g$")


class MigLayoutError(ValueError):
    """A layout that cannot be applied; the message says what is wrong and what is valid."""


class MigBusyError(MigLayoutError):
    """The layout needs to destroy instances that processes are using (and force is off)."""

    def __init__(self, message, busy=None):
        super(MigBusyError, self).__init__(message)
        self.busy = busy or []


# ---------------------------------------------------------------------------------------------------------
# Per-GPU catalog of profiles


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


def _plain(name):
    """True for a profile name without attribute suffixes (+me, -me, +gfx ...)."""
    parsed = parse_profile_name(name)
    return bool(parsed) and not parsed[3] and not parsed[4]


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
        return sorted(set(self.canonical(n) for n in self.devices), key=_name_sort_key)

    def plain_profile(self, size):
        """The plain GPU-instance profile of ``size`` compute slices using the fewest memory slices."""
        cands = [p for p in self.gi_by_name.values() if p.get("slices") == size and _plain(p["name"])]
        if not cands:
            return None
        return min(cands, key=lambda p: (p.get("memory_slices") or _psize(p), p["id"]))

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
                m = _mask(pls[j])
                if not mask & m:
                    rec(j + 1, mask | m, n + 1)
        rec(0, 0, 0)
        return best[0]


def _psize(prof):
    pls = prof.get("placements") or []
    return pls[0]["size"] if pls else 0


def _mask(pl):
    return ((1 << pl["size"]) - 1) << pl["start"]


def _name_sort_key(name):
    parsed = parse_profile_name(name)
    if not parsed:
        return (99, 99, 0, name)
    c, g, gb, dummy, dummy2 = parsed
    return (g, c, gb, name)


def _fmt_placements(prof):
    pls = prof.get("placements") or []
    starts = ",".join(str(p["start"]) for p in pls)
    return "start %s (%d memory slice%s each)" % (starts or "none", _psize(prof), "" if _psize(prof) == 1 else "s")


# ---------------------------------------------------------------------------------------------------------
# Declared layouts


def _entry_get(entry, key):
    """Entries accept mig-parted's dashed keys and Ansible-style underscored keys."""
    if key in entry:
        return entry[key]
    alt = key.replace("-", "_") if "-" in key else key.replace("_", "-")
    return entry.get(alt)


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _parse_filter(value, where):
    m = PCI_FILTER_RE.match(str(value).strip())
    if not m:
        raise MigLayoutError("%s: device-filter %r is not a packed PCI id; valid forms are 0xDDDDVVVV "
                             "(device then vendor, e.g. 0x20B010DE) or 0xDDDDVVVV:0xSSSSsvsv" % (where, value))
    return m.groupdict()


def _gpu_matches_filter(gpu, flt):
    dev = str(gpu.get("pci_device_id") or "").lower().replace("0x", "")
    if dev[-8:] != (flt["dev"] + flt["ven"]).lower():
        return False
    if flt.get("sdev"):
        sub = str(gpu.get("pci_subsystem_id") or "").lower().replace("0x", "")
        if sub and sub[-8:] != (flt["sdev"] + flt["sven"]).lower():
            return False
    return True


def _gpu_matches_model(gpu, model):
    return str(model).lower() in str(gpu.get("name") or "").lower()


def _validate_counts(devices, where):
    if devices is None:
        return {}
    if not isinstance(devices, dict):
        raise MigLayoutError("%s: mig-devices must be a map of profile name to count, got %r" % (where, devices))
    out = {}
    for name, count in devices.items():
        if isinstance(count, bool) or not isinstance(count, int):
            try:
                count = int(str(count), 10)
            except ValueError:
                raise MigLayoutError("%s: count for %r must be a whole number, got %r" % (where, name, count))
        if count < 0:
            raise MigLayoutError("%s: count for %r must be >= 0, got %d" % (where, name, count))
        if parse_profile_name(str(name)) is None:
            raise MigLayoutError("%s: %r is not a MIG profile name; valid forms are %s" % (where, name, NAME_FORMS))
        out[str(name)] = count
    if out and not any(out.values()):
        raise MigLayoutError("%s: mig-devices lists profiles but every count is 0; give at least one count > 0 "
                             "or use an empty map {}" % where)
    return {k: v for k, v in out.items() if v}


def _select(gpus, entry, where, strict):
    """GPUs an entry selects. ``strict``: explicit indices/UUIDs must exist."""
    devices = _entry_get(entry, "devices")
    if devices is None:
        devices = "all"
    filters = [_parse_filter(f, where) for f in _as_list(_entry_get(entry, "device-filter"))]
    models = _as_list(entry.get("models", entry.get("model")))
    chosen = []
    if devices == "all":
        chosen = list(gpus)
    else:
        if not isinstance(devices, (list, tuple)):
            raise MigLayoutError("%s: devices must be 'all' or a list of GPU indices or UUIDs, got %r"
                                 % (where, devices))
        for sel in devices:
            hit = None
            for gpu in gpus:
                if isinstance(sel, bool):
                    break
                if isinstance(sel, int) or (isinstance(sel, str) and sel.isdigit()):
                    if gpu.get("index") == int(sel):
                        hit = gpu
                elif str(sel) in (gpu.get("uuid"), gpu.get("pci_bus_id")):
                    hit = gpu
            if hit is None and not strict:
                continue    # mig-parted files are fleet-wide: an index this node lacks selects nothing
            if hit is None:
                raise MigLayoutError("%s: devices entry %r matches no GPU; GPUs here: %s" % (
                    where, sel, ", ".join("%s (%s)" % (g.get("index"), g.get("uuid")) for g in gpus) or "none"))
            if hit not in chosen:
                chosen.append(hit)
    if filters:
        chosen = [g for g in chosen if any(_gpu_matches_filter(g, f) for f in filters)]
    if models:
        chosen = [g for g in chosen if any(_gpu_matches_model(g, m) for m in models)]
    return chosen


def parse_migparted_config(config, config_name=None):
    """Validate a mig-parted v1 config (already loaded from YAML) and return (name, entries).

    Rules from mig-parted api/spec/v1 (reference/mig.md section 1.1).
    """
    if not isinstance(config, dict):
        raise MigLayoutError("mig-parted config must be a map with keys 'version' and 'mig-configs'")
    unknown = sorted(set(config) - {"version", "mig-configs"})
    if unknown:
        raise MigLayoutError("mig-parted config: unknown top-level key(s) %s; valid keys: version, mig-configs"
                             % ", ".join(map(str, unknown)))
    if config.get("version") != "v1":
        raise MigLayoutError("mig-parted config: unknown version %r; the only valid version is v1"
                             % (config.get("version"),))
    configs = config.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigLayoutError("mig-parted config: 'mig-configs' must be a non-empty map of name to entries")
    if config_name is None:
        if len(configs) != 1:
            raise MigLayoutError("config_name is required: the file defines %d configs (%s)"
                                 % (len(configs), ", ".join(sorted(map(str, configs)))))
        config_name = next(iter(configs))
    if config_name not in configs:
        raise MigLayoutError("config_name %r is not in the file; configs defined: %s"
                             % (config_name, ", ".join(sorted(map(str, configs)))))
    entries = configs[config_name]
    if not isinstance(entries, list) or not entries:
        raise MigLayoutError("mig-configs.%s must be a non-empty list of entries" % config_name)
    out = []
    for i, entry in enumerate(entries):
        where = "mig-configs.%s[%d]" % (config_name, i)
        if not isinstance(entry, dict):
            raise MigLayoutError("%s must be a map" % where)
        bad = sorted(set(entry) - {"devices", "mig-enabled", "mig-devices", "device-filter"})
        if bad:
            raise MigLayoutError("%s: unknown key(s) %s; valid keys: devices, mig-enabled, mig-devices, "
                                 "device-filter" % (where, ", ".join(map(str, bad))))
        if "devices" not in entry:
            raise MigLayoutError("%s: 'devices' is required ('all' or a list of GPU indices)" % where)
        devs = entry["devices"]
        if devs != "all" and not (isinstance(devs, list) and devs and
                                  all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devs)):
            raise MigLayoutError("%s: devices must be 'all' or a non-empty list of GPU indices, got %r"
                                 % (where, devs))
        if not isinstance(entry.get("mig-enabled"), bool):
            raise MigLayoutError("%s: 'mig-enabled' is required and must be true or false" % where)
        if entry["mig-enabled"]:
            if "mig-devices" not in entry:
                raise MigLayoutError("%s: 'mig-devices' is required when mig-enabled is true (use {} for none)"
                                     % where)
        elif entry.get("mig-devices"):
            raise MigLayoutError("%s: 'mig-devices' must be empty when mig-enabled is false" % where)
        for f in _as_list(entry.get("device-filter")):
            _parse_filter(f, where)
        out.append({"devices": devs, "mig_enabled": entry["mig-enabled"],
                    "mig_devices": _validate_counts(entry.get("mig-devices"), where),
                    "device_filter": entry.get("device-filter"), "where": where})
    return config_name, out


def parse_inline_layout(layout):
    """Validate the inline form: a list of entries with ``devices`` (all | indices | UUIDs), optional
    ``models`` (substring of the GPU name) and ``device_filter``, ``mig_enabled`` (default true) and
    ``mig_devices`` (name -> count). A single map is accepted as one entry for all GPUs."""
    if isinstance(layout, dict):
        layout = [layout]
    if not isinstance(layout, list) or not layout:
        raise MigLayoutError("layout must be a non-empty list of entries")
    out = []
    valid = {"devices", "models", "model", "device_filter", "device-filter", "mig_enabled", "mig-enabled",
             "mig_devices", "mig-devices"}
    for i, entry in enumerate(layout):
        where = "layout[%d]" % i
        if not isinstance(entry, dict):
            raise MigLayoutError("%s must be a map" % where)
        bad = sorted(str(k) for k in entry if k not in valid)
        if bad:
            raise MigLayoutError("%s: unknown key(s) %s; valid keys: devices, models, device_filter, mig_enabled, "
                                 "mig_devices" % (where, ", ".join(map(str, bad))))
        enabled = _entry_get(entry, "mig_enabled")
        enabled = True if enabled is None else enabled
        if not isinstance(enabled, bool):
            raise MigLayoutError("%s: mig_enabled must be true or false, got %r" % (where, enabled))
        devs = _validate_counts(_entry_get(entry, "mig_devices"), where)
        if not enabled and devs:
            raise MigLayoutError("%s: mig_devices must be empty when mig_enabled is false" % where)
        for f in _as_list(_entry_get(entry, "device_filter")):
            _parse_filter(f, where)
        out.append({"devices": entry.get("devices", "all"), "mig_enabled": enabled, "mig_devices": devs,
                    "device_filter": _entry_get(entry, "device_filter"),
                    "models": entry.get("models", entry.get("model")), "where": where})
    return out


def named_layout_for(gpu, name):
    """The per-GPU layout of a named layout, in this GPU's own profile names."""
    if name == "all-disabled":
        return {"mig_enabled": False, "mig_devices": {}}
    if name == "all-enabled":
        return {"mig_enabled": True, "mig_devices": {}}
    cat = Catalog(gpu)
    if name == "all-balanced":
        one, two, three = cat.plain_profile(1), cat.plain_profile(2), cat.plain_profile(3)
        if cat.compute_slices >= 7 and one and two and three:
            return {"mig_enabled": True, "mig_devices": {one["name"]: 2, two["name"]: 1, three["name"]: 1}}
        if cat.compute_slices == 4 and one and two:
            return {"mig_enabled": True, "mig_devices": {one["name"]: 2, two["name"]: 1}}
        raise MigLayoutError("%s: all-balanced is defined for 7-slice and 4-slice MIG GPUs only (this one offers %s)"
                             % (gpu_label(gpu), ", ".join(cat.valid_names()) or "no MIG profiles"))
    m = SIZE_RE.match(name)
    if m:
        prof = cat.plain_profile(int(m.group(1)))
        if prof is None:
            sizes = sorted(set("all-%dg" % p["slices"] for p in cat.gi_by_name.values() if _plain(p["name"])))
            raise MigLayoutError("%s: %s has no %sg profile here; valid sizes on this GPU: %s"
                                 % (gpu_label(gpu), name, m.group(1), ", ".join(sizes)))
        return {"mig_enabled": True, "mig_devices": {prof["name"]: cat.max_fit(prof)}}
    pname = name[4:] if name.startswith("all-") else None
    parsed = parse_profile_name(pname)
    if pname and ((parsed and parsed[0] == parsed[1]) or MIGPARTED_LAYOUT_PROFILE_RE.match(pname)):
        prof = cat.gi_by_name.get(cat.lookup(pname)) if parsed else None
        if prof is None:
            # mig-parted's spelling: '+' written as '.' (all-1g.24gb.gfx is all-1g.24gb+gfx)
            dotted = [p for p in cat.gi_by_name.values() if p["name"].replace("+", ".") == pname]
            prof = dotted[0] if dotted else None
        if prof is None:
            raise MigLayoutError("%s: %s names profile %r, which this GPU does not offer; valid: %s (mig-parted's "
                                 "spelling with '.' for '+' is accepted too)"
                                 % (gpu_label(gpu), name, pname, ", ".join(sorted(cat.gi_by_name, key=_name_sort_key))))
        return {"mig_enabled": True, "mig_devices": {prof["name"]: cat.max_fit(prof)}}
    raise MigLayoutError("unknown named layout %r; valid: %s" % (name, ", ".join(NAMED_LAYOUTS)))


def resolve_layout(gpus, layout=None, config=None, config_name=None, named=None, gpu_selector=None):
    """Per-GPU declared layouts from exactly one source.

    Returns ``{"gpus": {index: {"mig_enabled", "mig_devices", "source"}}, "skipped": [{index, reason}],
    "config_name": name}``. Raises MigLayoutError for input that is wrong (nothing is read beyond ``gpus``).
    ``gpu_selector`` (entries' devices/models form) narrows a named layout.
    """
    sources = [s for s in (layout is not None, config is not None, named is not None) if s]
    if len(sources) != 1:
        raise MigLayoutError("give exactly one of: layout (inline), config_file (+ config_name), named layout")
    gpus = list(gpus or [])
    if not gpus:
        raise MigLayoutError("no GPUs found on this host")
    result, skipped = {}, []
    if named is not None:
        sel = gpu_selector or {"devices": "all"}
        chosen = _select(gpus, sel, "named layout %s" % named, True)
        if not chosen:
            raise MigLayoutError("named layout %s: the GPU selector matches no GPU" % named)
        explicit = sel.get("devices", "all") != "all"
        for gpu in chosen:
            if not gpu.get("mig_supported"):
                if named == "all-disabled":
                    continue
                if explicit:
                    raise MigLayoutError("%s does not support MIG; it cannot take layout %s" % (gpu_label(gpu), named))
                skipped.append({"index": gpu["index"], "reason": "GPU does not support MIG"})
                continue
            spec = named_layout_for(gpu, named)
            spec["source"] = named
            result[gpu["index"]] = spec
        if not result and named != "all-disabled":
            raise MigLayoutError("named layout %s: none of the selected GPUs supports MIG (%s)"
                                 % (named, "; ".join(gpu_label(g) for g in chosen)))
        return {"gpus": result, "skipped": skipped, "config_name": named}
    if config is not None:
        config_name, entries = parse_migparted_config(config, config_name)
    else:
        entries = parse_inline_layout(layout)
    any_selected = False
    for entry in entries:
        chosen = _select(gpus, entry, entry["where"], config is None)
        any_selected = any_selected or bool(chosen)
        if not chosen and config is not None and entry.get("device_filter"):
            # mig-parted files carry entries for many GPU models (config-default.yaml): an entry whose
            # device-filter names another model is not an error, as in mig-parted itself.
            continue
        if not chosen:
            raise MigLayoutError("%s selects no GPU (devices=%r, device_filter=%r, models=%r); GPUs here: %s" % (
                entry["where"], entry.get("devices"), entry.get("device_filter"), entry.get("models"),
                "; ".join("%s %s %s" % (gpu_label(g), "pci_device_id", g.get("pci_device_id")) for g in gpus)))
        for gpu in chosen:
            if not gpu.get("mig_supported"):
                if not entry["mig_enabled"]:
                    continue
                if entry.get("devices", "all") == "all":
                    skipped.append({"index": gpu["index"], "reason": "GPU does not support MIG (%s)" % entry["where"]})
                    continue
                raise MigLayoutError("%s: %s does not support MIG; valid MIG GPUs here: %s" % (
                    entry["where"], gpu_label(gpu),
                    ", ".join(str(g["index"]) for g in gpus if g.get("mig_supported")) or "none"))
            spec = {"mig_enabled": entry["mig_enabled"], "mig_devices": dict(entry["mig_devices"]),
                    "source": entry["where"]}
            prev = result.get(gpu["index"])
            if prev and (prev["mig_enabled"], prev["mig_devices"]) != (spec["mig_enabled"], spec["mig_devices"]):
                raise MigLayoutError("%s is selected by both %s and %s with different layouts; make the selectors "
                                     "disjoint" % (gpu_label(gpu), prev["source"], entry["where"]))
            result[gpu["index"]] = spec
    if not any_selected:
        raise MigLayoutError("%s selects no GPU on this host; GPUs here: %s" % (
            "config %r" % config_name if config is not None else "the layout",
            "; ".join("%s pci_device_id %s" % (gpu_label(g), g.get("pci_device_id")) for g in gpus)))
    if not result and not any(e["mig_enabled"] is False for e in entries):
        raise MigLayoutError("the layout selects no MIG-capable GPU")
    return {"gpus": result, "skipped": skipped, "config_name": config_name}


# ---------------------------------------------------------------------------------------------------------
# Current state


def _procs_by_instance(gpu):
    by_ci, by_gi = {}, {}
    for p in gpu.get("processes") or []:
        if p.get("gi_id") is None:
            continue
        if p.get("ci_id") is None:
            by_gi.setdefault(p["gi_id"], []).append(p)
        else:
            by_ci.setdefault((p["gi_id"], p["ci_id"]), []).append(p)
    return by_ci, by_gi


def current_instances(gpu, cat=None):
    """Normalised current GPU instances: [{id, profile, start, size, mask, busy_procs, cis: [...]}]."""
    cat = cat or Catalog(gpu)
    by_ci, by_gi = _procs_by_instance(gpu)
    out = []
    for gi in gpu.get("gpu_instances") or []:
        prof = cat.gi_by_id.get(gi.get("profile_id")) or cat.gi_by_name.get(gi.get("profile"))
        pl = gi.get("placement") or {}
        gi_procs = list(by_gi.get(gi["id"], []))
        cis = []
        for ci in gi.get("compute_instances") or []:
            name = ci.get("profile")
            if prof is not None:
                name = cat.ci_name_of(prof, ci.get("profile_id"), name)
            procs = list(ci.get("processes") or []) + by_ci.get((gi["id"], ci["id"]), [])
            seen, uniq = set(), []
            for p in procs + gi_procs:
                if p.get("pid") not in seen:
                    seen.add(p.get("pid"))
                    uniq.append(p)
            cpl = ci.get("placement") or {}
            slices = cpl.get("size") or (cat.devices[name][1].get("slices", 1) if name in cat.devices else 1)
            cis.append({"id": ci["id"], "name": name, "profile_id": ci.get("profile_id"), "slices": slices,
                        "start": cpl.get("start", 0), "mig_uuid": ci.get("mig_uuid"), "procs": uniq})
        out.append({"id": gi["id"], "profile": prof["name"] if prof else gi.get("profile"),
                    "profile_id": gi.get("profile_id"), "start": pl.get("start", 0), "size": pl.get("size", 0),
                    "mask": _mask({"start": pl.get("start", 0), "size": pl.get("size", 0)}),
                    "gi_procs": gi_procs, "cis": cis})
    return out


def current_devices(gpu, cat=None):
    """Multiset of MIG-device names on the GPU now (mig-parted's notion of 'the current config')."""
    c = Counter()
    for gi in current_instances(gpu, cat):
        for ci in gi["cis"]:
            c[ci["name"]] += 1
    return dict(c)


def describe_gi(gi_name, start, size, ci_names):
    return "%s@%d:%d [%s]" % (gi_name, start, size, ", ".join(sorted(ci_names, key=_name_sort_key)))


def layout_view(gpu, cat=None):
    """Before/after view for diffs: mode, MIG-device counts, GPU instances with placements."""
    insts = current_instances(gpu, cat)
    return {"mig_mode": gpu.get("mig_mode_current"),
            "mig_devices": dict(sorted(current_devices(gpu, cat).items(), key=lambda kv: _name_sort_key(kv[0]))),
            "gpu_instances": sorted(describe_gi(g["profile"], g["start"], g["size"], [c["name"] for c in g["cis"]])
                                    for g in insts)}


# ---------------------------------------------------------------------------------------------------------
# Validation against one GPU


def validate_gpu_layout(gpu, spec, cat=None):
    """Raise MigLayoutError if ``spec`` cannot be applied to ``gpu`` (names, counts, mode); return the
    canonical mig_devices map."""
    cat = cat or Catalog(gpu)
    label = gpu_label(gpu)
    if not gpu.get("mig_supported"):
        if spec.get("mig_enabled"):
            raise MigLayoutError("%s does not support MIG" % label)
        return {}
    if not spec.get("mig_enabled"):
        return {}
    devices = {}
    for name, count in (spec.get("mig_devices") or {}).items():
        found = cat.lookup(name)
        if found is None:
            parsed = parse_profile_name(name)
            hint = ""
            if parsed and parsed[0] != parsed[1]:
                gi_name = cat.lookup(format_profile_name((parsed[1],) + parsed[1:]))
                if gi_name in cat.gi_by_name:
                    subs = [n for n in cat.valid_names() if n.endswith("." + gi_name) and "c." in n]
                    hint = "; compute-instance sub-profiles of %s here: %s" % (gi_name, ", ".join(subs) or "none")
            raise MigLayoutError("%s: unknown MIG profile %r%s; valid on this GPU: %s"
                                 % (label, name, hint, ", ".join(cat.valid_names())))
        canon = cat.canonical(found)
        devices[canon] = devices.get(canon, 0) + count
    groups = _group_new(cat, devices)
    if groups is None:
        raise MigLayoutError("%s: %s cannot fit: %s" % (label, _fmt_devices(devices), explain_unfit(cat, devices)))
    per_prof = Counter(g["profile"] for g in groups)
    for pname, n in per_prof.items():
        prof = cat.gi_by_name[pname]
        fit = cat.max_fit(prof)
        if n > fit:
            raise MigLayoutError(
                "%s: %s cannot fit: it needs %d %s GPU instance%s but at most %d fit%s (%s can %s)" % (
                    label, _fmt_devices(devices), n, pname, "" if n == 1 else "s", fit,
                    "" if fit != 1 else "s", pname, _fmt_placements(prof)))
    if _place(cat, groups, 0) is None:
        raise MigLayoutError("%s: %s cannot fit: %s" % (label, _fmt_devices(devices), explain_unfit(cat, devices)))
    return devices


def _fmt_devices(devices):
    return "{%s}" % ", ".join("%s: %d" % (k, v) for k, v in sorted(devices.items(), key=lambda kv: _name_sort_key(kv[0])))


def explain_unfit(cat, devices):
    groups = _group_new(cat, devices)
    if groups is None:
        return "a compute instance is larger than its GPU instance"
    need = 0
    parts = []
    for pname, n in sorted(Counter(g["profile"] for g in groups).items(), key=lambda kv: _name_sort_key(kv[0])):
        prof = cat.gi_by_name[pname]
        need += n * _psize(prof)
        parts.append("%d x %s (%s)" % (n, pname, _fmt_placements(prof)))
    if need > cat.memory_slices:
        return "needs %d memory slices, the GPU has %d: %s" % (need, cat.memory_slices, "; ".join(parts))
    return "no set of non-overlapping placements exists for %s" % "; ".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Reconcile


def _ci_first_fit(gi_slices, occupied, size):
    """Where the driver puts a new compute instance of ``size`` slices in a GI: the first run of free compute
    slices aligned to its size (the simulator's rule; NVML's CreateComputeInstance without placement).
    None if it does not fit."""
    for cand in range(0, gi_slices - size + 1, size):
        if not any(cand < s + n and s < cand + size for s, n in occupied):
            return cand
    return None


def _try_add(slot, name, cat):
    """Add MIG device ``name`` to a GI slot (kept or new) if the driver would fit it; True on success."""
    prof, ci, full = cat.devices[name]
    if slot["profile"] != prof["name"] or slot["full"]:
        return False
    if full and slot["occ"]:
        return False
    if slot["names"].count(name) + slot["add"].count(name) >= ci.get("max_instances", 99):
        return False
    start = _ci_first_fit(slot["slices"], slot["occ"], ci["slices"])
    if start is None:
        return False
    slot["occ"].append((start, ci["slices"]))
    slot["add"].append(name)
    slot["full"] = full
    return True


def _device_items(cat, demand):
    """Demanded devices, biggest GI first, full devices before sub-profiles, bigger CIs first: the order in
    which they are created (as mig-parted's Flatten sorts, reference/mig.md 1.6)."""
    items = []
    for name, n in demand.items():
        if n > 0:
            items.extend([name] * n)
    items.sort(key=lambda n: (-(cat.devices[n][0].get("slices") or 0), not cat.devices[n][2],
                              -(cat.devices[n][1].get("slices") or 0), n))
    return items


def _group_new(cat, demand, slots=None):
    """Put demanded MIG devices into GI slots: first the given (kept) slots, then new GIs packed first-fit.
    Returns the list of new GI slots, or None if a compute instance fits no GI at all."""
    slots = slots or []
    groups = []
    for name in _device_items(cat, demand):
        prof, ci, full = cat.devices[name]
        if any(_try_add(s, name, cat) for s in slots):
            continue
        if any(_try_add(g, name, cat) for g in groups):
            continue
        g = {"profile": prof["name"], "slices": prof.get("slices"), "names": [], "add": [], "occ": [], "full": False}
        if not _try_add(g, name, cat):
            return None
        groups.append(g)
    return groups


def _place(cat, groups, occupied, counts=None, compute_used=0):
    """Choose placements for new GI groups in free memory slices; list of placements or None."""
    counts = Counter(counts or {})
    need = compute_used + sum(cat.gi_by_name[g["profile"]].get("slices") or 0 for g in groups)
    if cat.compute_slices and need > cat.compute_slices:
        return None
    order = sorted(range(len(groups)), key=lambda i: (-_psize(cat.gi_by_name[groups[i]["profile"]]), i))
    chosen = [None] * len(groups)

    def rec(k, occ):
        if k == len(order):
            return True
        i = order[k]
        prof = cat.gi_by_name[groups[i]["profile"]]
        if counts[prof["name"]] >= prof.get("max_instances", 99):
            return False
        pls = list(prof.get("placements") or [])
        if _psize(prof) == 1:
            pls.reverse()   # 1-slice GIs from the top: keep aligned pairs free for bigger ones
        for pl in pls:
            m = _mask(pl)
            if occ & m:
                continue
            chosen[i] = pl
            counts[prof["name"]] += 1
            if rec(k + 1, occ | m):
                return True
            counts[prof["name"]] -= 1
        return False
    return list(chosen) if rec(0, occupied) else None


def _attempt(cat, insts, choice, demand):
    """Plan for one choice: per existing GI, None (destroy) or the tuple of its CI indexes to keep."""
    demand = Counter(demand)
    slots = []
    occupied = 0
    counts = Counter()
    compute_used = 0
    for i, ch in enumerate(choice):
        if ch is None:
            continue
        gi = insts[i]
        prof = cat.gi_by_name[gi["profile"]]
        names = []
        for j in ch:
            name = gi["cis"][j]["name"]
            demand[name] -= 1
            if demand[name] < 0:
                return None
            names.append(name)
        slots.append({"gi_i": i, "profile": gi["profile"], "slices": prof.get("slices"), "names": names, "add": [],
                      "occ": [(gi["cis"][j]["start"], gi["cis"][j]["slices"]) for j in ch],
                      "full": any(cat.devices[n][2] for n in names if n in cat.devices)})
        occupied |= gi["mask"]
        counts[gi["profile"]] += 1
        compute_used += prof.get("slices") or 0
    groups = _group_new(cat, demand, slots)
    if groups is None:
        return None
    if any(not s["names"] and not s["add"] for s in slots):
        return None     # a kept GI would end up empty: the choice that destroys it is enumerated too
    placements = _place(cat, groups, occupied, counts, compute_used)
    if placements is None:
        return None
    return {"choice": choice, "slots": slots, "groups": groups, "placements": placements}


def _score(insts, att):
    busy_kept = ci_kept = gi_kept = ops = 0
    for i, ch in enumerate(att["choice"]):
        gi = insts[i]
        if ch is None:
            ops += 1 + len(gi["cis"])
            continue
        gi_kept += 1
        ci_kept += len(ch)
        busy_kept += sum(1 for j in ch if gi["cis"][j]["procs"])
        ops += len(gi["cis"]) - len(ch)
    ops += sum(len(s["add"]) for s in att["slots"])
    ops += sum(1 + len(g["add"]) for g in att["groups"])
    return (busy_kept, ci_kept, gi_kept, -ops)


def _subsets(items):
    out = []
    for r in range(len(items), -1, -1):
        out.extend(itertools.combinations(items, r))
    return out


def best_plan(cat, insts, demand):
    """Exhaustive search: for every existing GPU instance, destroy it or keep it with any subset of its
    compute instances that the target also has. At most 7 compute slices per GPU bound this to a few
    thousand candidates; each is completed (new CIs, new GIs at explicit placements) and scored."""
    options = []
    for gi in insts:
        if gi["profile"] not in cat.gi_by_name:
            options.append([None])
            continue
        eligible = [j for j, ci in enumerate(gi["cis"]) if demand.get(ci["name"], 0) > 0]
        opts = [None]
        if any(cat.devices.get(n, (None,))[0] is cat.gi_by_name[gi["profile"]] for n in demand):
            opts.extend(_subsets(eligible))
        options.append(opts)

    def prefix(choice):
        # (busy kept, compute instances kept, GPU instances kept): known before completing the choice
        busy = kept = gis = 0
        for i, ch in enumerate(choice):
            if ch is None:
                continue
            gis += 1
            kept += len(ch)
            busy += sum(1 for j in ch if insts[i]["cis"][j]["procs"])
        return (busy, kept, gis)

    scored = sorted(((prefix(c), c) for c in itertools.product(*options)), key=lambda pc: pc[0], reverse=True)
    best = None
    for pre, choice in scored:
        if best is not None and pre < best[0][:3]:
            break       # every remaining choice keeps less: the best is found
        att = _attempt(cat, insts, choice, demand)
        if att is None:
            continue
        sc = _score(insts, att)
        if best is None or sc > best[0]:
            best = (sc, att)
    return best


def _proc_desc(procs):
    return ", ".join("pid %s (%s)" % (p.get("pid"), p.get("name")) for p in procs)


def plan_gpu(gpu, spec, force=False):
    """Plan one GPU. ``spec`` = {"mig_enabled", "mig_devices"} (names validated here).

    Returns a dict: index, uuid, name, changed, desired (canonical mig_devices), operations (ordered),
    kept, destroyed, created, busy_destroyed (processes on what gets destroyed; only with force), before,
    after (views for diff), reason (when nothing is planned because e.g. MIG mode is off).
    Raises MigLayoutError / MigBusyError.
    """
    cat = Catalog(gpu)
    label = gpu_label(gpu)
    desired = validate_gpu_layout(gpu, spec, cat)
    before = layout_view(gpu, cat)
    base = {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "name": gpu.get("name"), "desired": desired,
            "mig_enabled": bool(spec.get("mig_enabled")), "operations": [], "kept": [], "destroyed": [],
            "created": [], "busy_destroyed": [], "before": before, "after": before, "changed": False}
    if not spec.get("mig_enabled"):
        if gpu.get("mig_mode_current") == "Enabled":
            raise MigLayoutError("%s: the layout wants MIG disabled but MIG mode is Enabled; disable it with "
                                 "gpuops.nvidia.mig_mode (or the mig role) first" % label)
        return base
    if gpu.get("mig_mode_current") != "Enabled":
        raise MigLayoutError("%s: MIG mode is %s (pending %s) but the layout needs it Enabled; enable it with "
                             "gpuops.nvidia.mig_mode (or the mig role) first" % (
                                 label, gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")))
    insts = current_instances(gpu, cat)
    unknown = [g for g in insts if g["profile"] not in cat.gi_by_name]
    if unknown:
        raise MigLayoutError("%s: existing GPU instance(s) with profile(s) not in this GPU's profile list: %s"
                             % (label, ", ".join("%s (id %s)" % (g["profile"], g["id"]) for g in unknown)))
    found = best_plan(cat, insts, desired)
    if found is None:   # cannot happen after validation (keeping nothing always fits); be explicit anyway
        raise MigLayoutError("%s: no plan reaches %s" % (label, _fmt_devices(desired)))
    score, att = found
    ops, kept, destroyed, created, busy = [], [], [], [], []
    destroy_cis, destroy_gis = [], []
    for i, gi in enumerate(insts):
        ch = att["choice"][i]
        if ch is None:
            destroy_cis.extend((gi, ci) for ci in gi["cis"])
            destroy_gis.append(gi)
            continue
        kept_entry = {"gi_id": gi["id"], "profile": gi["profile"],
                      "placement": {"start": gi["start"], "size": gi["size"]}, "compute_instances": []}
        for j, ci in enumerate(gi["cis"]):
            if j in ch:
                kept_entry["compute_instances"].append({"ci_id": ci["id"], "profile": ci["name"],
                                                        "mig_uuid": ci["mig_uuid"]})
            else:
                destroy_cis.append((gi, ci))
        kept.append(kept_entry)
    for gi, ci in destroy_cis:
        if ci["procs"]:
            busy.append({"gi_id": gi["id"], "ci_id": ci["id"], "profile": ci["name"], "mig_uuid": ci["mig_uuid"],
                         "placement": {"start": gi["start"], "size": gi["size"]},
                         "processes": [{"pid": p.get("pid"), "name": p.get("name")} for p in ci["procs"]]})
    for gi in destroy_gis:
        if gi["gi_procs"] and not any(b["gi_id"] == gi["id"] for b in busy):
            busy.append({"gi_id": gi["id"], "ci_id": None, "profile": gi["profile"], "mig_uuid": None,
                         "placement": {"start": gi["start"], "size": gi["size"]},
                         "processes": [{"pid": p.get("pid"), "name": p.get("name")} for p in gi["gi_procs"]]})
    if busy and not force:
        raise MigBusyError(
            "%s: reaching %s needs to destroy instance(s) in use; nothing was changed. %s. Stop those processes "
            "or set force: true to destroy them." % (label, _fmt_devices(desired), "; ".join(
                "%s (GI %s at %d:%d%s%s) used by %s" % (
                    b["profile"], b["gi_id"], b["placement"]["start"], b["placement"]["size"],
                    "" if b["ci_id"] is None else ", CI %s" % b["ci_id"],
                    ", %s" % b["mig_uuid"] if b["mig_uuid"] else "", _proc_desc(b["processes"])) for b in busy)),
            busy=busy)
    for gi, ci in destroy_cis:
        ops.append({"op": "destroy_compute_instance", "gi_id": gi["id"], "ci_id": ci["id"], "profile": ci["name"]})
        destroyed.append({"kind": "compute_instance", "gi_id": gi["id"], "ci_id": ci["id"], "profile": ci["name"],
                          "mig_uuid": ci["mig_uuid"],
                          "processes": [{"pid": p.get("pid"), "name": p.get("name")} for p in ci["procs"]]})
    for gi in destroy_gis:
        ops.append({"op": "destroy_gpu_instance", "gi_id": gi["id"], "profile": gi["profile"],
                    "placement": {"start": gi["start"], "size": gi["size"]}})
        destroyed.append({"kind": "gpu_instance", "gi_id": gi["id"], "profile": gi["profile"],
                          "placement": {"start": gi["start"], "size": gi["size"]}})
    new_order = sorted(range(len(att["groups"])), key=lambda k: (att["placements"][k]["start"], k))
    refs = {}
    for n, k in enumerate(new_order):
        g = att["groups"][k]
        pl = att["placements"][k]
        prof = cat.gi_by_name[g["profile"]]
        ref = "new%d" % n
        refs[k] = ref
        ops.append({"op": "create_gpu_instance", "ref": ref, "profile": g["profile"], "profile_id": prof["id"],
                    "placement": {"start": pl["start"], "size": pl["size"]}})
        created.append({"kind": "gpu_instance", "ref": ref, "profile": g["profile"],
                        "placement": {"start": pl["start"], "size": pl["size"]}})
    after_gis = []
    for slot in att["slots"]:
        gi = insts[slot["gi_i"]]
        for name in slot["add"]:
            prof, ci, full = cat.devices[name]
            ops.append({"op": "create_compute_instance", "gi_id": gi["id"], "profile": name,
                        "ci_profile_id": ci.get("id"), "gi_profile": prof["name"]})
            created.append({"kind": "compute_instance", "gi_id": gi["id"], "profile": name})
        after_gis.append(describe_gi(gi["profile"], gi["start"], gi["size"], slot["names"] + slot["add"]))
    for k in new_order:
        g = att["groups"][k]
        for name in g["add"]:
            prof, ci, full = cat.devices[name]
            ops.append({"op": "create_compute_instance", "ref": refs[k], "profile": name,
                        "ci_profile_id": ci.get("id"), "gi_profile": prof["name"]})
            created.append({"kind": "compute_instance", "ref": refs[k], "profile": name})
        pl = att["placements"][k]
        after_gis.append(describe_gi(g["profile"], pl["start"], pl["size"], g["add"]))
    base.update({
        "operations": ops, "kept": kept, "destroyed": destroyed, "created": created, "busy_destroyed": busy,
        "changed": bool(ops),
        "after": {"mig_mode": gpu.get("mig_mode_current"),
                  "mig_devices": dict(sorted(desired.items(), key=lambda kv: _name_sort_key(kv[0]))),
                  "gpu_instances": sorted(after_gis)},
    })
    return base


def plan_layout(gpus, resolved, force=False):
    """Plan every GPU in ``resolved['gpus']``. Validates all GPUs before returning anything (all or nothing):
    errors from several GPUs are reported together."""
    by_index = dict((g["index"], g) for g in gpus)
    plans, errors, busy = [], [], []
    for index in sorted(resolved["gpus"]):
        try:
            plans.append(plan_gpu(by_index[index], resolved["gpus"][index], force=force))
        except MigBusyError as e:
            errors.append(str(e))
            busy.extend(dict(b, index=index) for b in e.busy)
        except MigLayoutError as e:
            errors.append(str(e))
    if errors:
        if busy and len(busy) and all(isinstance(x, str) for x in errors):
            err = MigBusyError(" | ".join(errors), busy=busy)
        else:
            err = MigLayoutError(" | ".join(errors))
        raise err
    return plans


def execute_plan(backend, index, operations, on_step=None):
    """Run planned operations through a device backend, in order. New GPU instances are referred to by
    ``ref`` until created. Returns the list of (op, result). Stops at the first error (the error propagates;
    a re-run re-reads state and plans again from where it stopped)."""
    refs = {}
    done = []
    for op in operations:
        kind = op["op"]
        if kind == "destroy_compute_instance":
            backend.destroy_compute_instance(index, op["gi_id"], op["ci_id"])
            res = None
        elif kind == "destroy_gpu_instance":
            backend.destroy_gpu_instance(index, op["gi_id"])
            res = None
        elif kind == "create_gpu_instance":
            res = backend.create_gpu_instance(index, op["profile_id"], op["placement"]["start"])
            refs[op["ref"]] = res
        elif kind == "create_compute_instance":
            gi_id = op["gi_id"] if "gi_id" in op else refs[op["ref"]]
            res = backend.create_compute_instance(index, gi_id, op["ci_profile_id"])
        else:
            raise MigLayoutError("unknown plan operation %r" % kind)
        done.append((op, res))
        if on_step:
            on_step(op, res)
    return done
