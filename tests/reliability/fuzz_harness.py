"""How the input fuzzer (test_fuzz_inputs.py) runs each module, filter and role: the harness table.

The fuzzer finds every module in plugins/modules, every filter in plugins/filter and every role's
meta/argument_specs.yml by itself, and reads each module's argument_spec from the module. What it cannot know is
how to run a module against something that behaves like a node: that is this table. A module, filter or role
without an entry here makes test_every_module_has_a_harness (and its siblings for filters and roles) fail:
add one for every new module.

A module entry:
- ``rig``: which environment of tests/support/rigs.py it runs against (sim, mps, containerd, cdi, kube, helm,
  operator, dra, dra_api, driver), and
  ``rig_kwargs`` for it;
- ``args``: a valid run (test_harness_run_succeeds checks it succeeds), from which each example changes one to
  three options;
- ``hints``: strategies for options whose plain type says too little (``layout``, ``kubeconfig``...), keyed by
  option path (``profiles[].resources``);
- ``fixed``: options never fuzzed, each with the reason;
- ``files``: more files for the sandbox's pool (tests/support/fuzz_values.py), e.g. a valid config to get deeper;
- ``outcomes``: fragments of the messages of failures that report what the system did after the module's change
  (the MIG manager's state, a rollout that did not show), not an input error: such a run may report changed=true
  and need not name an option (it must still not let an exception escape). Keep them exact and few.
"""
import os

from hypothesis import strategies as st

from tests.support import fuzz_values, rigs
from tests.support.fuzz_values import HUGE_INTS, ODD_FLOATS, hostile, json_values, paths, strings

SANDBOX, POOL = fuzz_values.SANDBOX, fuzz_values.POOL

# ---- hints shared by several modules -----------------------------------------------------------------------------
_COUNTS = st.one_of(st.integers(-2, 9), st.sampled_from(HUGE_INTS + ODD_FLOATS),
                    st.sampled_from(["2", "two", "\u00b2", "\uff12", "1e3", "", "9" * 5000]))
_PROFILE_NAMES = st.one_of(st.sampled_from([n for n in fuzz_values.DOMAIN if "g." in n]), strings(),
                           st.sampled_from(["9" * 5000 + "g.18gb", "1g." + "9" * 5000 + "gb", "\uff11g.18gb",
                                            "1g.18gb+me,me", "1g.18gb+gfx", "1g.24gb+me.all", "1c.1g.18gb-me",
                                            "1g.18gb+", "1g.18gb+-me", "1g.18gb+" + ",".join(["a"] * 5000)]))
_MIG_DEVICES = st.one_of(st.dictionaries(_PROFILE_NAMES, _COUNTS, max_size=4), hostile())
_DEVICES = st.one_of(st.just("all"), st.lists(st.one_of(st.integers(-1, 9), st.sampled_from(HUGE_INTS),
                                                        strings()), max_size=4), hostile())
_ENTRY = st.fixed_dictionaries({}, optional={
    "devices": _DEVICES, "mig_devices": _MIG_DEVICES, "mig-devices": _MIG_DEVICES,
    "mig_enabled": st.one_of(st.booleans(), hostile()), "models": st.lists(strings(), max_size=3),
    "device_filter": st.one_of(st.sampled_from(["0x233510DE", "0x20B010DE:0x134F10DE", "0x2335"]), strings()),
    "profiles": st.just({"1g.18gb": 1})})
LAYOUT = st.one_of(st.lists(_ENTRY, min_size=1, max_size=3), hostile())

MIGPARTED = {
    "valid.yaml": "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
                  "        1g.18gb: 7\n  b:\n    - devices: [0, 1]\n      mig-enabled: false\n",
    "huge-count.yaml": "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
                       "      mig-devices: {1g.18gb: 1000000000000}\n",
    "aliases-config.yaml": "version: v1\nx: &x [{devices: all, mig-enabled: true, mig-devices: {1g.18gb: 1}}]\n"
                           "mig-configs: {a: *x}\n",
    "list.yaml": "- 1\n- 2\n",
}
CONFIG_FILE = paths(sorted(MIGPARTED))
CONFIG_NAME = st.one_of(st.sampled_from(["a", "b", "all-balanced", "all-1g", "all-7g", "all-disabled", "all-0g",
                                         "all-999999999999g", "all-" + "9" * 5000 + "g", "all-1g.18gb",
                                         "all-\u00b9g", "all-\uff11g"]), strings())

KUBECONFIG_FILES = {
    "kubeconfig-list.yaml": "- clusters\n",
    "kubeconfig-empty-map.yaml": "{}\n",
    "kubeconfig-bad-server.yaml": "apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters:\n- name: c\n"
                                  "  cluster: {server: 5}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
                                  "users:\n- name: u\n  user: {token: 7}\n",
    "kubeconfig-strings.yaml": "apiVersion: v1\nclusters: x\ncontexts: y\nusers: z\ncurrent-context: q\n",
}
_BAD_KUBECONFIGS = [
    {}, {"clusters": 5}, {"clusters": [5]}, {"clusters": [{"name": "c"}], "current-context": "x"},
    {"current-context": 7, "contexts": [{"name": 7, "context": None}]},
    {"clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
     "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "users": [{"name": "u", "user": 5}],
     "current-context": "x"},
    {"clusters": [{"name": "c", "cluster": {"server": 12}}],
     "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "users": "u", "current-context": "x"},
    "apiVersion: v1\nclusters: [\n", "clusters:\n- 1\n", "{\"clusters\": {}}", "current-context: x\nclusters: 3\n",
]
KUBECONFIG = st.one_of(st.just(SANDBOX + "/kubeconfig"), paths(sorted(KUBECONFIG_FILES)),
                       st.sampled_from(_BAD_KUBECONFIGS), hostile())
HOST = st.one_of(st.sampled_from(["", "http://127.0.0.1:1", "127.0.0.1", "http://[::1", "ftp://x", "http://127.0.0.1:99999",
                                  "https://127.0.0.1:1", "http://user:pw@127.0.0.1:1/", "http://\x00", "not a url",
                                  "http://127.0.0.1:1/" + "a" * 10000, "http://\udcff"]), hostile())
TIMEOUTS = st.one_of(st.integers(-3, 5), st.sampled_from(HUGE_INTS), hostile())
KUBE_HINTS = {"kubeconfig": KUBECONFIG, "host": HOST,
              "request_timeout": st.one_of(st.sampled_from(ODD_FLOATS + HUGE_INTS + [0, -1, 0.001]),
                                           hostile())}
KUBE_FILES = dict(KUBECONFIG_FILES)

_LIMITS = st.one_of(
    st.sampled_from(["0=8G", "0=8G,1=4096M", "0=" + "9" * 30 + "G", "99999999=8G", "0=8T", "0=0G", "0=-1G",
                     "\uff10=8G", "0=\uff18G", "\u00b2=8G", "0=8G\n", "0=8G,0=4G", ",".join("%d=1G" % i for i in range(999)),
                     "0=8G;rm -rf /"]),
    st.dictionaries(st.one_of(st.integers(-2, 9), st.sampled_from(HUGE_INTS), strings()),
                    st.one_of(st.sampled_from(["8G", "4096M", "9" * 40 + "M", "0M", "-1G", "1.5G"]), strings(),
                              st.sampled_from(HUGE_INTS)), max_size=4),
    hostile())
# The DRA templates' pinned memory limits, Kubernetes quantities (plugins/module_utils/plan/_dra.py quantity_bytes): its
# valid forms, CUDA's notation and other near misses it must refuse, and values past any range or precision.
_QUANTITIES = st.one_of(
    st.sampled_from(["10Gi", "512Mi", "2Gi", "1G", "1000M", "1e9", "1E+9", "1.5Gi", "+1Gi", ".5Gi", "1.Gi", "1048576",
                     1073741824, "8GB", "512MB", "8GiB", "8 Gi", "8Gi\n", "1K", "1mi", "1e3Mi", "1_000Mi", "NaN",
                     "Infinity", "1.5", "1m", "0", "-1Gi", "1Ki", "1Pi", "1E", "1e99999999999999999999",
                     "1e-99999999999999999999", "9" * 5000 + "Gi", "0." + "0" * 5000 + "1Gi", "\uff18Gi",
                     "1.0000000000000000000000000001Gi"]),
    strings(), st.sampled_from(HUGE_INTS + ODD_FLOATS))
_PER_DEVICE_QUANTITIES = st.one_of(st.dictionaries(st.sampled_from(
    [0, "0", "1", "01", "GPU-0a1b2c3d-0000-1111-2222-333344445555"]), _QUANTITIES, max_size=2), hostile())
# a GpuConfig built by hand (dra_claim_templates' templates[].config)
_MPS_CONFIGS = st.builds(lambda limit, per_device: {
    "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
        "defaultPinnedDeviceMemoryLimit": limit, "defaultPerDevicePinnedMemoryLimit": per_device}}},
    _QUANTITIES, _PER_DEVICE_QUANTITIES)
_PERCENT = st.one_of(st.integers(-2, 120), st.sampled_from(HUGE_INTS + ODD_FLOATS),
                     st.sampled_from(["50", "50%", "\uff15\uff10", "\u00b2", "50\n", "05", "100.0"]), hostile())

_GPU_FACTS = st.one_of(
    st.lists(st.fixed_dictionaries({}, optional={
        "index": st.one_of(st.integers(0, 8), hostile()),
        "memory_total_mib": st.one_of(st.sampled_from([143771, 81920, 0, -1]), st.sampled_from(HUGE_INTS),
                                      hostile()),
        "memory_total_bytes": st.one_of(st.sampled_from(HUGE_INTS), hostile()),
        "name": strings(), "uuid": strings(), "mig_mode_current": strings()}), max_size=3),
    hostile())
_RESOURCES = st.one_of(st.lists(st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.18gb"]), strings()),
    "replicas": st.one_of(st.integers(-1, 50), st.sampled_from(HUGE_INTS), hostile()),
    "devices": st.just("all"), "rename": strings()}), max_size=3), hostile())


def _facts_of(shape, mig_on=()):
    """gpu_info's facts of a simulated node of ``shape``; ``mig_on``: GPUs with MIG enabled and one 3g instance."""
    import shutil
    import tempfile
    from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
    directory = tempfile.mkdtemp()
    try:
        sim = SimulatedBackend(directory + "/state.json", shape=shape)
        for index in mig_on:
            sim.set_mig_mode(index, True)
            sim.reset_gpu(index)
            gi = sim.create_gpu_instance(index, 9, 0)
            sim.create_compute_instance(index, gi, 2)
        return sim.read_all()
    finally:
        shutil.rmtree(directory)


# A mixed node (A100 with MIG devices, non-MIG GPUs), as filters receive facts; the operator rig's nodes.
REAL_FACTS = _facts_of("mixed", mig_on=(0,))
A100_FACTS = _facts_of("dgx-a100-40gb")
H200_FACTS = _facts_of("hgx-h200")
_ANY = st.one_of(json_values(), hostile(), st.sampled_from(fuzz_values.NOT_UTF8))
# gpu_node_plan's health.policy and gpu_node's gpu_node_health_policy: known kinds and actions, near misses, anything
# gpu_info's health_dcgmi and gpu_node_plan's health.dcgmi: a command that is run. Never a tool of this machine: the
# lab's stand-in dcgmi, names no PATH holds, and odd strings that name no executable (a plain string drawn at random
# could name one, which would then run with "diag -r 1 -j")
_DCGMI_STANDIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "bin", "dcgmi")
# gpu_burn_in's nvbandwidth: the lab's stand-in, or a fuzzed command (one that does not print nvbandwidth's JSON fails
# naming it and records nothing)
_NVBANDWIDTH_STANDIN = os.path.join(os.path.dirname(_DCGMI_STANDIN), "nvbandwidth")
DCGMI = st.sampled_from([_DCGMI_STANDIN, "gpuops-no-such-dcgmi", "", " ", "dcgmi\x00", "./", "/",
                         "gpuops-no-such-dir/dcgmi", "é" * 300])
HEALTH_POLICY = st.one_of(st.dictionaries(
    st.one_of(st.sampled_from(["row_remap_pending", "xid_fatal", "sxid_fatal", "pcie_width_degraded", "gpu_missing",
                               "Row_Remap_Pending", "gpu-missing", ""]), _ANY),
    st.one_of(st.sampled_from(["block", "warn", "ignore", "Block", "off", ""]), _ANY), max_size=3), _ANY)


@st.composite
def _facts(draw, real=None, strict=False):
    """The real facts, or with one GPU's key replaced or removed, or with 'gpus' replaced, or anything.
    ``strict``: module arguments (no strings that are not UTF-8: ansible-core refuses those before a module runs)."""
    import copy
    anything = st.one_of(json_values(), hostile()) if strict else _ANY
    facts = copy.deepcopy(REAL_FACTS if real is None else real)
    how = draw(st.integers(0, 4))
    gpus = facts["gpus"]
    if how == 1:
        gpu = gpus[draw(st.integers(0, len(gpus) - 1))]
        gpu[draw(st.sampled_from(sorted(gpu)))] = draw(anything)
    elif how == 2:
        gpu = gpus[draw(st.integers(0, len(gpus) - 1))]
        del gpu[draw(st.sampled_from(sorted(gpu)))]
    elif how == 3:
        facts["gpus"] = draw(st.one_of(anything, st.lists(anything, max_size=3)))
    elif how == 4:
        return draw(anything)
    return draw(st.sampled_from([facts, facts["gpus"], {"gpu_facts": facts}])) if how < 3 else facts


INTERVALS = st.one_of(st.sampled_from([0.05, 0.01, 0, -1, 1e-9, 3601, 86401] + ODD_FLOATS + HUGE_INTS),
                      hostile())
OPERATOR_PROFILES = [{"name": "default"}, {"name": "mps-4", "sharing": "mps", "replicas": 4},
                     {"name": "mig-mixed", "mig_strategy": "mixed"}]
_K8S_NAMES = st.one_of(st.sampled_from(["gpu-operator", "cluster-policy", "gpuops-mig-parted-config",
                                        "default-mig-parted-config", "a100", "h200", "-x", "x" * 254, "A",
                                        "kube-system"]), strings())
OPERATOR_HINTS = dict(KUBE_HINTS, **{"policy_name": _K8S_NAMES, "namespace": _K8S_NAMES, "mig_config_map": _K8S_NAMES,
                                     "config_map": _K8S_NAMES, "device_plugin_config_map": _K8S_NAMES,
                                     "node_name": st.one_of(st.sampled_from(["a100", "h200", "gpu-node-1", "nope"]),
                                                            _K8S_NAMES),
                                     "timeout": TIMEOUTS, "interval": INTERVALS})

# node_health's verdict: a valid one, and what the fuzzer gives instead
NODE_HEALTH_VERDICT = {
    "healthy": False, "warnings": [],
    "blocking": [{"gpu": 3, "bus_id": "00000000:47:00.0", "kind": "row_remap_pending",
                  "message": "GPU 3 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot"}]}
NODE_HEALTH_VERDICTS = st.one_of(st.fixed_dictionaries(
    {"healthy": st.one_of(st.booleans(), json_values(1)),
     "blocking": st.one_of(st.lists(st.fixed_dictionaries({
         "gpu": st.one_of(st.none(), st.integers(-2, 9), st.sampled_from(HUGE_INTS)),
         "bus_id": st.one_of(st.none(), strings(["00000000:47:00.0", "47:00", "0000:47:00.7"])),
         "kind": strings(["row_remap_pending", "xid 79", "a" * 200, "", "-"]),
         "message": strings(["GPU 3: remapped rows pending", ""])}), max_size=3), hostile())},
    optional={"warnings": st.one_of(st.just([]), hostile())}), json_values(), hostile())

# ---- the driver: driver_modules and driver_plan (rig "driver": a node root of their own, tests/support/rigs.py) ---
_DRIVER_VERSIONS = st.one_of(st.sampled_from([rigs.DRIVER_NEW, rigs.DRIVER_OLD, "580.95", "580.95.06", "580",
                                              "580.95.05\n", " 580.95.05", "580.95.05.1", "v580.95.05",
                                              "\uff15\uff18\uff10.95.05", "580.95.05-0ubuntu1", "9" * 5000 + ".1"]),
                             strings())


def _tool_argv(tool):
    """driver_modules' modprobe, rmmod, modinfo, systemctl: the rig's wrapper of the stand-in (with odd arguments
    after it), any command line, anything else - but never null or [] (the option unset): the module would then look
    the tool up in /usr/sbin and /sbin, which are this machine's, whatever the rig's PATH."""
    standin = SANDBOX + "/" + rigs.PRIVATE + "/bin/" + tool
    return st.one_of(st.just([standin]), st.lists(strings(["-r", "-a", "--dry-run", "nvidia"]), min_size=1,
                                                  max_size=2).map(lambda extra: [standin] + extra),
                     st.lists(st.one_of(paths(), strings()), min_size=1, max_size=3),
                     hostile().filter(lambda v: v is not None and v != []))


# A record of an earlier unload, valid and not (record_path): the pool's files give the rest (FIFO, device, huge...)
DRIVER_RECORDS = {
    "record.json": '{"daemons": [{"name": "persistenced", "label": "nvidia-persistenced", '
                   '"unit": "nvidia-persistenced.service"}], "modules": ["nvidia", "nvidia_uvm", "nvidia_modeset"], '
                   '"version": "570.195.03", "flavour": "open"}\n',
    "record-daemon-no-name.json": '{"daemons": [{"label": "x"}], "modules": []}\n',
    "record-daemons-not-a-list.json": '{"daemons": 5, "modules": "nvidia"}\n',
    "record-argv-not-strings.json": '{"daemons": [{"name": "persistenced", "label": "p", "pid": 1, "argv": [1]}]}\n',
    "record-list.json": "[1, 2]\n",
}
# _pci.read_nvidia_devices' records (driver_plan's devices), their fields drawn good, near or anything
_PCI_DEVICE = st.fixed_dictionaries({}, optional={
    "bus_id": strings(["0000:47:00.0", "47:00.0"]),
    "kind": st.one_of(st.sampled_from(["gpu", "nvswitch", "other"]), json_values(1)),
    "vendor": st.one_of(st.sampled_from([0x10DE, 0x8086, -1]), st.sampled_from(HUGE_INTS), json_values(1)),
    "device": st.one_of(st.sampled_from([0x2335, 0x2330, 0x20B0, 0x1DB6, 0x2901, 0]), st.sampled_from(HUGE_INTS),
                        json_values(1)),
    "subsystem_vendor": st.one_of(st.just(0x10DE), json_values(1)),
    "subsystem_device": st.one_of(st.just(0x18BE), json_values(1)),
    "class": st.one_of(st.sampled_from([0x030200, 0x030000, 0x068000]), json_values(1)),
    "bound_driver": st.one_of(st.sampled_from(["nvidia", "nouveau", "vfio-pci", None]), json_values(1)),
    "name": strings(["NVIDIA H200", "NVIDIA B200"]),
    "architecture": st.one_of(st.sampled_from(["hopper", "blackwell", "volta", "pascal", "turing", "ampere", ""]),
                              json_values(1)),
    "open_modules": st.one_of(st.booleans(), json_values(1))})
_DRIVER_DEVICES = st.one_of(st.lists(_PCI_DEVICE, max_size=3), hostile())
_DRIVER_STATE = st.one_of(st.fixed_dictionaries({}, optional={
    "kernel": strings([rigs.DRIVER_KERNEL, "6.8.0-87-generic\n", "../../x", ""]),
    "secure_boot": st.one_of(st.booleans(), json_values(1)), "nvswitch": st.one_of(st.booleans(), json_values(1)),
    "nvlink5": st.one_of(st.booleans(), json_values(1)), "nouveau_loaded": st.one_of(st.booleans(), json_values(1)),
    "loaded": st.one_of(st.fixed_dictionaries({}, optional={"version": _DRIVER_VERSIONS,
                                                            "flavour": strings(["open", "proprietary"])}),
                        json_values(2))}), hostile())


def _driver_declaration(anything):
    """The driver role's declaration: known keys with good values, near misses or ``anything``. Never package_source
    distribution: its read is apt-cache madison, and a fuzzed run asks no apt tool but dpkg-query (of the rig's
    empty database)."""
    def not_distribution(value):
        return not (isinstance(value, dict) and value.get("package_source") == "distribution")
    return st.one_of(st.fixed_dictionaries({}, optional=dict((k, st.one_of(st.sampled_from(good), anything)) for k, good in (
        ("version", [rigs.DRIVER_NEW, rigs.DRIVER_OLD, "580.95", "580.95.05.1", "9" * 5000]),
        ("branch", ["580", "570", 580]), ("flavour", ["open", "proprietary"]),
        ("module_source", ["auto", "precompiled", "dkms"]), ("package_source", ["cuda_repository", "mirror", "files"]),
        ("fabric_manager", ["auto", True, "false", "maybe"]), ("fabric_manager_version", [rigs.DRIVER_NEW, "1"]),
        ("dkms_signing", ["none", "mok"]), ("allow_downgrade", [True, False, "yes"]),
        ("revision", ["0ubuntu1", "", "a b"])))), anything).filter(not_distribution)


MODULES = {
    "compute_mode": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"}, args={"mode": "Prohibited", "gpus": ["0"]}),
    "gpu_info": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"}, args={},
                     hints={"health_dcgmi": DCGMI, "health_policy": HEALTH_POLICY}),
    "gpu_simulator": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"}, args={"action": "show"}),
    # a healthy H200 node: nothing to reset; the fuzzer's policies and GPU lists must be refused or answered cleanly
    "gpu_health_reset": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"}, args={"gpus": [0, 1]},
                             hints={"health_policy": HEALTH_POLICY}),
    # the burn-in with the lab's dcgmi stand-in; a fuzzed command is looked up (one that does not answer as dcgmi fails
    # naming it), and nothing but the record may be written
    "gpu_burn_in": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"},
                        args={"level": "quick", "dcgmi": _DCGMI_STANDIN, "nvbandwidth": _NVBANDWIDTH_STANDIN},
                        hints={"level": st.sampled_from(["quick", "medium", "long", "extended", "Quick", "", "5"]),
                               "dcgmi": st.sampled_from(["dcgmi", "/bin/false", "", "dcgmi\x00", "../dcgmi"]),
                               "nvbandwidth": st.sampled_from([_NVBANDWIDTH_STANDIN, "gpuops-no-such-nvbandwidth",
                                                               "/bin/false", "", " ", "nvbandwidth\x00", "../x"])}),
    # The sweep's report, written into the sandbox: no node behind it (the sim rig is only its directory); the
    # fuzzer's sweeps and rows must be refused naming the field, its dest paths refused or written cleanly.
    "health_report": dict(rig="sim", args={
        "dest": SANDBOX + "/reports",
        "sweep": {"time": "2026-11-29T06:17:10Z", "check_mode": False, "id": "fuzz",
                  "breaker": {"open": False, "limit": 3, "window_hours": 24, "quarantined_in_window": 0, "held": []}},
        "rows": [{"node": "gpu-node-1", "gpus": 8, "state": "quarantined", "actions": ["quarantined"],
                  "findings": [{"gpu": 3, "bus_id": "00000000:47:00.0", "kind": "xid_79", "message": "fell off the bus",
                                "action": "block"}],
                  "quarantined_since": "2026-11-29T06:17:10Z", "quarantine_seconds": 0}]},
        # dest: the pool's files and odd paths, never one outside the sandbox (the module writes there)
        hints={"dest": st.one_of(st.just(SANDBOX + "/reports"), paths().filter(
            lambda p: p.startswith(SANDBOX) or not (p.startswith("/") or ".." in p)))}),
    # a role's declared files, written into the sandbox: never a path outside it (the module writes there); bad
    # entries (relative paths, odd modes, texts not given) refused naming files[i], the path and what is valid
    "declared_files": dict(rig="sim", args={
        "files": [{"path": SANDBOX + "/declared", "state": "directory", "mode": "0755"},
                  {"path": SANDBOX + "/declared/a.conf", "content": "a", "mode": "0644"},
                  {"path": SANDBOX + "/declared/b.py", "content": "b", "mode": "0755", "diff": False}],
        "contents": {"a": "[a]\nkey = 1\n", "b": "print('b')\n"}},
        hints={"files[].path": st.one_of(st.just(SANDBOX + "/declared/c.conf"),
                                         paths().filter(lambda p: p.startswith(SANDBOX) or not p.startswith("/"))),
               "files[].content": st.sampled_from(["a", "b", "c", "", "a\x00"]),
               "files[].mode": st.sampled_from(["0644", "0755", "644", "7777", "u+rwx", "0o644", "", "08", "-1"])}),
    # the sweep's node read: a healthy H200 node, the cursor in the sandbox; deadlines small, huge, odd
    "gpu_health_read": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"},
                            args={"cursor_path": SANDBOX + "/cursor/health-cursor.json", "deadline": 5},
                            hints={"policy": HEALTH_POLICY,
                                   "deadline": st.one_of(st.floats(allow_nan=True, allow_infinity=True), TIMEOUTS),
                                   "cursor_path": st.one_of(st.just(SANDBOX + "/cursor/health-cursor.json"), paths().filter(
                                       lambda p: p.startswith(SANDBOX) or not (p.startswith("/") or ".." in p)))}),
    "mig_layout": dict(rig="sim", rig_kwargs={"shape": "hgx-h200", "enable": list(range(8))},
                       args={"gpus": ["0", "1"], "config_name": "all-balanced"},
                       hints={"layout": LAYOUT, "config_file": CONFIG_FILE, "config_name": CONFIG_NAME},
                       files=MIGPARTED),
    "mig_mode": dict(rig="sim", rig_kwargs={"shape": "dgx-a100-40gb"},
                     args={"enabled": True, "allow_reset": True, "gpus": ["0"]},
                     hints={"layout": LAYOUT, "config_file": CONFIG_FILE, "config_name": CONFIG_NAME},
                     files=MIGPARTED),
    "mps_control": dict(rig="mps", args={"default_active_thread_percentage": 50,
                                         "default_pinned_device_mem_limit": "0=8G"},
                        hints={"default_pinned_device_mem_limit": _LIMITS,
                               "default_active_thread_percentage": _PERCENT, "timeout": TIMEOUTS,
                               "lock_timeout": TIMEOUTS}),
    "containerd_runtime": dict(rig="containerd", args={}),
    "cdi_spec": dict(rig="cdi", rig_kwargs={"shape": "dgx-a100-40gb", "enable": [0, 1]}, args={}),
    "runtime_mode": dict(rig="cdi", rig_kwargs={"module": "runtime_mode"}, args={"mode": "cdi"}),
    "dev_char_symlinks": dict(rig="cdi", rig_kwargs={"module": "dev_char_symlinks"}, args={}),
    # the systemctl stand-in with NVIDIA's IMEX unit running; the record and systemctl pinned to the rig
    # (test_fuzz_inputs.PINNED: unset, they are this machine's /var/lib/gpuops and systemctl)
    "host_imex": dict(rig="imex", args={},
                      hints={"units": st.one_of(st.lists(st.sampled_from(
                          ["nvidia-imex.service", "nvidia-imex-ctl.service", "nvidia-imex", "a b.service",
                           "x;id.service", ""]), max_size=3), _ANY)}),
    "device_plugin": dict(rig="helm", args={},
                          hints=dict(KUBE_HINTS, **{"profiles[].resources": _RESOURCES, "nodes[].gpus": _GPU_FACTS,
                                                    "values": st.one_of(json_values(), hostile()),
                                                    "pending_timeout": TIMEOUTS, "verify_timeout": TIMEOUTS,
                                                    "timeout": st.one_of(st.sampled_from(
                                                        ["5m0s", "1h", "99999999999h", "-1s", "1", "5x"]),
                                                        hostile())}),
                          files=KUBE_FILES),
    "dra_driver": dict(rig="dra", args={},
                       hints=dict(KUBE_HINTS, **{"values": st.one_of(json_values(), hostile()),
                                                 "nodes": st.one_of(st.lists(strings(["gpu-node-1", "nope"]),
                                                                             max_size=3), hostile()),
                                                 "pending_timeout": TIMEOUTS,
                                                 "timeout": st.one_of(st.sampled_from(
                                                     ["5m0s", "1h", "99999999999h", "-1s", "1", "5x"]), hostile())}),
                       files=KUBE_FILES),
    "dcgm_exporter": dict(rig="exporter", args={},
                          hints=dict(KUBE_HINTS, **{"values": st.one_of(json_values(), hostile(), st.sampled_from([
                              {"hostNetwork": False}, {"arguments": ["-r", "h:1"]}, {"arguments": ["-f", "x.csv"]},
                              {"extraEnv": [{"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "x"}]}])),
                              "host_engine_port": st.one_of(st.integers(-2, 70000), st.sampled_from(HUGE_INTS),
                                                            hostile()),
                              "pending_timeout": TIMEOUTS,
                              "timeout": st.one_of(st.sampled_from(["5m0s", "1h", "99999999999h", "-1s", "1", "5x"]),
                                                   hostile())}),
                          files=KUBE_FILES),
    "dcgm_exporter_verify": dict(rig="exporter", rig_kwargs={"module": "verify"}, args={"timeout": 1, "interval": 0.05},
                                 hints=dict(KUBE_HINTS, **{
                                     "timeout": TIMEOUTS, "interval": INTERVALS,
                                     "port": st.one_of(st.integers(-2, 70000), hostile()),
                                     "node_name": st.one_of(strings(["gpu-node-1", "nope", "a b"]), hostile()),
                                     "gpus": st.one_of(st.just([{"index": 0, "uuid": rigs.EXPORTER_GPUS[0]["uuid"]}]),
                                                       st.just([{"index": 5}]), _ANY)}),
                                 # the exporter lists no temperature for a GPU given, or no pod answers (within timeout)
                                 outcomes=("serves no DCGM_FI_DEV_GPU_TEMP series", "no Ready DCGM exporter pod",
                                           "reading /metrics of pod"),
                                 files=KUBE_FILES),
    "node_labels": dict(rig="kube", args={"node_name": "gpu-node-1", "hostname": [], "internal_ips": [],
                                          "labels": {"gpuops.example.com/x": "1"}},
                        hints=dict(KUBE_HINTS, labels=st.one_of(
                            st.dictionaries(strings(["gpuops.example.com/y", "nvidia.com/gpu.present"]),
                                            st.one_of(strings(), st.none(), st.booleans(),
                                                      st.integers()), max_size=4),
                            st.lists(strings(["a=b", "gpuops.example.com/y=1"]), max_size=3), hostile())),
                        files=KUBE_FILES),
    "node_gpu_pods": dict(rig="kube", args={"node_name": "gpu-node-1", "state": "paused", "owner": "fuzz",
                                            "daemonsets": [{"namespace": "nvidia-device-plugin",
                                                            "selector": "app.kubernetes.io/instance=nvdp"}],
                                            "timeout": 2, "interval": 0.05},
                          hints=dict(KUBE_HINTS, timeout=TIMEOUTS, daemonsets=st.one_of(
                              st.lists(st.fixed_dictionaries({"namespace": strings(["nvidia-device-plugin", "a b"])},
                                                             optional={"selector": strings(["app=x", "a in (", ""]),
                                                                       "name": strings(["dcgm-exporter", ""])}),
                                       max_size=2), hostile())),
                          files=KUBE_FILES),
    "node_cordon": dict(rig="kube", args={"node_name": "gpu-node-1", "state": "cordoned", "owner": "fuzz"},
                        hints=dict(KUBE_HINTS, drain_timeout=TIMEOUTS), files=KUBE_FILES),
    "node_health": dict(rig="kube", args={"node_name": "gpu-node-1", "verdict": NODE_HEALTH_VERDICT},
                        hints=dict(KUBE_HINTS, verdict=NODE_HEALTH_VERDICTS,
                                   owner=strings(["gpuops.nvidia.gpu_node", ""])),
                        files=KUBE_FILES),
    # the sweep's quarantine over the kube rig's nodes: verdicts per node name, the breaker's and damping's settings
    "health_quarantine": dict(rig="kube", args={"verdicts": {"gpu-node-1": NODE_HEALTH_VERDICT}},
                              hints=dict(KUBE_HINTS, verdicts=st.one_of(st.dictionaries(
                                  st.one_of(st.sampled_from(["gpu-node-1", "nope"]), _K8S_NAMES),
                                  NODE_HEALTH_VERDICTS, max_size=3), hostile())),
                              files=KUBE_FILES),
    # the sweep's remediation over the kube rig's node: health_quarantine's decisions, the consent per node, the cap
    "health_remediation": dict(rig="kube", args={"decisions": [{"node": "gpu-node-1", "action": "keep", "blocking": [
        {"gpu": 0, "bus_id": "00000000:18:00.0", "kind": "row_remap_pending", "message": "remap pending"}]}],
        "consent": {"gpu-node-1": "reset"}},
        hints=dict(KUBE_HINTS, consent=st.one_of(st.dictionaries(
            st.sampled_from(["gpu-node-1", "nope"]), st.sampled_from(["none", "reset", "reboot", "yes", 1]),
            max_size=2), hostile())),
        files=KUBE_FILES),
    "runtime_class": dict(rig="kube", args={},
                          hints=dict(KUBE_HINTS, node_selector=st.one_of(
                              st.dictionaries(strings(), json_values(3), max_size=3), hostile())),
                          files=KUBE_FILES),
    "gpu_operator": dict(rig="operator", args={"profiles": OPERATOR_PROFILES, "mig_config_map": "gpuops-mig-parted-config",
                                               "nodes": [{"name": "a100", "profile": "mig-mixed"},
                                                         {"name": "h200", "profile": "mps-4"}]},
                         hints=dict(OPERATOR_HINTS, **{"profiles[].resources": _RESOURCES,
                                                       "nodes[].name": OPERATOR_HINTS["node_name"]}),
                         files=KUBE_FILES),
    "gpu_operator_mig": dict(rig="operator", rig_kwargs={"loop": True},
                             args={"node_name": "a100", "gpus": A100_FACTS, "config_name": "all-balanced",
                                   "config_map": "gpuops-mig-parted-config", "namespace": "gpu-operator",
                                   "timeout": 20, "interval": 0.05},
                             hints=dict(OPERATOR_HINTS, layout=LAYOUT, config_name=CONFIG_NAME,
                                        gpus=_facts(A100_FACTS, strict=True)),
                             # the layout was published and the node labelled; then the MIG manager failed (GPU facts
                             # of another node, a busy GPU) or did not report within timeout
                             outcomes=("the GPU Operator's MIG manager reported nvidia.com/mig.config.state=failed",
                                       "nvidia.com/mig.config.state is still", "no nvidia.com/mig.config.state was "
                                       "written"),
                             files=KUBE_FILES),
    "dra_claim_templates": dict(rig="dra_api", args={
        "template_set": "fleet", "namespaces": ["ml"],
        "templates": [{"name": "gpu"}, {"name": "gpu-ts-2", "config": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}}}]},
        hints=dict(KUBE_HINTS, namespaces=st.one_of(st.lists(strings(["ml", "nope", "a b"]), max_size=2), hostile()),
                   **{"templates[].config": st.one_of(_MPS_CONFIGS, _ANY)}),
        files=KUBE_FILES),
    "dra_compute_domains": dict(rig="dra_api", args={
        "compute_domains": [{"name": "nvl72", "namespace": "ml", "num_nodes": 0},
                            {"name": "all", "namespace": "ml", "num_nodes": 2, "channel_allocation_mode": "All"}]},
        # (a list of mappings the module checks itself, key by key: the keys with good and bad values, any value)
        hints=dict(KUBE_HINTS, compute_domains=st.one_of(st.lists(st.fixed_dictionaries({}, optional={
            "name": strings(["nvl72", "a" * 250, "X_1"]), "namespace": strings(["ml", "nope", "a b"]),
            "num_nodes": st.one_of(_COUNTS, hostile()), "channel_allocation_mode": strings(["Single", "All", "all"]),
            "claim_template": strings(["chan"]), "nodes": _ANY}), max_size=3), hostile())),
        files=KUBE_FILES),
    "dra_node_verify": dict(rig="dra_api", args={"node_name": "gpu-node-1", "gpus": [rigs.DRA_GPU], "timeout": 1,
                                                 "interval": 0.05},
                            hints=dict(KUBE_HINTS, timeout=TIMEOUTS, gpus=st.one_of(st.just([rigs.DRA_GPU]), _ANY)),
                            # the node's slices do not list the GPUs given (within timeout)
                            outcomes=("does not publish exactly its devices",),
                            files=KUBE_FILES),
    "device_plugin_verify": dict(rig="operator",
                                 args={"node_name": "h200", "profile": {"name": "default"}, "gpus": H200_FACTS,
                                       "timeout": 3, "interval": 0.05},
                                 hints=dict(OPERATOR_HINTS, **{"profile.resources": _RESOURCES,
                                                               "gpus": _facts(H200_FACTS, strict=True)}),
                                 # the node does not advertise what the profile promises (within timeout)
                                 outcomes=("rollout verification failed after",),
                                 files=KUBE_FILES),
    # renew is never drawn: a renewer is a detached process that outlives the example (it follows the pytest
    # worker); the harness's own run takes the lease without one. Waits are bounded by the module (one day) and
    # drawn small here, or as values it must refuse.
    "cluster_lease": dict(rig="kube", args={"namespace": "gpuops", "renew": False, "wait_timeout": 2,
                                            "arrival_timeout": 2, "lease_duration": 15, "run_id": "fuzz-run"},
                          fixed={"renew": False},
                          hints=dict(KUBE_HINTS, **{"namespace": OPERATOR_HINTS["namespace"],
                                                    "name": OPERATOR_HINTS["namespace"],
                                                    "wait_timeout": TIMEOUTS, "arrival_timeout": TIMEOUTS,
                                                    "lease_duration": TIMEOUTS,
                                                    "run_slices": st.one_of(st.integers(-1, 3),
                                                                            st.sampled_from(HUGE_INTS), _ANY),
                                                    "owner_pid": st.one_of(st.integers(-2, 2),
                                                                           st.sampled_from(HUGE_INTS), _ANY)}),
                          files=KUBE_FILES),
    "cluster_profiles": dict(rig="kube", args={"namespace": "gpuops", "nodes": {"gpu-node-1": "mps-4"},
                                               "profiles": OPERATOR_PROFILES},
                             hints=dict(KUBE_HINTS, **{"namespace": OPERATOR_HINTS["namespace"],
                                                       "name": OPERATOR_HINTS["namespace"],
                                                       "profiles[].resources": _RESOURCES}),
                             files=KUBE_FILES),
    # Reads only: the sandbox's files (and the pool's FIFO, device, huge file...) as files[].path, the unit as
    # compute_mode.boot_unit.path; units[] asks systemctl, which the rig's PATH does not have (reported as work).
    "gpu_node_plan": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"},
                          args={"mig": {"manage": "disable", "config_name": "all-disabled"},
                                "compute_mode": {"settings": [{"gpus": ["all"], "mode": "Default"}],
                                                 "boot_unit": {"path": SANDBOX + "/gpuops-compute-mode.service"}},
                                "files": [{"step": "compute_mode", "path": SANDBOX + "/absent", "state": "absent"}],
                                "health": {"policy": {"row_remap_pending": "warn"}}},
                          hints={"mig.layout": LAYOUT, "mig.config_name": CONFIG_NAME, "health.policy": HEALTH_POLICY,
                                 "health.dcgmi": DCGMI,
                                 "files[].path": paths(), "compute_mode.boot_unit.path": paths(),
                                 "lock_timeout": TIMEOUTS},
                          files=MIGPARTED),
    # Reads the machine's own dpkg database (read-only) for packages it does not have. The repository is never drawn:
    # its check runs the machine's apt-get against the URL the definition names (a network fetch, outside the
    # sandbox's name-lookup guard, which covers this Python process only); tests/integration/
    # test_container_toolkit_role.py runs it against local repositories instead. package_files are read with
    # dpkg-deb (read-only).
    "package_plan": dict(rig="sim", rig_kwargs={"shape": "hgx-h200"},
                         args={"manager": "apt", "packages": ["gpuops-fuzz-absent-package"], "version": "1.20.0-1"},
                         fixed={"repository": None},
                         hints={"package_files": st.lists(paths(), max_size=3)}),
    # On the rig's node root (the driver 570 loaded, 580's module files installed, nvidia-persistenced running as a
    # unit that holds the device files): the reload stops it, unloads, loads 580 and starts it again. The kmod
    # stand-ins act on the rig's root only (GPUOPS_SIMULATED_ROOT); the tool options are never unset (_tool_argv).
    # A root other than the rig's reads another "node" than the one the tools act on (as root=/wrong would on a node):
    # a load there reports the version it reads after the load, an outcome, not an input error.
    "driver_modules": dict(rig="driver", args={"state": "reloaded", "version": rigs.DRIVER_NEW, "flavour": "open",
                                               "daemon_timeout": 2, "lock_timeout": 5},
                           hints={"version": _DRIVER_VERSIONS, "modprobe": _tool_argv("modprobe"),
                                  "rmmod": _tool_argv("rmmod"), "modinfo": _tool_argv("modinfo"),
                                  "systemctl": _tool_argv("systemctl"), "daemon_timeout": TIMEOUTS,
                                  "lock_timeout": TIMEOUTS,
                                  "record_path": st.one_of(paths(sorted(DRIVER_RECORDS)),
                                                           st.just("/".join([SANDBOX, "root", "var/lib/gpuops/driver-modules.json"]))),
                                  "mps_unit": strings(["gpuops-mps-control.service", "nvidia-persistenced.service",
                                                       "a b.service", "../x.service", "-x"])},
                           outcomes=("after the load the nvidia module is",),
                           files=DRIVER_RECORDS),
    # On the rig's node root (driver 570 loaded, 580's module files installed): the modprobe.d file under the rig's root,
    # names checked with the modinfo stand-in (never unset: the host's modinfo would read this machine's modules).
    "driver_params": dict(rig="driver", rig_kwargs={"module": "driver_params"},
                          args={"parameters": {"NVreg_EnableStreamMemOPs": 1}},
                          hints={"parameters": st.one_of(st.dictionaries(st.sampled_from(fuzz_values.NVREG_NAMES),
                                                                         st.sampled_from(fuzz_values.NVREG_VALUES),
                                                                         max_size=3), _ANY),
                                 "modinfo": _tool_argv("modinfo"),
                                 "missing_module": strings(["fail", "skip", "Skip"])}),
    # On the rig's node root (driver 570 loaded, nvidia-persistenced running as a unit, not enabled): enables it. The
    # Fabric Manager is not drawn: the rig's node has no NVSwitch and no FM unit, so "true" fails at systemctl (the
    # node's answer, tested in tests/unit/plugins/modules/test_driver_services.py), and the wait would read NVML.
    "driver_services": dict(rig="driver", rig_kwargs={"module": "driver_services"},
                            args={"fabric_manager": "false", "fabric_timeout": 0, "lock_timeout": 5},
                            fixed={"fabric_manager": "true would start a unit the rig's node does not have"},
                            hints={"systemctl": _tool_argv("systemctl"), "modprobe": _tool_argv("modprobe"),
                                   "fabric_timeout": TIMEOUTS, "lock_timeout": TIMEOUTS,
                                   "fabric_interval": st.one_of(st.sampled_from([0, 0.05, 0.1, 60, 61, -1]),
                                                                st.sampled_from(ODD_FLOATS))}),
    # Reads the rig's node root (its devices and driver state, unless devices and state are drawn) and the rig's
    # throwaway apt root (APT_CONFIG, DPKG_ROOT: an empty package database), never this machine's. The repository
    # is never drawn (its probe runs apt-get update against the URL its sources name: a network fetch, see
    # package_plan), nor package_source distribution (_DRIVER_DECLARATION). package_files are read with dpkg-deb.
    # On the rig's throwaway apt/dpkg root (APT_CONFIG, DPKG_ROOT) with package files shaped like DCGM 4's, never this
    # machine's package database; systemctl is the rig's stand-in (never unset: the module would look it up in /usr/bin).
    # A fuzzed unit name that no package holds fails at systemctl after the install, an outcome, not an input error.
    "dcgm_host_engine": dict(rig="dcgm", args={},
                             hints={"systemctl": _tool_argv("systemctl"),
                                    "version": st.one_of(st.sampled_from(["1:4.5.2-1", "1:4.4.2-1", "4.5.2-1", "latest",
                                                                          "", "1:", "9" * 5000]), strings()),
                                    "service": st.one_of(st.sampled_from(["nvidia-dcgm.service", "other.service",
                                                                          "nvidia-dcgm", "a b.service", ""]),
                                                         strings()),
                                    # (never empty: see test_fuzz_inputs.PINNED)
                                    "package_files": st.lists(paths(), min_size=1, max_size=3)},
                             outcomes=("check the host engine's log: journalctl -u",)),
    "driver_plan": dict(rig="driver", rig_kwargs={"module": "driver_plan"},
                        args={"manager": "apt", "declaration": {"version": rigs.DRIVER_NEW}},
                        fixed={"repository": None},
                        hints={"declaration": _driver_declaration(st.one_of(json_values(), hostile())), "devices": _DRIVER_DEVICES,
                               "state": _DRIVER_STATE, "kernel": strings([rigs.DRIVER_KERNEL, "6.8.0-87-generic\n"]),
                               "distribution_major": strings(["9", "10", "el9"]),
                               "package_files": st.lists(paths(), max_size=3),
                               # the next kernel's readings (never unset: no host tool on a rig's root)
                               "modinfo": _tool_argv("modinfo"), "dkms": _tool_argv("dkms"),
                               "next_kernel": st.one_of(st.sampled_from(["ensure", "refuse", "ignore", "Ensure", ""]),
                                                        _ANY)}),
}


# ---- filters: {filter file: {filter: {parameter: strategy}}}; parameters without one get any value --------------
_REPLICAS = st.one_of(st.integers(-2, 20), st.sampled_from(HUGE_INTS + ODD_FLOATS), _ANY)
_MODE = st.one_of(st.sampled_from(["per_gpu", "pool"]), _ANY)
_PLACEMENT = st.one_of(st.fixed_dictionaries({"start": st.one_of(st.integers(0, 7), _ANY), "size": _ANY}), _ANY)
_INSTANCES = st.one_of(st.lists(st.fixed_dictionaries({}, optional={
    "kind": st.one_of(st.sampled_from(["gpu_instance", "compute_instance"]), _ANY), "profile": _ANY,
    "placement": _PLACEMENT}), max_size=3), _ANY)
_PLAN_GPUS = st.one_of(st.lists(st.fixed_dictionaries({}, optional={
    "index": st.one_of(st.integers(0, 8), _ANY), "name": _ANY, "changed": _ANY, "destroyed": _INSTANCES,
    "created": _INSTANCES, "busy_destroyed": _ANY, "before": st.one_of(st.fixed_dictionaries({"current": _ANY}), _ANY),
    "desired": _ANY, "actions": st.one_of(st.lists(_ANY, max_size=2), _ANY), "reboot_required": _ANY,
    "reason": _ANY}), max_size=3), _ANY)
_NODE_VARS = st.fixed_dictionaries({}, optional={
    "gpu_node_sharing": st.one_of(st.sampled_from(["mig", "mps", "time-slicing", "none"]), _ANY),
    "gpu_node_replicas": _REPLICAS, "gpu_node_mig_strategy": st.one_of(st.sampled_from(["single", "mixed"]), _ANY)})
_HOSTVARS = st.one_of(st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.one_of(_NODE_VARS, _ANY), max_size=3),
                      _ANY)
_NODES = st.one_of(st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), max_size=4), _ANY)

# the rack check's hostvars (the nvl_racks filters): the rack's declaration and what the cluster play read on a node
_FABRIC = st.one_of(st.fixed_dictionaries({}, optional={
    "state": st.one_of(st.sampled_from(["completed", "in_progress"]), _ANY),
    "status": st.one_of(st.sampled_from(["SUCCESS", "ERROR_UNKNOWN"]), _ANY),
    "cluster_uuid": st.one_of(st.sampled_from(["0b5c6a1e-52d4-4c37-9f0e-5a1d7c3e2b90", None]), _ANY),
    "clique_id": st.one_of(st.sampled_from([32766, 7, "7", -1]), _ANY)}), st.just("not supported"), _ANY)
_RACK_VARS = st.fixed_dictionaries({}, optional={
    "gpu_node_nvl_rack": st.one_of(st.sampled_from(["rack-a", "rack-b", ""]), _ANY),
    "gpu_node_nvl_rack_gpus": st.one_of(st.sampled_from([8, 72, "72", 0, True]), _ANY),
    "__gpuops_rack_gpus": st.one_of(st.fixed_dictionaries({}, optional={
        "gpus": st.one_of(st.lists(st.fixed_dictionaries({"index": st.integers(0, 3)}, optional={"fabric": _FABRIC}),
                                   max_size=4), _ANY),
        "driver_version": st.one_of(st.sampled_from(["580.95.05", "570.148.08", ""]), _ANY)}), _ANY),
    "__gpuops_rack_imex": st.one_of(st.fixed_dictionaries({}, optional={"commands": _ANY, "units": _ANY}), _ANY),
    "__gpu_node_plan": _ANY})
_RACK_HOSTVARS = st.one_of(st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4"]), st.one_of(_RACK_VARS, _ANY),
                                           max_size=4), _ANY)

_OPERATOR_VARS = st.fixed_dictionaries({}, optional={
    "gpu_node_manage_containerd": st.one_of(st.booleans(), _ANY), "containerd_runtime_config_path": _ANY,
    "containerd_runtime_drop_in_path": _ANY, "gpu_node_kube_node_name": st.one_of(st.just("gpu-1"), _ANY),
    "gpu_node_containerd_owner": st.one_of(st.sampled_from(["auto", "collection", "gpu_operator"]), _ANY),
    "gpu_node_mig_owner": st.one_of(st.sampled_from(["collection", "gpu_operator"]), _ANY)})
_OPERATOR_HOSTVARS = st.one_of(st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.one_of(_OPERATOR_VARS, _ANY),
                                               max_size=3), _ANY)
_PLAN = st.one_of(st.fixed_dictionaries({"nodes": st.one_of(st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4"]), st.one_of(st.sampled_from(["default", "mps-4"]), _ANY), max_size=4),
    _ANY)}), _ANY)

# gpuops_dra_claim_templates (the dra_templates filter's explicit, node_declaration_errors' dra_claim_templates)
_EXPLICIT_TEMPLATES = st.one_of(st.lists(st.fixed_dictionaries({"name": st.one_of(st.just("train"), _ANY)}, optional={
    "sharing": st.one_of(st.sampled_from(["mps", "time-slicing", "none"]), _ANY),
    "active_thread_percentage": _ANY, "pinned_memory_limit": st.one_of(_QUANTITIES, _ANY),
    "per_device_pinned_memory_limit": st.one_of(_PER_DEVICE_QUANTITIES, _ANY), "interval": _ANY, "product": _ANY,
    "device_class": _ANY, "mig_profile": _ANY, "count": _ANY}), max_size=2), _ANY)
_DECLARED = (
    ("sharing", ["mig", "mps", "time-slicing", "none"]), ("replicas", [2, "4", None]), ("mig_layout", [[]]),
    ("mig_config_name", ["all-balanced", "", None]), ("mig_strategy", ["single", "mixed"]),
    ("compute_mode", ["Default", "Prohibited"]), ("mig_owner", ["", "gpu_operator"]), ("provider", ["chart", "dra"]),
    ("provider_var", ["gpuops_device_plugin_provider"]), ("containerd_owner", ["auto"]),
    ("operator_poll_interval", [5.0, "0.05", 3600]))
_DECLARATION = st.one_of(st.fixed_dictionaries({}, optional=dict(
    [(k, st.one_of(st.sampled_from(good), _ANY)) for k, good in _DECLARED]
    + [("dra_claim_templates", _EXPLICIT_TEMPLATES)])), _ANY)
_ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")

_UNIT_GPU = st.fixed_dictionaries({
    "index": st.one_of(st.integers(-1, 9), _ANY),
    "uuid": st.one_of(st.sampled_from(["GPU-0a1b2c3d-0000-1111-2222-333344445555", "GPU-1\nExecStart=/bin/sh -c id"]),
                      _ANY),
    "nvidia_smi_mode": st.one_of(st.sampled_from(["DEFAULT", "PROHIBITED", "EXCLUSIVE_PROCESS", None]), _ANY)})
_UNIT_GPUS = st.one_of(st.lists(_UNIT_GPU, max_size=3), _ANY)
FILTERS = {
    "compute_mode_unit": {"compute_mode_unit": {
        "gpus": _UNIT_GPUS, "persistence": st.one_of(st.booleans(), _ANY),
        "nvidia_smi": st.one_of(st.sampled_from(["/usr/bin/nvidia-smi", "nvidia-smi", "/usr/bin/nvidia smi",
                                                 "/x\nExecStart=/bin/true"]), _ANY)}},
    "sharing": {"mps_shares": {"gpus": _facts(), "replicas": _REPLICAS, "mode": _MODE},
                "mps_daemon_defaults": {"gpus": _facts(), "replicas": _REPLICAS, "mode": _MODE},
                "mps_limits": {"limits": st.one_of(st.fixed_dictionaries({}, optional={
                    "active_thread_percentage": _ANY,
                    "pinned_device_mem_limit": st.one_of(
                        st.sampled_from(["0=8G", "0=8G,1=4096M", "0=" + "9" * 5000 + "G"]), _ANY)}), _ANY),
                    "gpus": _facts(), "replicas": _REPLICAS, "mode": _MODE, "warn": st.just(False)}},
    "gpu_summary": {"gpu_summary": {"facts": _facts()}},
    "dra": {"dra_templates": {"profiles": st.one_of(st.just(OPERATOR_PROFILES), _ANY),
                              "explicit": _EXPLICIT_TEMPLATES,
                              "interval": st.one_of(st.sampled_from(["Default", "Long"]), _ANY)},
            "dra_node_templates": {"gpus": _facts(), "profile": st.one_of(st.sampled_from(OPERATOR_PROFILES), _ANY),
                                   "node_name": st.one_of(st.just("n1"), _ANY), "per_gpu": _ANY,
                                   "interval": st.one_of(st.just("Default"), _ANY)},
            "dra_profile_names": {"profiles": st.one_of(st.just(OPERATOR_PROFILES), _ANY)}},
    "mig_plan_summary": {"mig_plan_summary": {"layout_gpus": _PLAN_GPUS, "mode_gpus": _PLAN_GPUS}},
    "node_steps": {"node_step_gates": {
        "plan": st.one_of(st.fixed_dictionaries({"steps": st.one_of(st.dictionaries(
            st.sampled_from(["mig", "compute_mode", "cdi", "driver"]),
            st.one_of(st.lists(st.text(max_size=5), max_size=2), _ANY), max_size=3), _ANY)}, optional={
                "mig": st.one_of(st.fixed_dictionaries({}, optional={"managed": _ANY, "disruptive": _ANY}), _ANY)}),
            _ANY),
        "managed": st.one_of(st.dictionaries(
            st.sampled_from(["mig", "compute_mode", "container_toolkit", "containerd_runtime", "cdi", "runtime_mode",
                             "dev_char", "driver"]), st.one_of(st.booleans(), _ANY), max_size=8), _ANY)},
        # the node plan's inputs: each step with options (all of them, and no other) -> its options or none
        "node_plan_args": {
            "inputs": st.one_of(st.fixed_dictionaries(dict((step, st.one_of(st.none(), good, _ANY)) for step, good in (
                ("driver", st.just({"manage": False})), ("mig", st.just({"manage": "disable"})),
                ("compute_mode", st.just({"settings": []})),
                ("declared", st.fixed_dictionaries({}, optional={"files": st.just([]), "packages": st.just([]),
                                                                 "units": st.just([]), "other": _ANY})),
                ("containerd_runtime", st.just({"containerd": {}})), ("runtime_mode", st.just({"mode": "cdi"})),
                ("cdi", st.just({})), ("dev_char", st.just({"dev_char_path": "/dev/char"})),
                ("health", st.just({"policy": {}}))))), _ANY),
            "only": st.one_of(st.lists(st.one_of(st.sampled_from(["driver", "mig", "declared", "cdi", "nope"]), _ANY),
                                       max_size=3), _ANY)}},
    "declared": {
        "declared_files": {"entries": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
            "path": st.one_of(st.sampled_from(["/etc/x", "relative", "/etc/\nx"]), _ANY),
            "state": st.one_of(st.sampled_from(["file", "directory", "absent", "link"]), _ANY),
            "mode": st.one_of(st.sampled_from(["0644", "644", "u+x", 420]), _ANY),
            "content": st.one_of(st.sampled_from(["a", "missing"]), _ANY),
            "src": st.one_of(paths(), _ANY), "sources": st.one_of(st.lists(paths(), max_size=2), _ANY)}),
            max_size=3), _ANY),
            "contents": st.one_of(st.fixed_dictionaries({"a": st.one_of(st.text(max_size=20), _ANY)}), _ANY)},
        "node_plan_checks": {"declarations": st.one_of(st.lists(st.one_of(st.tuples(
            st.one_of(st.sampled_from(["mig", "compute_mode"]), _ANY),
            st.one_of(st.fixed_dictionaries({}, optional={"files": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
                "path": st.one_of(st.just("/etc/x"), _ANY), "state": st.one_of(st.just("file"), _ANY)}), max_size=2),
                _ANY), "units": st.one_of(st.lists(st.fixed_dictionaries({}, optional={"name": _ANY}), max_size=2),
                                          _ANY),
                "packages": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
                    "manager": st.one_of(st.sampled_from(["apt", "dnf"]), _ANY), "names": _ANY,
                    "version": _ANY, "hold": _ANY}), max_size=2), _ANY)}), st.none(), _ANY)), _ANY), max_size=3),
                _ANY)}},
    "device_plugin_profiles": {"device_plugin_profiles": {"hostvars": _HOSTVARS, "nodes": _NODES}},
    "device_plugin_skip_xids": {"device_plugin_skip_xids": {
        "hostvars": st.one_of(st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.one_of(st.fixed_dictionaries(
            {}, optional={"gpu_node_health_policy": st.one_of(st.dictionaries(
                st.sampled_from(["xid_fatal", "xid_gpu", "xid_application", "ecc_corrected", "xid"]),
                st.one_of(st.sampled_from(["block", "warn", "ignore"]), _ANY), max_size=3), _ANY)}), _ANY),
            max_size=3), _ANY),
        "nodes": _NODES,
        "setting": st.one_of(st.sampled_from(["auto", "all"]), st.lists(st.one_of(st.integers(-2, 100001), _ANY),
                                                                        max_size=4), _ANY)}},
    "gpu_operator_nodes": {"gpu_operator_nodes": {"hostvars": _OPERATOR_HOSTVARS, "nodes": _NODES, "plan": _PLAN}},
    "nvl_racks": {
        "nvl_rack_checks": {"hostvars": _RACK_HOSTVARS, "hosts": _NODES, "check_mode": st.one_of(st.booleans(), _ANY)},
        "nvl_rack_labels": {"checks": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
            "nodes": st.one_of(_NODES, _ANY), "ready": st.one_of(st.booleans(), _ANY),
            "clique": st.one_of(st.sampled_from(["0b5c6a1e-52d4-4c37-9f0e-5a1d7c3e2b90.32766", None]), _ANY)}),
            max_size=2), _ANY), "nodes": _NODES}},
    "node_declaration": {"node_declaration_errors": {"declared": _DECLARATION, "node": st.one_of(
        st.sampled_from(["n1", "gpu-node-1"]), _ANY)}},
    "driver": {"driver_packages": {
        "declaration": st.one_of(st.just({"version": rigs.DRIVER_NEW}), _driver_declaration(_ANY)),
        "node": st.one_of(st.fixed_dictionaries({}, optional={
            "manager": st.one_of(st.sampled_from(["apt", "dnf", "zypper"]), _ANY),
            "kernel": st.one_of(st.just(rigs.DRIVER_KERNEL), _ANY),
            "distribution_major": st.one_of(st.sampled_from(["9", "10", ""]), _ANY)}), _ANY),
        "hold": st.one_of(st.booleans(), _ANY)},
        "driver_params_conf": {"parameters": st.one_of(st.dictionaries(st.sampled_from(fuzz_values.NVREG_NAMES),
                                                                       st.sampled_from(fuzz_values.NVREG_VALUES),
                                                                       max_size=3), _ANY)}},
    "health_sweep": {
        "health_sweep_settings_errors": {"settings": st.one_of(st.fixed_dictionaries({}, optional={
            "release_after": st.one_of(st.integers(-1, 101), st.sampled_from(["2", "two", ""]), _ANY),
            "breaker_percent": st.one_of(st.floats(allow_nan=True), st.sampled_from(["10", "10%"]), _ANY),
            "breaker_max_nodes": st.one_of(st.integers(-5, 5), _ANY),
            "window_hours": st.one_of(st.floats(-1, 5000), _ANY), "surprise": _ANY}), _ANY)},
        "health_sweep_rows": {
            "nodes": st.one_of(st.lists(st.fixed_dictionaries({
                "name": st.one_of(st.sampled_from(["n1", "gpu-node-1"]), _ANY), "gpus": st.one_of(st.integers(0, 8), _ANY),
                "verdict": st.one_of(st.just({"healthy": True, "blocking": [], "warnings": []}), NODE_HEALTH_VERDICTS),
                "unresponsive": st.one_of(st.just([]), _ANY)}), max_size=2), _ANY),
            "decisions": st.one_of(st.none(), st.lists(st.fixed_dictionaries({
                "node": st.sampled_from(["n1", "gpu-node-1"]),
                "action": st.one_of(st.sampled_from(["quarantine", "keep", "count", "release", "held", "healthy"]),
                                    _ANY),
                "healthy_sweeps": st.one_of(st.integers(0, 3), _ANY),
                "quarantined_since": st.one_of(st.none(), st.just("2026-11-29T07:00:00Z"), _ANY)}), max_size=2), _ANY),
            "unanswered": st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=2), _ANY),
            "now": st.one_of(st.just("2026-11-29T08:00:00Z"), _ANY),
            "release_after": st.one_of(st.integers(1, 3), _ANY)},
        "health_sweep_lines": {"report": st.one_of(st.fixed_dictionaries({
            "nodes": st.one_of(st.lists(st.fixed_dictionaries({
                "node": st.text(max_size=5), "state": st.sampled_from(["healthy", "quarantined"]),
                "actions": st.one_of(st.lists(st.text(max_size=5), max_size=2), _ANY),
                "findings": st.one_of(st.just([]), _ANY)}), max_size=2), _ANY),
            "totals": st.one_of(st.dictionaries(st.sampled_from(["nodes", "healthy"]), st.integers(0, 9)), _ANY)}),
            _ANY)}},
    "role_options": {"role_options": {
        "roles": st.one_of(st.lists(st.sampled_from(["gpu_node", "mig", "compute_mode", "containerd_runtime", "cluster",
                                                     "mps_control", "nope", "../roles/mig", "Mig", ""]), max_size=4),
                           _ANY),
        "roles_dir": st.one_of(st.sampled_from([_ROLES_DIR, "/nonexistent", "/dev", "/proc/self", "", "roles\x00"]),
                               _ANY)}},
}

# ---- roles: how their variables are validated -------------------------------------------------------------------
# "site": site.yml's first play (roles/gpu_node/tasks/validate.yml) checks them for every node before anything
# changes; any value is tried, and a host must either pass or fail naming the variable.
# "role": the role checks its argument spec when it starts (it is not part of site.yml); only values its spec
# refuses are tried (a valid one would let the role run its tasks on this machine), and every host must fail.
ROLES = {"gpu_node": "site", "mig": "site", "compute_mode": "site", "containerd_runtime": "site", "cluster": "site",
         "container_toolkit": "site", "driver": "site",
         "mps_control": "role", "health_sweep": "role"}
