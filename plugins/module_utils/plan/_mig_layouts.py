# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Declared MIG layouts: the inline ``layout`` form, mig-parted v1 config files, the named layouts
(all-disabled, all-enabled, all-balanced, all-<size>, all-<profile>) and the selectors that say which GPUs an entry
takes (devices, device-filter, models). ``resolve_layout`` turns one of them into a layout per GPU.

A declared layout, per GPU, is ``{"mig_enabled": bool, "mig_devices": {name: count}}``. Like mig-parted, equality
is by the multiset of MIG devices (see _mig_plan for how it is reached).

Pure functions over GPU facts; no I/O (a config file is read by the caller, _mig_apply.load_config_file).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import (
    NAME_FORMS,
    Catalog,
    gpu_label,
    is_plain_profile,
    name_sort_key,
    parse_profile_name,
)

# mig-parted names its generated all-<profile> layouts with '+' turned into '.' (all-1g.24gb.me.all, all-1g.10gb.me:
# NVIDIA/mig-parted@bd7160f4:pkg/mig/builder normalizeProfileName, deployments/systemd/config-default.yaml); '-' stays
# (all-1g.24gb-me).
MIGPARTED_LAYOUT_PROFILE_RE = re.compile(r"^[0-9]{1,9}g\.[0-9]{1,9}gb(?:[.+-][A-Za-z][A-Za-z0-9.,]*)?$")
PCI_FILTER_RE = re.compile(r"^0x(?P<dev>[0-9a-fA-F]{4})(?P<ven>[0-9a-fA-F]{4})"
                           r"(?::0x(?P<sdev>[0-9a-fA-F]{4})(?P<sven>[0-9a-fA-F]{4}))?$")
NAMED_LAYOUTS = ("all-disabled", "all-enabled", "all-balanced", "all-<size> (e.g. all-1g, all-3g)",
                 "all-<profile> (e.g. all-1g.10gb, all-1g.24gb+gfx, or mig-parted's spelling all-1g.24gb.gfx)")
SIZE_RE = re.compile(r"^all-([0-9]{1,9})g$")


class MigLayoutError(ValueError):
    """A layout that cannot be applied; the message says what is wrong and what is valid."""


# ---------------------------------------------------------------------------------------------------------
# Selectors and entries


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


def index_of(sel):
    """A GPU index from an int or a string of ASCII digits; None for anything else (unicode digits such as '\u00b2'
    pass str.isdigit() but are no index, and int() refuses strings of more than 4300 digits)."""
    if isinstance(sel, int):
        return sel
    if sel.isascii() and sel.isdigit() and len(sel) <= 9:
        return int(sel)
    return None


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
                    if gpu.get("index") == index_of(sel):
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

    Rules from NVIDIA/mig-parted@bd7160f4:api/spec/v1 and pkg/types/mig_config.go (AssertValidFormat).
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
                    "mig_devices": _validate_counts(entry.get("mig-devices"), where + ".mig-devices"),
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
        devs = _validate_counts(_entry_get(entry, "mig_devices"), where + ".mig_devices")
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
            sizes = sorted(set("all-%dg" % p["slices"] for p in cat.gi_by_name.values() if is_plain_profile(p["name"])))
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
                                 % (gpu_label(gpu), name, pname, ", ".join(sorted(cat.gi_by_name, key=name_sort_key))))
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
