"""gpu_info's NVLink fabric facts next to `nvidia-smi -q`'s "Fabric" section, GPU by GPU (read only; used by
tests/gpu/test_gpu_info_real.py on a GPU host, and unit-tested on a text in nvidia-smi's layout).

nvidia-smi -q prints, under each "GPU <bus id>", a "Fabric" section: State, Status, CliqueId, ClusterUUID and, under
"Health", Bandwidth, Route Recovery in progress, Route Unhealthy, Access Timeout Recovery (and Summary on newer
drivers, the v3 struct's, which gpu_info does not read). docs/gpu-info.md has the map of the words."""
import re

NOT_SUPPORTED = "not supported"
_STATES = {"Completed": "completed", "In Progress": "in_progress", "Not Started": "not_started"}
_BANDWIDTH = {"Full": False, "Degraded": True}
_BOOLS = {"True": True, "False": False}
# nvidia-smi's health line -> gpu_info's health field, and the words' map
HEALTH_LINES = (("Bandwidth", "degraded_bandwidth", _BANDWIDTH),
                ("Route Recovery in progress", "route_recovery_in_progress", _BOOLS),
                ("Route Unhealthy", "route_unhealthy", _BOOLS),
                ("Access Timeout Recovery", "access_timeout_recovery", _BOOLS))


def fabric_sections(text):
    """[(bus id, {"State": ..., "Status": ..., "CliqueId": ..., "ClusterUUID": ..., "Health": {line: value}})] in the
    order nvidia-smi lists the GPUs; a GPU without a Fabric section gets {}."""
    out, section, where = [], None, None
    for line in text.splitlines():
        gpu = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", line)
        if gpu:
            section, where = {}, None
            out.append((gpu.group(1), section))
            continue
        if section is None:
            continue
        indent = len(line) - len(line.lstrip(" "))
        text_ = line.strip()
        if indent == 4:
            where = "fabric" if text_ == "Fabric" else None
            continue
        if where is None or ":" not in text_ and text_ != "Health":
            continue
        if indent == 8:
            if text_ == "Health":
                where = "health"
                section.setdefault("Health", {})
                continue
            where = "fabric"
            key, dummy, value = text_.partition(":")
            section[key.strip()] = value.strip()
        elif indent == 12 and where == "health":
            key, dummy, value = text_.partition(":")
            section["Health"][key.strip()] = value.strip()
    return out


def as_gpu_info(section):
    """One GPU's Fabric section in gpu_info's words: NOT_SUPPORTED where the state is N/A, else {"state", "status",
    "clique_id", "cluster_uuid", "health": {field: value}} (a health line nvidia-smi does not print is left out)."""
    if not section or section.get("State") in (None, "N/A"):
        return NOT_SUPPORTED
    status = section.get("Status", "")
    health = {}
    for line, field, words in HEALTH_LINES:
        value = section.get("Health", {}).get(line)
        if value is not None:
            health[field] = NOT_SUPPORTED if value == "N/A" else words.get(value, value)
    return {"state": _STATES.get(section["State"], section["State"]),
            "status": "SUCCESS" if status == "Success" else status.upper().replace(" ", "_"),
            "clique_id": int(section["CliqueId"]) if section.get("CliqueId", "").isdigit() else section.get("CliqueId"),
            "cluster_uuid": section.get("ClusterUUID", "").lower(), "health": health}


def rows(gpus, smi_text):
    """(field, gpu_info's value, nvidia-smi's value) for every fabric field nvidia-smi prints, GPU by GPU (gpu_info's
    ``gpus`` in NVML index order, which is nvidia-smi's)."""
    out = []
    for gpu, (bus_id, section) in zip(gpus, fabric_sections(smi_text)):
        ours, theirs = gpu["fabric"], as_gpu_info(section)
        name = "gpu%d.fabric" % gpu["index"]
        if ours == NOT_SUPPORTED or theirs == NOT_SUPPORTED:
            out.append((name, ours if ours == NOT_SUPPORTED else ours["state"],
                        theirs if theirs == NOT_SUPPORTED else theirs["state"]))
            continue
        for key in ("state", "status", "clique_id", "cluster_uuid"):
            out.append(("%s.%s" % (name, key), ours[key], theirs[key]))
        for field, value in sorted(theirs["health"].items()):
            mine = ours["health"].get(field) if isinstance(ours["health"], dict) else NOT_SUPPORTED
            out.append(("%s.health.%s" % (name, field), mine, value))
    return out
