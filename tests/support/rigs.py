"""Environments ("rigs") to run a module in-process against, and the check that a run changed nothing.

Shared by the bad-input corpus (tests/reliability/test_bad_input_corpus.py) and the input fuzzer
(tests/reliability/test_fuzz_inputs.py). Each rig lives in a directory of its own and gives:

- ``env``: environment variables for the module run (a value of None: the variable must be unset);
- ``args``: module arguments that point the module at the rig (merged under the case's own arguments);
- ``internal``: ``_ansible_*`` arguments (the module's private temporary directory, outside what is compared);
- ``state()``: everything "nothing changed" covers, and ``changes(before)``: what differs from ``before``
  (an empty list: nothing changed).

"Nothing changed" covers: every file under the rig's directory (content, mtime, mode; the simulator's state file
holds call_log, so not even a mutating call that failed may be there), the fake API server's objects and its
non-dry-run writes that it accepted, the helm release store and its mutating commands. Lock files (``*.lock``) are
not compared: taking a lock is not a change of configuration.
"""
import atexit
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support import ctk_env
from tests.support.ansible_run import ROOT

HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
DRA_CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
EXPORTER_CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "dcgm-exporter")
FAKE_HELM = os.path.join(ROOT, "tests", "support", "fake_helm.py")
FAKE_BIN = os.path.join(ROOT, "tests", "support", "bin")
HELM_MUTATING = {"upgrade", "rollback", "uninstall", "install"}
PRIVATE = ".rig-private"        # the module's own temporary directory: not compared
KUBE_TOKEN = "gpuops-test-token"
BIG = 1 << 20                   # files larger than this are compared by size, mtime and inode, not read


def file_id(full):
    """What identifies a file's content and metadata without reading more than BIG bytes of it."""
    st = os.lstat(full)
    data = None
    if stat.S_ISREG(st.st_mode):
        if st.st_size <= BIG:
            with open(full, "rb") as handle:
                data = hashlib.sha256(handle.read()).hexdigest()
        else:
            data = ("size", st.st_size, "inode", st.st_ino)
    elif stat.S_ISLNK(st.st_mode):
        data = ("link", os.readlink(full))
    return (data, st.st_mtime_ns, st.st_mode)


def snapshot(directory, exclude=()):
    """{relative path: file_id} of everything under ``directory`` (FIFOs, sockets and devices are never opened)."""
    out = {}
    for dirpath, dirs, files in os.walk(str(directory)):
        rel_dir = os.path.relpath(dirpath, str(directory))
        if rel_dir.split(os.sep, maxsplit=1)[0] in (PRIVATE,) + tuple(exclude):
            continue
        for name in dirs + files:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if name.endswith(".lock") or rel in exclude or rel.split(os.sep)[0] == PRIVATE:
                continue
            out[rel] = file_id(os.path.join(dirpath, name))
    return out


def diff_snapshots(before, after):
    out = []
    for path in sorted(set(before) | set(after)):
        if path not in after:
            out.append("%s was removed" % path)
        elif path not in before:
            out.append("%s was created" % path)
        elif before[path] != after[path]:
            out.append("%s was modified" % path)
    return out


def tool_wrapper(path, argv):
    """An executable script at ``path`` that runs ``argv`` plus its own arguments. It lifts the soft address-space
    limit the fuzzer puts on a module run (tests/support/bounded.py): the limit is for the module's Python, and
    Go programs (helm, containerd) reserve more address space than they use."""
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\nulimit -S -v unlimited 2>/dev/null\nexec %s \"$@\"\n"
                     % " ".join("'%s'" % a for a in argv))
    os.chmod(path, 0o755)
    return path


def process_folder(prefix):
    """A new temporary folder that lives as long as this process (removed when it exits; a forked child that ends with
    os._exit leaves it to its parent): for what a rig kind's ``prepare`` builds once."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def copy_relocated(source, directory, name):
    """Copy ``source``/``name`` (a file or a tree, with metadata) to ``directory``/``name``; a symbolic link that
    points into ``source`` then points to the same place in ``directory``."""
    src, dst = os.path.join(source, name), os.path.join(directory, name)
    if not os.path.isdir(src):
        shutil.copy2(src, dst)
        return
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    prefix = source.rstrip(os.sep) + os.sep
    for dirpath, dirs, files in os.walk(dst):
        for entry in dirs + files:
            full = os.path.join(dirpath, entry)
            if os.path.islink(full) and os.readlink(full).startswith(prefix):
                target = os.path.join(directory, os.readlink(full)[len(prefix):])
                os.unlink(full)
                os.symlink(target, full)


def apply_env(env, setenv, delenv):
    """Apply a rig's ``env`` through setenv(key, value) / delenv(key) (monkeypatch's, or os.environ's)."""
    for key, value in env.items():
        if value is None:
            delenv(key)
        else:
            setenv(key, value)


def os_environ_apply(env):
    apply_env(env, os.environ.__setitem__, lambda key: os.environ.pop(key, None))


class Rig(object):
    """Base: a directory, compared file by file."""

    kind = None
    exclude = ()

    @classmethod
    def prepare(cls, **kwargs):
        """What every rig of this kind (and of these arguments) needs and no rig changes (helpers imported, files
        read or built once), done once in this process: the fuzzer calls it before forking, so that its children
        share it instead of each doing it again. A rig works without it (it then does the same on its own)."""

    def __init__(self, directory):
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)
        private = os.path.join(self.dir, PRIVATE)
        os.makedirs(private, exist_ok=True)
        # HOME: "~" in any argument is the rig; ANSIBLE_LOCAL_TEMP: ansible's own temporary files stay private
        # (the stand-ins' Python, GPUOPS_TEST_PYTHON, is the test session's: tests/conftest.py)
        self.env = {"HOME": self.dir, "ANSIBLE_LOCAL_TEMP": private}
        self.args = {}
        self.internal = {"_ansible_tmpdir": private, "_ansible_keep_remote_files": False}

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def state(self):
        return {"files": snapshot(self.dir, self.exclude)}

    def changes(self, before):
        return diff_snapshots(before["files"], self.state()["files"])

    def close(self):
        pass


class SimRig(Rig):
    """A simulated GPU node: its state file (``shape``), MIG enabled on ``enable``, optionally a busy 3g instance
    (``setup='busy_3g'``); or a corrupt state file (``state_text``), or a directory where the file should be."""

    kind = "sim"

    def __init__(self, directory, shape="hgx-h200", enable=(), setup=None, state_text=None, state_dir=False):
        super(SimRig, self).__init__(directory)
        state = self.path("state.json")
        self.env.update({"GPUOPS_SIMULATED_GPUS": state, "GPUOPS_SIMULATED_MACHINE": None, "GPUOPS_NODE_LOCK": None})
        if state_text is not None:
            with open(state, "w") as handle:
                handle.write(state_text)
            return
        if state_dir:
            os.mkdir(state)
            return
        try:
            sim = SimulatedBackend(state, shape=shape)
        except Exception:           # an unknown shape: the module must say so
            self.env["GPUOPS_SIMULATED_MACHINE"] = shape
            return
        for index in enable:
            sim.set_mig_mode(index, True)
            if sim.read_gpu(index)["mig_mode_current"] != "Enabled":
                sim.reset_gpu(index)
        if setup == "busy_3g":
            gi = sim.create_gpu_instance(0, 9, 0)
            ci = sim.create_compute_instance(0, gi, 2)
            sim.add_process(0, 4242, "train", gi_id=gi, ci_id=ci)
        sim.clear_call_log()


class SystemctlRig(Rig):
    """A rig whose module drives the systemctl stand-in (its calls in systemd.json): the mutating calls are part of
    its state, so a systemctl run is a change like a file written."""

    def state(self):
        out = super(SystemctlRig, self).state()
        calls = []
        if os.path.exists(self.path("systemd.json")):
            with open(self.path("systemd.json")) as handle:
                calls = json.load(handle)["calls"]
        out["systemctl"] = [c for c in calls if c[0] not in ("is-active", "is-enabled")]   # read-only queries
        return out

    def changes(self, before):
        now = self.state()
        out = diff_snapshots(before["files"], now["files"])
        if now["systemctl"] != before["systemctl"]:
            out.append("systemctl ran %s" % now["systemctl"][len(before["systemctl"]):])
        return out


class MpsRig(SystemctlRig):
    """mps_control with the nvidia-cuda-mps-control and systemctl stand-ins (tests/support/bin)."""

    kind = "mps"
    exclude = ("systemd.json",)

    def __init__(self, directory):
        super(MpsRig, self).__init__(directory)
        units = self.path("units")
        os.makedirs(units, exist_ok=True)
        self.env.update({"PATH": FAKE_BIN + os.pathsep + os.environ["PATH"],
                         "FAKE_SYSTEMD_STATE": self.path("systemd.json"), "FAKE_SYSTEMD_UNIT_DIR": units,
                         "GPUOPS_NODE_LOCK": self.path("node.lock")})
        self.args = dict(service_manager="none", pipe_directory=self.path("pipe"), log_directory=self.path("log"),
                         unit_directory=units, timeout=5)


class HostImexRig(SystemctlRig):
    """host_imex with the systemctl stand-in (its state in systemd.json): NVIDIA's nvidia-imex.service installed,
    enabled and running; the record under the rig."""

    kind = "imex"
    exclude = ("systemd.json",)

    def __init__(self, directory):
        super(HostImexRig, self).__init__(directory)
        units = self.path("units")
        os.makedirs(units, exist_ok=True)
        text = "[Service]\nExecStart=/bin/true\n"
        with open(os.path.join(units, "nvidia-imex.service"), "w") as handle:
            handle.write(text)
        with open(self.path("systemd.json"), "w") as handle:
            json.dump({"units": {"nvidia-imex.service": {"active": True, "enabled": True, "loaded": text}},
                       "calls": []}, handle)
        self.env.update({"PATH": FAKE_BIN + os.pathsep + os.environ["PATH"],
                         "FAKE_SYSTEMD_STATE": self.path("systemd.json"), "FAKE_SYSTEMD_UNIT_DIR": units})
        self.args = dict(state="masked", record=self.path("host-imex.json"),
                         systemctl=[os.path.join(FAKE_BIN, "systemctl")])


class ContainerdRig(Rig):
    """containerd_runtime with the real containerd (config dump) and the nvidia-ctk stand-in; ``config_text``:
    the config file's text ('golden': the fixture), None: no config file."""

    kind = "containerd"

    def __init__(self, directory, config_text="golden", ctk_version="1.20.0"):
        super(ContainerdRig, self).__init__(directory)
        etc = self.path("etc", "containerd")
        os.makedirs(etc, exist_ok=True)
        self.etc = etc
        config = os.path.join(etc, "config.toml")
        if config_text is not None:
            with open(config, "w") as handle:
                handle.write(ctk_env.fixture_text("golden-input-v2.toml") if config_text == "golden" else config_text)
        ctk = ctk_env.ctk_wrapper(self.path(PRIVATE, "bin"), ctk_version)
        containerd = tool_wrapper(self.path(PRIVATE, "bin", "containerd"), [ctk_env.require_containerd()])
        self.args = dict(config_path=config, drop_in_path=os.path.join(etc, "conf.d", "99-nvidia.toml"),
                         nvidia_ctk_path=ctk, containerd_path=containerd)


class CdiRig(SimRig):
    """cdi_spec, runtime_mode and dev_char_symlinks: a simulated node (SimRig) with its CDI spec directories,
    nvidia-container-runtime's config and (dev_char_symlinks) a node root with /dev under the rig, and the nvidia-ctk
    stand-in (its cdi generate/list, config --set and system create-dev-char-symlinks); ``module`` picks the arguments
    that point the module there."""

    kind = "cdi"

    @classmethod
    def prepare(cls, **kwargs):
        from tests.support import dev_char_tree  # noqa: F401

    def __init__(self, directory, module="cdi_spec", **kwargs):
        super(CdiRig, self).__init__(directory, **kwargs)
        etc, run = self.path("etc", "cdi"), self.path("run", "cdi")
        for folder in (etc, run):
            os.makedirs(folder, exist_ok=True)
        ctk = ctk_env.ctk_wrapper(self.path(PRIVATE, "bin"))
        if module == "cdi_spec":
            self.args = dict(spec_path=os.path.join(run, "nvidia.yaml"), spec_dirs=[etc, run], nvidia_ctk_path=ctk)
        elif module == "dev_char_symlinks":
            # the node's root for nvidia-ctk's create-dev-char-symlinks (tests/support/dev_char_tree.py: two GPUs)
            from tests.support import dev_char_tree
            root = self.path("node")
            dev_char_tree.build(root)
            self.env["GPUOPS_SIMULATED_ROOT"] = root
            self.args = dict(dev_char_path=os.path.join(root, "dev", "char"), nvidia_ctk_path=ctk,
                             udev_rule_path=os.path.join(root, "lib", "udev", "rules.d", "71-nvidia-dev-char.rules"))
        else:
            self.args = dict(config_path=self.path("etc", "nvidia-container-runtime", "config.toml"),
                             nvidia_ctk_path=ctk)


class KubeRig(Rig):
    """node_labels, node_cordon, runtime_class against a fake API server (started here, stopped by close()) with a
    node gpu-node-1 and a RuntimeClass runc."""

    kind = "kube"

    @classmethod
    def prepare(cls, **kwargs):
        import yaml  # noqa: F401
        from tests.support import fake_kube_api  # noqa: F401
        # What the kube modules import when they run: the kubernetes client, where the light path does not read the
        # kubeconfig (every fuzzed kubeconfig it does not recognise; imported by _kube's own _client_library, so the
        # list stays the modules'), and urllib.request for the proxy settings (_kubeconfig.py); about 0.15 CPU s a
        # child that imports the client itself
        import urllib.request  # noqa: F401
        from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
        _kube._client_library()     # pylint: disable=protected-access

    def __init__(self, directory, server_version=None):
        super(KubeRig, self).__init__(directory)
        import yaml
        from tests.support.fake_kube_api import FakeKubeApi
        for var in list(os.environ):
            if var.startswith("K8S_AUTH_") or var == "KUBECONFIG":
                self.env[var] = None
        kwargs = {"server_version": server_version} if server_version else {}
        self.api = FakeKubeApi(tokens={KUBE_TOKEN: "rw"}, **kwargs).start()
        self.api.add_node("gpu-node-1", hostname="gpu-node-1", internal_ip="10.0.0.11",
                          labels={"gpuops.example.com/old": "x"})
        self.api.put({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "runc"},
                      "handler": "runc"})
        self.kubeconfig = self.path("kubeconfig")
        with open(self.kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(token=KUBE_TOKEN), handle)
        self.args = dict(kubeconfig=self.kubeconfig)

    def state(self):
        out = super(KubeRig, self).state()
        out["objects"] = json.dumps(sorted((list(k), v) for k, v in self.api.objects.items()), sort_keys=True)
        out["writes"] = len(self.api.writes(dry_run=False, accepted=True))     # refused writes changed nothing
        return out

    def changes(self, before):
        now = self.state()
        out = diff_snapshots(before["files"], now["files"])
        if now["writes"] != before["writes"]:
            out.append("the API server saw writes: %s" % [
                "%s %s" % (w["method"], w["path"]) for w in self.api.writes(dry_run=False, accepted=True)[
                    before["writes"]:]])
        if now["objects"] != before["objects"]:
            out.append("the API server's objects changed")
        return out

    def close(self):
        self.api.stop()


class OperatorRig(KubeRig):
    """gpu_operator, gpu_operator_mig, device_plugin_verify against the fake API server with NVIDIA's ClusterPolicy
    (served from its CRD schema) and the fake GPU Operator (tests/support/fake_gpu_operator.py) installed: nodes
    ``a100`` (dgx-a100-40gb) and ``h200`` (hgx-h200) with simulated GPUs in the rig. The fake operator acts once
    before the rig is handed out (its MIG manager takes the nodes' first mig.config labels, its device plugin writes
    their allocatable), so a run starts from a settled cluster; with ``loop`` it then keeps acting in a thread, so
    that a module's wait for the MIG manager or for a rollout ends as in a cluster. The ClusterPolicy points the MIG
    manager at ``mig_config_map`` (as gpuops.nvidia.gpu_operator with mig_config_map leaves it), unless None."""

    kind = "operator"
    shapes = {"a100": "dgx-a100-40gb", "h200": "hgx-h200"}

    @classmethod
    def prepare(cls, **kwargs):
        super(OperatorRig, cls).prepare()
        from tests.support import fake_crd, fake_gpu_operator
        fake_gpu_operator.fixtures()
        fake_crd.load("clusterpolicies", fake_crd.DEFAULT_CLUSTERPOLICY_VERSION)

    def __init__(self, directory, loop=False, mig_config_map="gpuops-mig-parted-config"):
        super(OperatorRig, self).__init__(directory)
        from tests.support.fake_gpu_operator import FakeGpuOperator
        for node in sorted(self.shapes):
            self.api.add_node(node)
        self.operator = FakeGpuOperator(self.api, dict((n, (self.path("%s.json" % n), s))
                                                       for n, s in self.shapes.items()),
                                        pending_seconds=0.05, poll=0.05).install()
        if mig_config_map:
            policy = self.api.get("nvidia.com", "clusterpolicies", "cluster-policy")
            policy["spec"]["migManager"]["config"]["name"] = mig_config_map
            self.api.put(policy)
        self.operator.reconcile()
        self.facts = dict((n, self.operator._backend(n).read_all()) for n in self.shapes)   # gpu_info's, per node
        if loop:
            self.operator.start()

    def close(self):
        self.operator.stop()
        super(OperatorRig, self).close()


def helm_store_state(store):
    """What tests/support/fake_helm.py's release store holds: the mutating helm commands run, and the releases."""
    data = {"log": [], "releases": {}}
    if os.path.exists(store):
        with open(store) as handle:
            data = json.load(handle)
    return {"mutating": [e["argv"] for e in data["log"] if e["argv"][0] in HELM_MUTATING],
            "releases": data.get("releases", {})}


def helm_store_changes(before, now):
    out = []
    if now["mutating"] != before["mutating"]:
        out.append("helm ran %s" % now["mutating"][len(before["mutating"]):])
    if now["releases"] != before["releases"]:
        out.append("the helm release store changed")
    return out


class HelmRig(Rig):
    """device_plugin with real helm for show/template (through tests/support/fake_helm.py) and the fake release
    store for list/get/upgrade/rollback/uninstall; the fixture chart, copied into the rig."""

    kind = "helm"
    exclude = ("helm-state.json",)
    profiles = [{"name": "default"}, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4},
                {"name": "mps-4", "sharing": "mps", "replicas": 4}]

    def __init__(self, directory):
        super(HelmRig, self).__init__(directory)
        for var in list(os.environ):
            if var.startswith("K8S_AUTH_"):
                self.env[var] = None
        self.store = self.path("helm-state.json")
        binary = tool_wrapper(self.path(PRIVATE, "helm"), [sys.executable, FAKE_HELM])
        self.env.update({"FAKE_HELM_STATE": self.store, "FAKE_HELM_REAL": HELM})
        chart = self.path("chart")
        shutil.copytree(CHART, chart)
        self.args = dict(binary_path=binary, chart_path=chart, profiles=self.profiles, default_profile="default",
                         kubeconfig="/nonexistent/kubeconfig")

    def state(self):
        out = super(HelmRig, self).state()
        out.update(helm_store_state(self.store))
        return out

    def changes(self, before):
        now = self.state()
        return diff_snapshots(before["files"], now["files"]) + helm_store_changes(before, now)


class DraRig(KubeRig):
    """dra_driver: its read-only pre-checks against a fake API server of Kubernetes 1.34 (resource.k8s.io/v1 served,
    node gpu-node-1 without a device plugin, and the DeviceClasses the chart would create, since helm here is
    tests/support/fake_helm.py: real helm for show/template, the fake release store for the rest) and the stand-in
    of NVIDIA's DRA driver chart, copied into the rig."""

    kind = "dra"
    exclude = ("helm-state.json",)

    def __init__(self, directory):
        super(DraRig, self).__init__(directory, server_version="v1.34.1")
        for name in ("gpu.nvidia.com", "mig.nvidia.com"):
            self.api.put({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                          "spec": {"selectors": []}})
        self.store = self.path("helm-state.json")
        binary = tool_wrapper(self.path(PRIVATE, "helm"), [sys.executable, FAKE_HELM])
        self.env.update({"FAKE_HELM_STATE": self.store, "FAKE_HELM_REAL": HELM})
        chart = self.path("chart")
        shutil.copytree(DRA_CHART, chart)
        self.args = dict(self.args, binary_path=binary, chart_path=chart, nodes=["gpu-node-1"])

    def state(self):
        out = super(DraRig, self).state()
        out.update(helm_store_state(self.store))
        return out

    def changes(self, before):
        return super(DraRig, self).changes(before) + helm_store_changes(before, self.state())


class DraApiRig(KubeRig):
    """dra_claim_templates and dra_node_verify against the fake API server as Kubernetes 1.34 (resource.k8s.io/v1),
    with a workload namespace ``ml`` and node gpu-node-1's ResourceSlice listing one GPU, ``DRA_GPU``."""

    kind = "dra_api"

    def __init__(self, directory):
        super(DraApiRig, self).__init__(directory, server_version="v1.34.1")
        self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        self.api.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                      "metadata": {"name": "gpu-node-1-gpu.nvidia.com-fuzz"},
                      "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
                               "pool": {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1},
                               "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"},
                                                                            "uuid": {"string": DRA_GPU["uuid"]}}}]}})


DRA_GPU = {"index": 0, "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555", "name": "NVIDIA H200",
           "memory_total_bytes": 150754820096, "mig_mode_current": "Disabled", "mig_devices": []}


DRIVER_KERNEL = "6.8.0-87-generic"
DRIVER_OLD, DRIVER_NEW = "570.195.03", "580.95.05"
DRIVER_GPU = "0000:47:00.0"


class DriverRig(SystemctlRig):
    """driver_modules and driver_plan on a node root of their own (``root/`` in the rig, written by
    tests/support/driver_files.py): kernel DRIVER_KERNEL, one H200 (0000:47:00.0), the placeholder module files of
    ``installed`` under lib/modules, the driver ``loaded`` (nvidia, nvidia_uvm, nvidia_modeset) and
    nvidia-persistenced running as a unit of the systemctl stand-in, holding nvidiactl and nvidia0 (so an unload
    stops it and a load starts it again).

    Nothing of this machine is reached: the kmod stand-ins (tests/support/kmod_standin.py) act on the root named by
    GPUOPS_SIMULATED_ROOT only, and PATH holds only the rig's own bin directory, with wrappers of the stand-ins
    (modprobe, rmmod, modinfo, systemctl) for driver_modules, and of the real dpkg-query, apt-cache and dpkg-deb for
    driver_plan, which read a throwaway apt root (tests/support/apt_rig.Root: APT_CONFIG, DPKG_ROOT) instead of this
    machine's package database and apt lists. A command a fuzzed option names by a bare name (``yes``, ``id``) is
    not found there. ``module`` picks the arguments that point the module at the rig."""

    kind = "driver"
    exclude = ("systemd.json",)

    _templates = {}     # (loaded, installed) -> a rig's directory as __init__ left it, before any module ran

    @classmethod
    def prepare(cls, loaded=DRIVER_OLD, installed=DRIVER_NEW, **kwargs):
        """The node a rig of ``loaded``/``installed`` starts from, built once in this process (its files and the
        systemctl stand-in's record of nvidia-persistenced started: two stand-in runs): later rigs of the same
        arguments copy it instead of building it again. Its files name no path of the rig (they are relocatable)."""
        from tests.support import apt_rig, driver_files  # noqa: F401
        if (loaded, installed) not in cls._templates:
            folder = process_folder("gpuops-driver-rig-")
            rig = cls(os.path.join(folder, "rig"), loaded=loaded, installed=installed)
            for dirpath, _dirs, files in os.walk(rig.dir):
                for name in files:
                    full = os.path.join(dirpath, name)
                    if not os.path.islink(full):        # links into the rig are moved by copy_relocated
                        with open(full, "rb") as handle:
                            if rig.dir.encode() in handle.read():
                                raise AssertionError("%s names the rig's own path: a copy would not be the same node"
                                                     % os.path.relpath(full, rig.dir))
            cls._templates[(loaded, installed)] = rig.dir

    def __init__(self, directory, module="driver_modules", loaded=DRIVER_OLD, installed=DRIVER_NEW):
        super(DriverRig, self).__init__(directory)
        from tests.support import driver_files as df
        self.root = self.path("root")
        units = self.path("units")
        os.makedirs(units, exist_ok=True)
        bin_dir = self.path(PRIVATE, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        standin = os.path.join(ROOT, "tests", "support")
        self.tools = {}
        for tool in ("modprobe", "rmmod", "modinfo"):
            self.tools[tool] = tool_wrapper(os.path.join(bin_dir, tool),
                                            [sys.executable, os.path.join(standin, "kmod_standin.py"), tool])
        self.tools["systemctl"] = tool_wrapper(os.path.join(bin_dir, "systemctl"),
                                               [sys.executable, os.path.join(standin, "systemctl_standin.py")])
        for tool in ("dpkg-query", "apt-cache", "dpkg-deb"):
            real = shutil.which(tool)
            if real:
                tool_wrapper(os.path.join(bin_dir, tool), [real])
        self.env.update({df.ENV_ROOT: self.root, "PATH": bin_dir, "FAKE_SYSTEMD_STATE": self.path("systemd.json"),
                         "FAKE_SYSTEMD_UNIT_DIR": units, "GPUOPS_NODE_LOCK": self.path("node.lock"),
                         "GPUOPS_SIMULATED_GPUS": None, "GPUOPS_SIMULATED_MACHINE": None})
        template = DriverRig._templates.get((loaded, installed))
        if template is not None:
            # the same node, as prepare() built it: its root, the unit and the stand-in's systemd record
            for name in ("root", "units", "systemd.json"):
                copy_relocated(template, self.dir, name)
        else:
            self._build_node(units, standin, loaded, installed)
        self._args_for(module)

    def _build_node(self, units, standin, loaded, installed):
        from tests.support import driver_files as df
        df.set_kernel(self.root, DRIVER_KERNEL)
        dev = df.path(self.root, "sys/bus/pci/devices", DRIVER_GPU)
        os.makedirs(dev)
        for key, value in (("vendor", "0x10de"), ("device", "0x2335"), ("class", "0x030200"),
                           ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x18be")):
            df.write(dev, key, value + "\n")
        df.install_module_files(self.root, installed)
        if loaded:
            df.load_driver(self.root, loaded)
        # nvidia-persistenced as the systemctl stand-in runs it: its Exec lines open and close the device files
        helper = [sys.executable, os.path.join(standin, "driver_files.py")]
        unit = "nvidia-persistenced.service"
        with open(os.path.join(units, unit), "w") as handle:
            handle.write("[Service]\nExecStart=%s hold 900 %s /usr/bin/nvidia-persistenced\nExecStop=%s release 900\n"
                         % (" ".join(helper), unit, " ".join(helper)))
        env = dict(os.environ, **dict((k, v) for k, v in self.env.items() if v is not None))
        for command in (["daemon-reload"], ["start", unit]):
            subprocess.run([self.tools["systemctl"]] + command, env=env, check=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)

    def _args_for(self, module):
        from tests.support import driver_files as df
        if module == "driver_modules":
            self.args = dict(root=self.root, **self.tools)
        elif module == "driver_services":
            self.args = dict(root=self.root, systemctl=self.tools["systemctl"], modprobe=self.tools["modprobe"])
        elif module == "driver_params":
            self.args = dict(root=self.root, modinfo=self.tools["modinfo"],
                             path=df.path(self.root, "etc/modprobe.d/gpuops-nvidia-params.conf"))
        else:
            from tests.support.apt_rig import Root
            apt = Root(self.path("apt-root"))
            self.env.update({"APT_CONFIG": apt.apt_config, "DPKG_ROOT": apt.path})
            self.args = dict(root=self.root)


class DcgmRig(SystemctlRig):
    """dcgm_host_engine on a throwaway apt/dpkg root of its own (tests/support/apt_rig.Root: APT_CONFIG, DPKG_ROOT),
    with package files shaped like DCGM 4's (tests/support/dcgm_rig.py, NOT NVIDIA's; built once per process) in
    ``debs/``, installed with Debian's real apt-get and dpkg into that root only, and the systemctl stand-in running
    their unit (its state in systemd.json). PATH holds only the rig's own bin directory: wrappers of the real
    apt-get, dpkg, dpkg-query, dpkg-deb and tar (and ldconfig and start-stop-daemon, which dpkg requires on PATH, and
    rm, with which dpkg removes the folder dpkg-deb unpacked a package's control files into: without it each install
    left a /tmp/dpkg-deb.* behind), of the systemctl stand-in; a command a fuzzed option names by a bare name is not
    found there."""

    kind = "dcgm"
    exclude = ("systemd.json",)
    _debs = {}

    @classmethod
    def prepare(cls, **kwargs):
        from tests.support import apt_rig, dcgm_rig  # noqa: F401
        if not cls._debs:
            cls._debs.update(dcgm_rig.build(process_folder("gpuops-dcgm-debs-"), dcgm_rig.NEW))

    def __init__(self, directory):
        super(DcgmRig, self).__init__(directory)
        from tests.support import apt_rig, dcgm_rig
        apt = apt_rig.Root(self.path("root"))
        bin_dir = self.path(PRIVATE, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        for tool in ("apt-get", "dpkg", "dpkg-query", "dpkg-deb", "tar", "ldconfig", "start-stop-daemon", "rm"):
            real = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")
            if real:
                tool_wrapper(os.path.join(bin_dir, tool), [real])
        self.tools = {"systemctl": tool_wrapper(os.path.join(bin_dir, "systemctl"), [
            sys.executable, os.path.join(ROOT, "tests", "support", "systemctl_standin.py")])}
        DcgmRig.prepare()
        files = dcgm_rig.place(DcgmRig._debs, self.path("debs"))
        self.env.update(dict(apt.env, PATH=bin_dir, GPUOPS_SIMULATED_ROOT=apt.path,
                             FAKE_SYSTEMD_STATE=self.path("systemd.json"),
                             FAKE_SYSTEMD_UNIT_DIR=os.path.join(apt.path, "usr", "lib", "systemd", "system"),
                             GPUOPS_NODE_LOCK=self.path("node.lock"), GPUOPS_SIMULATED_GPUS=None,
                             GPUOPS_SIMULATED_MACHINE=None))
        self.args = dict(version=dcgm_rig.NEW, package_manager="apt", package_files=files,
                         systemctl=[self.tools["systemctl"]])


# The GPUs of gpu-node-1 that ExporterRig's exporter lists (as the simulator's records: index, uuid, bus id, model).
EXPORTER_GPUS = [{"index": i, "uuid": "GPU-0a1b2c3d-0000-1111-2222-33334444555%d" % i,
                  "pci_bus_id": "00000000:%02X:00.0" % (0x18 + i), "model": "H200"} for i in range(2)]


class ExporterRig(KubeRig):
    """dcgm_exporter (``module="release"``: real helm for show/template through tests/support/fake_helm.py, the fake
    release store for the rest, the stand-in of NVIDIA's dcgm-exporter chart copied into the rig) and
    dcgm_exporter_verify (``module="verify"``: a Ready exporter pod on gpu-node-1 that serves, through the fake API
    server's pod proxy, the series of EXPORTER_GPUS in the exporter's format, tests/support/dcgm_exporter_standin.py)."""

    kind = "exporter"
    exclude = ("helm-state.json",)

    @classmethod
    def prepare(cls, **kwargs):
        super(ExporterRig, cls).prepare()
        from tests.support import dcgm_exporter_standin  # noqa: F401

    def __init__(self, directory, module="release"):
        super(ExporterRig, self).__init__(directory)
        from tests.support.dcgm_exporter_standin import metrics_text
        if module == "release":
            self.store = self.path("helm-state.json")
            binary = tool_wrapper(self.path(PRIVATE, "helm"), [sys.executable, FAKE_HELM])
            self.env.update({"FAKE_HELM_STATE": self.store, "FAKE_HELM_REAL": HELM})
            chart = self.path("chart")
            shutil.copytree(EXPORTER_CHART, chart)
            self.args = dict(self.args, binary_path=binary, chart_path=chart)
            return
        self.store = None
        self.api.put({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "dcgm-exporter-fuzz", "namespace": "nvidia-dcgm-exporter",
                                   "labels": {"app.kubernetes.io/name": "dcgm-exporter",
                                              "app.kubernetes.io/instance": "dcgm-exporter"}},
                      "spec": {"nodeName": "gpu-node-1", "hostNetwork": True,
                               "containers": [{"name": "exporter", "ports": [{"containerPort": 9400}]}]},
                      "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        text = metrics_text("gpu-node-1", EXPORTER_GPUS)
        self.api.pod_proxy = lambda pod, port, path: (200, text) if (port, path) == (9400, "/metrics") else None
        self.args = dict(self.args, node_name="gpu-node-1",
                         gpus=[dict(index=g["index"], uuid=g["uuid"]) for g in EXPORTER_GPUS])

    def state(self):
        out = super(ExporterRig, self).state()
        if self.store:
            out.update(helm_store_state(self.store))
        return out

    def changes(self, before):
        out = super(ExporterRig, self).changes(before)
        return out + (helm_store_changes(before, self.state()) if self.store else [])


RIGS = {"sim": SimRig, "mps": MpsRig, "containerd": ContainerdRig, "cdi": CdiRig, "kube": KubeRig, "helm": HelmRig,
        "operator": OperatorRig, "dra": DraRig, "dra_api": DraApiRig, "driver": DriverRig,
        "dcgm": DcgmRig, "exporter": ExporterRig, "imex": HostImexRig}
