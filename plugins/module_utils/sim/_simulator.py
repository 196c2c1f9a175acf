# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulated NVIDIA GPUs, kept in a JSON state file so that they survive between module runs.

The file is named by GPUOPS_SIMULATED_GPUS. When it does not exist and GPUOPS_SIMULATED_MACHINE names a
machine shape (see _gpu_catalog.MACHINE_SHAPES), it is created from that shape. Every operation takes an
exclusive lock on `<file>.lock`, reads the file, changes it in memory and replaces it atomically, so a
failed or killed run never leaves a half-written state.

Rules modelled (sources: the MIG user guide, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/, NVML's
nvml.h as in NVIDIA/go-nvml@2f9e261:gen/nvml/nvml.h, and docs/simulator.md; where a behaviour is not documented,
the code says so):
- GPU-instance profiles, ids, slice counts, max instances, memory, SMs and placements per model
  (_gpu_catalog); compute-instance profiles inside each GI.
- Ampere: a MIG-mode change stays pending until a GPU reset; the reset fails while any process holds the
  GPU; the mode survives a reboot. Hopper and later (Blackwell included, see _gpu_catalog.ARCH_RULES): the change
  applies at once when the GPU is idle (with processes it stays pending and SetMigMode reports IN_USE); the mode
  is lost on reboot.
- GPU and compute instances never survive a reset or reboot; compute mode returns to Default and
  persistence mode to Disabled on reboot.
- Exclusive_Process is refused (NOT_SUPPORTED) on a MIG-enabled GPU.
- Destroying a GI that still has CIs or processes fails IN_USE; destroying a CI with processes fails IN_USE;
  creating on occupied slices (or beyond a profile's max instances) fails INSUFFICIENT_RESOURCES; a placement
  NVML does not list for the profile fails INVALID_ARGUMENT.
- Non-MIG GPUs answer every MIG call NOT_SUPPORTED.
- Below NVML (_simulator_host): when GPUOPS_SIMULATED_ROOT names the node's root, the machine's host tree (PCI
  functions, the loaded driver's files, nouveau, Secure Boot, NVSwitch/NVLink5 marks) is rendered there once, when
  the state file is created (or, for a state created without a root, the first time it is opened with one), and
  NVML starts only as the real one would on that host: no NVML library -> LIBRARY_NOT_FOUND, no nvidia module ->
  DRIVER_NOT_LOADED, library and module versions apart -> LIB_RM_VERSION_MISMATCH (NvmlInitError, raised by the
  first NVML call of a backend). Test hooks (reboot, processes, holders, faults) are not NVML calls and work whatever
  the driver's state.
- Test hooks: processes attached to a GPU or a MIG device, holders (programs with the device files open but no
  CUDA context, as a device plugin pod: NVML lists no process, a reset fails IN_USE with NVML's words only, and
  ``device_holders`` says who holds the files, as the real backend reads /proc), a fault injected into the
  Nth mutating call, a stop after the Nth mutating call (the calling process stops itself with SIGSTOP once that
  call is saved, so that a test can kill it at exactly that point: `stop_after`), a reboot event, and a log of
  every mutating call (state["call_log"]).
- nvidia-persistenced (_simulator_host.start_persistenced, run by the lab's fake package): while it runs with
  persistence mode, every GPU reads persistence mode Enabled; it starts again at a boot where it ran before.
- Health (_simulator_health): each GPU's ECC counts, row remapping, NVLinks, PCIe link, clock event reasons,
  temperature and fabric state, answered NOT_SUPPORTED where NVML does for that generation and machine shape; a lost
  GPU (every call answers GPU_IS_LOST, a reboot brings it back); a GPU missing from NVML (not listed, its PCI function
  still in the host tree; a reboot brings it back); a GPU whose health read hangs (fault ``hang``: the read blocks
  until its process is killed, as NVML does on a GPU whose driver never answers; a reboot ends it); this boot's kernel
  log with Xid lines, each with its monotonic timestamp, and the boot's id (a reboot gives a new one). Test hooks:
  ``inject_health``, ``add_xid``, ``set_kernel_log_readable``, ``rotate_kernel_log``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import json
import os
import signal
import tempfile
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host as host
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import read_record, record_path
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._device_holders import (
    for_device, gpu_file, holder_record)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._pci import bus_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    COMPUTE_MODES,
    NVML_ERROR_CODES,
    GpuBackend,
    IN_USE_TEXT,
    GpuBackendError,
    NvmlError,
    NvmlInitError,
    NvmlInUse,
    NvmlInsufficientResources,
    NvmlInvalidArgument,
    NvmlNotFound,
    NvmlNotSupported,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_health as sim_health
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator_state import (
    apply_reset,
    arch_rules,
    cuda_version_text,
    due_fault,
    due_stop,
    gi_by_id,
    gi_profile_by_id,
    gpu_by_index,
    gpu_facts,
    lowest_free_id,
    mig_uuid,
    new_state,
    processes_on,
    require_mig_capable,
    require_mig_enabled,
    state_problem,
    used_memory_slices,
)

MUTATING_CALLS = (
    "set_mig_mode", "reset_gpu", "create_gpu_instance", "destroy_gpu_instance",
    "create_compute_instance", "destroy_compute_instance", "set_compute_mode", "set_persistence_mode",
)


def _gpus_after_driver_start(state):
    """What the GPUs hold once the driver starts again (a reboot, or the module unloaded and loaded): no MIG
    instances, compute mode Default, persistence mode Disabled; Ampere keeps (and activates) its pending MIG mode,
    Hopper and later lose MIG mode (arch_rules' mig_mode_survives_reboot)."""
    for gpu in state["gpus"]:
        gpu["gpu_instances"] = []
        gpu["compute_mode"] = "Default"
        gpu["persistence_mode"] = False
        if gpu["mig_current"] is None:
            continue
        if arch_rules(gpu)["mig_mode_survives_reboot"]:
            gpu["mig_current"] = gpu["mig_pending"]
        else:
            gpu["mig_current"] = False
            gpu["mig_pending"] = False


class SimulatedBackend(GpuBackend):
    kind = "simulated"
    # (class defaults: the tests' in-memory simulator sets only its state; no root means NVML as before)
    root = None
    host_options = None
    _nvml_started = False
    _loaded_version = None

    def __init__(self, state_path, shape=None, root=None, host_options=None, rack=None):
        if not state_path:
            raise GpuBackendError("GPUOPS_SIMULATED_GPUS is empty: set it to the path of a state file")
        self.path = os.path.abspath(state_path)
        self.shape = shape
        # The node's root below NVML (GPUOPS_SIMULATED_ROOT) and the host options used when the state is created
        # (GPUOPS_SIMULATED_HOST); see _simulator_host.
        self.root = os.path.abspath(root) if root else None
        self.host_options = host_options
        # The rack a new tray of an NVL shape belongs to (GPUOPS_SIMULATED_RACK; _simulator_health.rack_fabric).
        self.rack = rack
        self._nvml_started = False
        self._loaded_version = None
        if not os.path.exists(self.path):
            if not shape:
                raise GpuBackendError(
                    "simulated GPU state file %s does not exist and GPUOPS_SIMULATED_MACHINE is not set; "
                    "set it to one of: %s" % (self.path, ", ".join(catalog.shape_names())))
            with self._locked(create_shape=shape):
                pass
        elif self.root and not host.modelled(self.root):
            # a machine created without a root (a rig's state file written before the run) gets its host tree the
            # first time it is opened with one, as it would have at creation: one stat where the host is modelled
            with self._locked(adopt_root=True):
                pass

    # ------------------------------------------------------------------ state file
    @contextlib.contextmanager
    def _locked(self, write=True, create_shape=None, adopt_root=False):
        directory = os.path.dirname(self.path) or "."
        if not os.path.isdir(directory):
            try:
                os.makedirs(directory)
            except OSError as exc:
                if exc.errno != errno.EEXIST:
                    raise GpuBackendError("cannot create %s for the simulated GPU state: %s" % (directory, exc))
        lock_path = self.path + ".lock"
        try:
            lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise GpuBackendError("cannot open lock file %s: %s" % (lock_path, exc))
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            if not os.path.exists(self.path) and create_shape:
                state = new_state(create_shape, self.path, self.rack)
                if self.root:
                    self._render_host(state)
                self._save(state)
            state = self._load()
            if adopt_root and not state.get("host") and not host.modelled(self.root):
                self._render_host(state)
                self._save(state)
            # (taken before the driver's load is followed: a write lock saves what a reload did to the GPUs, even
            # where its own call changes nothing)
            before = json.dumps(state, sort_keys=True)
            self._follow_driver_load(state)
            keep = False
            try:
                yield state
                keep = True
            except NvmlError:
                # A failed NVML call still counts (call counter, fault consumed, call log): keep that.
                keep = True
                raise
            finally:
                if keep and write and json.dumps(state, sort_keys=True) != before:
                    self._save(state)
        finally:
            os.close(lock_fd)

    def _render_host(self, state):
        """The new machine's host tree under the root (once, before its state file is first saved: a run killed
        between the two renders it again)."""
        opts = host.parse_options(self.host_options, state["driver_version"])
        if opts["driver"]:
            state["driver_version"] = opts["driver"]
        try:
            host.render(self.root, state["shape"], [g["pci_bus_id"] for g in state["gpus"]], opts)
        except (IOError, OSError) as exc:
            raise GpuBackendError("cannot render the simulated host under %s: %s" % (self.root, exc))
        state["host"] = {"rendered": True, "driver": opts["driver"], "flavour": opts["flavour"],
                         "nouveau": opts["nouveau"], "secure_boot": opts["secure_boot"], "kernel": opts["kernel"],
                         "fabric_manager": True,
                         "nvidia_address": host.load_address(self.root)}
        self._write_boot_id(state)

    def _follow_driver_load(self, state):
        """A driver loaded again since the state last saw it (nvidia's load address in R/proc/modules changed: the
        kmod stand-ins unloaded and loaded it, _simulator_host.load_address) has lost what the driver held in the
        GPUs, as after a reboot but with the same boot: MIG instances, compute mode, persistence mode, and MIG mode
        where the GPU's generation does not keep it (_gpus_after_driver_start). Nothing where the host is not
        modelled, no driver is loaded (NVML does not start then) or the address is from before this model (0)."""
        if not self.root or not state.get("host"):
            return
        address = host.load_address(self.root)
        if not address or not int(address, 16):
            return
        seen = state["host"].get("nvidia_address")
        if seen == address:
            return
        state["host"]["nvidia_address"] = address
        loaded = host.loaded_module_version(self.root)
        if loaded:
            state["driver_version"] = loaded       # as a boot's load records it (_boot_host)
        if seen and int(seen, 16):
            _gpus_after_driver_start(state)
            state["call_log"].append({"n": state["mutating_calls"], "event": "driver_loaded", "address": address})

    def _boot_host(self, state):
        """The modelled host's kernel view after a boot (_simulator_host.boot): the installed driver loaded, nouveau
        where it is not blacklisted. Nothing where the host is not modelled."""
        if not host.modelled(self.root) or not state.get("host"):
            return
        switches = [f[0] for f in host.machine_functions(state["shape"], [g["pci_bus_id"] for g in state["gpus"]])
                    if f[1] == "nvswitch"]
        try:
            loaded = host.boot(self.root, state["host"], [host.sysfs_bus_id(g["pci_bus_id"]) for g in state["gpus"]],
                               switches)
        except (IOError, OSError) as exc:
            raise GpuBackendError("cannot boot the simulated host under %s: %s" % (self.root, exc))
        if loaded:
            state["driver_version"] = loaded
        self._nvml_started = False

    def _nvml(self):
        """Start simulated NVML once per backend, as nvmlInit would on the modelled host (NvmlInitError otherwise)."""
        if self._nvml_started:
            return
        error, loaded = host.nvml_init_error(self.root)
        if error:
            raise NvmlInitError(error[0], "simulated node %s: NVML could not start (%s)" % (
                os.path.basename(self.path), error[1]))
        self._loaded_version = loaded
        self._nvml_started = True

    def _sync_holders(self, state):
        """nvidia's refcnt on the modelled host follows the processes holding device files (test hooks only)."""
        if self.root:
            pids = set(p["pid"] for p in state["processes"])
            pids.update(h.get("pid") or ("holder", h["name"]) for h in state.get("holders", []))
            host.set_holders(self.root, len(pids))

    def _load(self):
        try:
            with open(self.path, "r") as handle:
                text = handle.read()
        except (IOError, OSError) as exc:
            raise GpuBackendError("cannot read simulated GPU state file %s: %s" % (self.path, exc))
        try:
            state = json.loads(text)
        except ValueError as exc:
            raise GpuBackendError(
                "simulated GPU state file %s is not valid JSON (%s); fix it, or delete it to recreate it "
                "from GPUOPS_SIMULATED_MACHINE" % (self.path, exc))
        problem = state_problem(state)
        if problem:
            raise GpuBackendError(
                "simulated GPU state file %s is not a gpuops simulator state: %s; delete it to recreate it "
                "from GPUOPS_SIMULATED_MACHINE" % (self.path, problem))
        return state

    def _save(self, state):
        directory = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".gpuops-sim-", dir=directory)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(state, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except Exception:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    # ------------------------------------------------------------------ reads
    def read_all(self, skip_lost=False):
        self._nvml()
        with self._locked(write=False) as state:
            version = self._loaded_version or state["driver_version"]
            out = {
                "backend": self.kind,
                "driver_version": version,
                "cuda_driver_version": cuda_version_text(state["cuda_driver_version"]),
                "nvml_version": "13.%s" % version,
                "gpus": [self._gpu_facts(state, sim_health.raise_if_lost(g)) for g in sim_health.listed(state)
                         if not (skip_lost and sim_health.is_lost(g))],
            }
            if skip_lost:
                out["lost_gpus"] = [{"index": g["index"], "error": "GPU %d (%s): GPU is lost" % (
                    g["index"], g["pci_bus_id"])} for g in sim_health.listed(state) if sim_health.is_lost(g)]
            return out

    def read_gpu(self, index):
        self._nvml()
        with self._locked(write=False) as state:
            gpu = sim_health.raise_if_missing(gpu_by_index(state, index))
            sim_health.raise_if_lost(gpu)
            return self._gpu_facts(state, gpu)

    def _gpu_facts(self, state, gpu):
        """A GPU's facts as NVML reads them: _simulator_state's, with its fabric (_simulator_health.fabric_facts, not
        started where no Fabric Manager registered the GPUs) and persistence mode as nvidia-persistenced keeps it."""
        facts = gpu_facts(state, gpu)
        facts["fabric"] = sim_health.fabric_facts(state, gpu, self._fabric_unregistered(state))
        return self._persistenced(facts)

    def _persistenced(self, facts):
        """A GPU's facts as NVML reads them while the simulated nvidia-persistenced runs on the modelled host with
        persistence mode (_simulator_host.start_persistenced): persistence mode Enabled."""
        if self.root and host.persistenced_mode(self.root):
            facts["persistence_mode"] = True
        return facts

    def read_health(self):
        """Every simulated GPU's health and the simulated kernel log's Xid lines (_simulator_health); where the host is
        modelled (GPUOPS_SIMULATED_ROOT), the GPUs its PCI tree shows, read as the real backend reads sysfs. A GPU with
        the fault ``hang`` blocks the read (``read_gpu_health``)."""
        self._nvml()
        with self._locked(write=False) as state:
            listed = sim_health.listed(state)
            if not any(sim_health.is_hung(g) for g in listed):
                # (the common case: every GPU answers, read in one look at the state, as a plan's read does it on
                # every converged re-run)
                unregistered = self._fabric_unregistered(state)
                gpus = [self._health_entry(state, g, unregistered) for g in listed]
                return {"backend": self.kind, "gpus": gpus, "kernel_log": sim_health.kernel_log(state),
                        "pci": self.read_pci(), "burn_in": read_record(record_path())}
        gpus = [self.read_gpu_health(index) for index in self.health_indexes()]
        with self._locked(write=False) as state:
            return {"backend": self.kind, "gpus": gpus, "kernel_log": sim_health.kernel_log(state),
                    "pci": self.read_pci(), "burn_in": read_record(record_path())}

    def health_indexes(self):
        """The indexes of the GPUs NVML lists (its device count; a GPU missing from NVML is not listed)."""
        self._nvml()
        with self._locked(write=False) as state:
            return [g["index"] for g in sim_health.listed(state)]

    def read_gpu_identity(self, index):
        """GPU ``index``'s bus id as NVML names it, before its health is read: {"index", "pci_bus_id"}."""
        self._nvml()
        with self._locked(write=False) as state:
            gpu = sim_health.raise_if_missing(gpu_by_index(state, index))
            return {"index": index, "pci_bus_id": gpu["pci_bus_id"]}

    def read_gpu_health(self, index):
        """One GPU's health entry (_simulator_health.health_facts). A GPU with the fault ``hang`` does not answer: the
        read waits in short sleeps, the state's lock released, until its process is killed (the deadline of
        _health_deadline) or the fault is set false (then it answers)."""
        self._nvml()
        while True:
            with self._locked(write=False) as state:
                gpu = sim_health.raise_if_missing(gpu_by_index(state, index))
                if not sim_health.is_hung(gpu):
                    return self._health_entry(state, gpu, self._fabric_unregistered(state))
            time.sleep(0.05)

    def _fabric_unregistered(self, state):
        """No Fabric Manager at the loaded driver's version: no GPU of the fabric is registered yet. Not on a compute
        tray of an NVL rack (gb200-nvl, gb300-nvl): no Fabric Manager runs on the tray's host, the rack's NVLink
        switch trays register its GPUs (what the GPU's health entry holds answers; faults place the exceptions)."""
        return bool(self.root and (state.get("host") or {}).get("fabric_manager")
                    and not sim_health.multi_node_fabric(state) and not host.fabric_registered(self.root))

    @staticmethod
    def _health_entry(state, gpu, unregistered):
        entry = sim_health.health_facts(state, gpu)
        if unregistered and isinstance(entry.get("fabric"), dict):
            entry["fabric"]["state"] = "not_started"
        return entry

    def read_pci(self):
        """The GPUs the modelled host's PCI tree shows (as the real backend reads sysfs), or None without a host."""
        return bus_gpus(self.root) if host.modelled(self.root) else None

    def read_kernel_log_timed(self):
        """This boot's simulated kernel log with monotonic timestamps and the boot id
        (_simulator_health.kernel_log_timed); where the host is modelled and shows
        R/proc/sys/kernel/random/boot_id, the boot id is read from there, as on a real node."""
        with self._locked(write=False) as state:
            answer = sim_health.kernel_log_timed(state)
        path = os.path.join(self.root, "proc", "sys", "kernel", "random", "boot_id") if self.root else None
        if path and os.path.isfile(path):
            with open(path) as handle:
                answer["boot_id"] = handle.read().strip() or answer["boot_id"]
        return answer

    def _write_boot_id(self, state):
        """The modelled host's R/proc/sys/kernel/random/boot_id for this boot (nothing without a host)."""
        if not host.modelled(self.root):
            return
        directory = os.path.join(self.root, "proc", "sys", "kernel", "random")
        try:
            if not os.path.isdir(directory):
                os.makedirs(directory)
            with open(os.path.join(directory, "boot_id"), "w") as handle:
                handle.write(sim_health.boot_id(state) + "\n")
        except (IOError, OSError) as exc:
            raise GpuBackendError("cannot write the simulated boot id under %s: %s" % (self.root, exc))

    def driver_loaded(self):
        """Test hook for the kmod stand-in, once it has loaded nvidia: what the load did to the GPUs
        (_follow_driver_load: MIG instances, compute and persistence mode gone) is written to the state file now, so
        that whatever reads the file sees it from the load on, not only from the next change a run makes. Nothing
        where the load was seen already, or the host is not modelled."""
        with self._locked():
            pass

    def raw_state(self):
        """The whole state document (for tests and the simulator's own tools), as it is now: a driver loaded again
        since the file was written is followed (read, not written)."""
        with self._locked(write=False) as state:
            return state

    # ------------------------------------------------------------------ mutations
    @contextlib.contextmanager
    def _mutation(self, call, args):
        """Count the call, fire an injected fault if one is due, log it; the body changes state only if
        no exception escapes (the state is saved only on success). A call that a `stop_after` names stops
        its process (SIGSTOP) once the call is saved and the state file's lock is released."""
        self._nvml()
        stop = False
        try:
            with self._locked() as state:
                state["mutating_calls"] += 1
                entry = {"n": state["mutating_calls"], "call": call, "args": args, "pid": os.getpid()}
                due = due_stop(state)
                fault = due_fault(state, call)
                if fault is not None:
                    entry["error"] = fault["error"]
                    entry["injected"] = True
                    # Only the counters and the log are kept: the GPU state is left as it was.
                    state["call_log"].append(entry)
                    stop = due
                    raise NvmlError.for_name(fault["error"], "injected fault on %s call #%d" % (call, entry["n"]))
                work = json.loads(json.dumps(state))
                try:
                    yield work
                except NvmlError as exc:
                    entry["error"] = exc.name
                    state["call_log"].append(entry)
                    stop = due
                    raise
                work["call_log"].append(entry)
                state.clear()
                state.update(work)
                stop = due
        finally:
            if stop:
                os.kill(os.getpid(), signal.SIGSTOP)

    def set_mig_mode(self, index, enabled):
        with self._mutation("set_mig_mode", {"index": index, "enabled": bool(enabled)}) as state:
            gpu = gpu_by_index(state, index)
            require_mig_capable(gpu)
            want = bool(enabled)
            if not want and gpu["gpu_instances"]:
                # Disabling MIG while GPU instances exist is refused: mig-parted clears all instances before
                # SetMigMode for this reason (NVIDIA/mig-parted@bd7160f4:cmd/nvidia-mig-parted/apply/mode.go,
                # ClearMigConfig). NVML's exact code here is not documented; IN_USE is what the "In use by another
                # client" message maps to.
                raise NvmlInUse("GPU %d still has GPU instances; destroy them before disabling MIG" % index)
            gpu["mig_pending"] = want
            if gpu["mig_current"] == want:
                return 0
            rules = arch_rules(gpu)
            busy = processes_on(state, index)
            if not gpu.get("reset_supported", True):
                return NVML_ERROR_CODES["RESET_REQUIRED"]
            if rules["mig_change_needs_reset"]:
                # Ampere: pending until a GPU reset (the rule and mig-parted's observed flow). Whether
                # the driver's own reset attempt inside SetMigMode can activate it on an idle GPU is not
                # modelled: the simulator takes the conservative path of always needing an explicit reset.
                return NVML_ERROR_CODES["IN_USE"] if busy else 0
            if busy:
                return NVML_ERROR_CODES["IN_USE"]
            gpu["mig_current"] = want
            return 0

    def _reset_gpu(self, index):
        with self._mutation("reset_gpu", {"index": index}) as state:
            gpu = sim_health.raise_if_missing(gpu_by_index(state, index))
            sim_health.raise_if_lost(gpu)
            if not gpu.get("reset_supported", True):
                raise NvmlNotSupported("GPU %d cannot be reset here (passthrough): a VM reboot is needed" % index)
            held = [h for h in state.get("holders", []) if index in h["gpus"]]
            if processes_on(state, index) or held:
                # NVML's words for IN_USE (nvmlErrorString), which name nobody, as nvidia-smi prints them for a
                # refused reset; GpuBackend.reset_gpu adds who holds the device files, from device_holders below.
                raise NvmlInUse("GPU %d: %s" % (index, IN_USE_TEXT))
            apply_reset(gpu)

    def device_holders(self, index):
        """The simulated processes that hold GPU ``index``'s device files, as the real backend finds them in /proc:
        a process NVML lists (a CUDA context) holds /dev/nvidiactl, /dev/nvidia-uvm and its GPU's file; a holder
        (``hold``) holds /dev/nvidiactl and each of its GPUs' files. GPU i's file is /dev/nvidia<i> (the simulator's
        minor number is the index). The same records and narrowing as the real backend's (_device_holders)."""
        with self._locked(write=False) as state:
            gpu_by_index(state, index)
            found = {}
            for proc in state["processes"]:
                entry = found.setdefault(proc["pid"], {"command": proc["name"], "cgroup": proc.get("cgroup"),
                                                       "paths": set(["/dev/nvidiactl", "/dev/nvidia-uvm"])})
                entry["paths"].add(gpu_file(proc["gpu"]))
            for holder in state.get("holders", []):
                entry = found.setdefault(holder.get("pid"), {"command": holder.get("command") or holder["name"],
                                                             "cgroup": holder.get("cgroup"),
                                                             "paths": set(["/dev/nvidiactl"])})
                entry["paths"].update(gpu_file(i) for i in holder["gpus"])
            records = [holder_record(pid, e["command"], e["paths"], e["cgroup"])
                       for pid, e in sorted(found.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]
            files = sorted(set(["/dev/nvidiactl", "/dev/nvidia-uvm"] + [gpu_file(g["index"]) for g in state["gpus"]]))
            return for_device({"holders": records, "unreadable": [], "files": files}, gpu_file(index))

    def create_gpu_instance(self, index, profile_id, start):
        with self._mutation("create_gpu_instance",
                            {"index": index, "profile_id": profile_id, "start": start}) as state:
            gpu = gpu_by_index(state, index)
            require_mig_enabled(gpu)
            profile = gi_profile_by_id(gpu, profile_id)
            starts = [p["start"] for p in profile["placements"]]
            if start not in starts:
                raise NvmlInvalidArgument("profile %s (id %d) cannot be placed at %r; possible starts: %s" % (
                    profile["name"], profile_id, start, starts))
            same = [gi for gi in gpu["gpu_instances"] if gi["profile_id"] == profile_id]
            if len(same) >= profile["max_instances"]:
                raise NvmlInsufficientResources("profile %s allows at most %d instance(s)" % (
                    profile["name"], profile["max_instances"]))
            wanted = set(range(start, start + profile["memory_slices"]))
            used = used_memory_slices(gpu)
            if wanted & used:
                raise NvmlInsufficientResources("memory slices %s are occupied" % sorted(wanted & used))
            m = catalog.GPU_MODELS[gpu["model"]]["mig"]
            used_compute = sum(gi_profile_by_id(gpu, gi["profile_id"])["slices"] for gi in gpu["gpu_instances"])
            if used_compute + profile["slices"] > m["compute_slices"]:
                raise NvmlInsufficientResources("not enough free compute slices")
            gi_id = lowest_free_id([gi["id"] for gi in gpu["gpu_instances"]], first=1)
            gpu["gpu_instances"].append({
                "id": gi_id, "profile_id": profile_id, "start": start, "compute_instances": []})
            gpu["gpu_instances"].sort(key=lambda gi: gi["start"])
            return gi_id

    def destroy_gpu_instance(self, index, gi_id):
        with self._mutation("destroy_gpu_instance", {"index": index, "gi_id": gi_id}) as state:
            gpu = gpu_by_index(state, index)
            require_mig_enabled(gpu)
            gi = gi_by_id(gpu, gi_id)
            if gi["compute_instances"]:
                raise NvmlInUse("GPU instance %d still has %d compute instance(s)" % (
                    gi_id, len(gi["compute_instances"])))
            if [p for p in state["processes"] if p["gpu"] == index and p.get("gi_id") == gi_id]:
                raise NvmlInUse("GPU instance %d has processes" % gi_id)
            gpu["gpu_instances"].remove(gi)

    def create_compute_instance(self, index, gi_id, ci_profile_id):
        with self._mutation("create_compute_instance",
                            {"index": index, "gi_id": gi_id, "ci_profile_id": ci_profile_id}) as state:
            gpu = gpu_by_index(state, index)
            require_mig_enabled(gpu)
            gi = gi_by_id(gpu, gi_id)
            gi_profile = gi_profile_by_id(gpu, gi["profile_id"])
            ci_profile = None
            for cp in gi_profile["ci_profiles"]:
                if cp["id"] == ci_profile_id:
                    ci_profile = cp
            if ci_profile is None:
                raise NvmlNotSupported("compute-instance profile id %r is not offered in a %s GPU instance" % (
                    ci_profile_id, gi_profile["name"]))
            same = [ci for ci in gi["compute_instances"] if ci["profile_id"] == ci_profile_id]
            if len(same) >= ci_profile["max_instances"]:
                raise NvmlInsufficientResources("%s allows at most %d" % (
                    ci_profile["name"], ci_profile["max_instances"]))
            # Driver-chosen CI placement: the first aligned run of free compute slices. NVIDIA does not
            # document how the driver picks; this first-fit rule is the simulator's own convention.
            used = set()
            for ci in gi["compute_instances"]:
                used.update(range(ci["start"], ci["start"] + ci["slices"]))
            size = ci_profile["slices"]
            start = None
            for candidate in range(0, gi_profile["slices"] - size + 1, size):
                if not set(range(candidate, candidate + size)) & used:
                    start = candidate
                    break
            if start is None:
                raise NvmlInsufficientResources("no free compute slices for %s in GPU instance %d" % (
                    ci_profile["name"], gi_id))
            ci_id = lowest_free_id([ci["id"] for ci in gi["compute_instances"]], first=0)
            state["uuid_counter"] += 1
            gi["compute_instances"].append({
                "id": ci_id, "profile_id": ci_profile_id, "start": start, "slices": size,
                "uuid": mig_uuid(gpu, gi_id, ci_id, state["uuid_counter"]),
            })
            gi["compute_instances"].sort(key=lambda ci: ci["start"])
            return ci_id

    def destroy_compute_instance(self, index, gi_id, ci_id):
        with self._mutation("destroy_compute_instance",
                            {"index": index, "gi_id": gi_id, "ci_id": ci_id}) as state:
            gpu = gpu_by_index(state, index)
            require_mig_enabled(gpu)
            gi = gi_by_id(gpu, gi_id)
            ci = [c for c in gi["compute_instances"] if c["id"] == ci_id]
            if not ci:
                raise NvmlNotFound("GPU instance %d has no compute instance %d" % (gi_id, ci_id))
            users = [p for p in state["processes"]
                     if p["gpu"] == index and p.get("gi_id") == gi_id and p.get("ci_id") == ci_id]
            if users:
                raise NvmlInUse("compute instance %d/%d has %d process(es)" % (gi_id, ci_id, len(users)))
            gi["compute_instances"].remove(ci[0])

    def set_compute_mode(self, index, mode):
        with self._mutation("set_compute_mode", {"index": index, "mode": mode}) as state:
            gpu = gpu_by_index(state, index)
            if mode not in COMPUTE_MODES:
                raise NvmlInvalidArgument("unknown compute mode %r; valid: %s" % (mode, ", ".join(COMPUTE_MODES)))
            if mode == "Exclusive_Process" and gpu["mig_current"]:
                raise NvmlNotSupported(
                    "Setting compute mode to EXCLUSIVE_PROCESS is not supported on a MIG-enabled device")
            gpu["compute_mode"] = mode

    def set_persistence_mode(self, index, enabled):
        with self._mutation("set_persistence_mode", {"index": index, "enabled": bool(enabled)}) as state:
            gpu_by_index(state, index)["persistence_mode"] = bool(enabled)

    # ------------------------------------------------------------------ events and test hooks
    def reboot(self):
        """A host reboot: instances and processes are lost, compute mode returns to Default, persistence
        mode to Disabled; Ampere keeps (and activates) its pending MIG mode, Hopper loses MIG mode."""
        with self._locked() as state:
            state["boot_id"] += 1
            state["processes"] = []
            state["holders"] = []
            _gpus_after_driver_start(state)
            sim_health.after_reboot(state)
            self._boot_host(state)
            self._write_boot_id(state)
            if self.root and state.get("host"):
                state["host"]["nvidia_address"] = host.load_address(self.root)  # this boot's load, not a reload
            state["call_log"].append({"n": state["mutating_calls"], "event": "reboot", "boot_id": state["boot_id"]})
            self._sync_holders(state)
            return state["boot_id"]

    def add_process(self, index, pid, name, used_memory_mib=0, gi_id=None, ci_id=None):
        with self._locked() as state:
            gpu = gpu_by_index(state, index)
            if gpu["mig_current"]:
                if gi_id is None or ci_id is None:
                    raise GpuBackendError("GPU %d is MIG-enabled: a process must run on a MIG device "
                                          "(give gi_id and ci_id)" % index)
                gi = gi_by_id(gpu, gi_id)
                if not [c for c in gi["compute_instances"] if c["id"] == ci_id]:
                    raise GpuBackendError("GPU %d GI %d has no compute instance %d" % (index, gi_id, ci_id))
            elif gi_id is not None or ci_id is not None:
                raise GpuBackendError("GPU %d is not MIG-enabled: a process cannot run on GI/CI ids" % index)
            state["processes"] = [p for p in state["processes"] if p["pid"] != pid]
            state["processes"].append({"pid": int(pid), "name": name, "gpu": index, "gi_id": gi_id,
                                       "ci_id": ci_id, "used_memory_mib": int(used_memory_mib)})
            self._sync_holders(state)

    def remove_process(self, pid):
        with self._locked() as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != pid]
            self._sync_holders(state)

    def hold(self, holder, indices=None, pid=None, command=None, cgroup=None):
        """A program that keeps the GPUs' device files open without a CUDA context (a device plugin, GPU feature
        discovery, a DCGM exporter): NVML lists no process for it, yet a GPU reset fails while it runs. ``indices``
        None holds every GPU. ``pid``, ``command`` and ``cgroup`` (the text of its /proc/<pid>/cgroup) are what the
        real backend would read of it in /proc (``command`` defaults to ``holder``). ``release(holder)`` ends it; a
        reboot ends every holder."""
        with self._locked() as state:
            every = [g["index"] for g in state["gpus"]]
            held = every if indices is None else [gpu_by_index(state, i)["index"] for i in indices]
            state["holders"] = [h for h in state.get("holders", []) if h["name"] != holder]
            state["holders"].append({"name": str(holder), "gpus": sorted(held),
                                     "pid": None if pid is None else int(pid), "command": command or str(holder),
                                     "cgroup": cgroup})
            self._sync_holders(state)

    def release(self, holder):
        with self._locked() as state:
            state["holders"] = [h for h in state.get("holders", []) if h["name"] != holder]
            self._sync_holders(state)

    def inject_fault(self, after_calls, error, call=None):
        """Make the `after_calls`-th mutating call from now (1 = the next one), counting only calls named
        `call` when given, fail with the NVML error named `error` (e.g. 'INSUFFICIENT_RESOURCES')."""
        if error not in NVML_ERROR_CODES:
            raise GpuBackendError("unknown NVML error %r; valid: %s" % (error, ", ".join(sorted(NVML_ERROR_CODES))))
        if call is not None and call not in MUTATING_CALLS:
            raise GpuBackendError("unknown mutating call %r; valid: %s" % (call, ", ".join(MUTATING_CALLS)))
        if int(after_calls) < 1:
            raise GpuBackendError("after_calls must be 1 or more")
        with self._locked() as state:
            state["faults"].append({"remaining": int(after_calls), "error": error, "call": call})

    def stop_after(self, calls):
        """Test hook: the process that makes the `calls`-th mutating call from now (1 = the next one; failed
        calls count) stops itself with SIGSTOP once that call is saved in the state file, its lock released and
        its call_log entry (with the process's pid) written. A test then kills it there, at a point it chose
        however loaded the machine is, or resumes it with SIGCONT. One stop at a time: arming replaces it."""
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise GpuBackendError("stop_after needs a whole number of calls, 1 or more; got %r" % (calls,))
        with self._locked() as state:
            state["stop_after"] = calls

    def set_reset_supported(self, index, supported):
        """Model a passthrough VM (no per-GPU reset) when `supported` is False."""
        with self._locked() as state:
            gpu_by_index(state, index)["reset_supported"] = bool(supported)

    def inject_health(self, index, fault, value=True, link=None):
        """Test hook: set one health fault on GPU ``index`` (``_simulator_health.FAULTS``: a lost GPU, ECC counts, a
        pending or failed row remap, an NVLink down or its error counters, a PCIe link below its maximum, clock event
        reasons, the temperature, the fabric's state; ``healthy`` clears them). What the GPU answers NOT_SUPPORTED for
        cannot be set (NvmlNotSupported)."""
        with self._locked() as state:
            sim_health.inject(state, gpu_by_index(state, index), fault, value, link)

    def add_xid(self, index, code, message=None, pid=None, ts=None):
        """Test hook: the driver logs Xid ``code`` for GPU ``index`` in this boot's simulated kernel log, at ``ts``
        seconds after boot (default: after the log's last line); returns the line. A reboot starts a new, empty log."""
        with self._locked() as state:
            return sim_health.add_xid(state, gpu_by_index(state, index), code, message, pid, ts)

    def add_sxid(self, switch, bus_id, code, fatal, message=None, link=None, ts=None):
        """Test hook: the NVSwitch driver logs SXid ``code`` (``fatal`` or not) for NVSwitch ``switch`` at PCI
        ``bus_id`` in this boot's simulated kernel log, its event line followed by its Severity and Data lines; returns
        the event line. A reboot starts a new, empty log."""
        with self._locked() as state:
            return sim_health.add_sxid(state, switch, bus_id, code, fatal, message, link, ts)

    def rotate_kernel_log(self, count):
        """Test hook: the kernel log drops its ``count`` oldest lines (rotated past them)."""
        with self._locked() as state:
            sim_health.rotate_kernel_log(state, count)

    def set_kernel_log_readable(self, readable):
        """Test hook: False makes the kernel log unreadable (no journal, dmesg restricted)."""
        with self._locked() as state:
            sim_health.set_kernel_log_readable(state, readable)

    def clear_call_log(self):
        with self._locked() as state:
            state["call_log"] = []
