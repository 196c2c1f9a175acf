"""The simulated node below NVML: the host tree rendered when a machine is created under a root, read back by the
same code that reads a real host (_pci, _driver_state), and simulated NVML following it (no driver, a version
mismatch); without a root the simulator is unchanged."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_state
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host as host
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlInitError
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator_state import SIM_DRIVER_VERSION


def _sim(tmp_path, shape="hgx-h200", options=None, root="root"):
    return SimulatedBackend(str(tmp_path / "state.json"), shape=shape,
                            root=str(tmp_path / root) if root else None, host_options=options)


def test_default_host_is_a_driver_brought_by_the_image(tmp_path):
    sim = _sim(tmp_path)
    root = str(tmp_path / "root")
    facts = sim.read_all()
    assert facts["driver_version"] == SIM_DRIVER_VERSION and len(facts["gpus"]) == 8
    state = _driver_state.read(root)
    assert state == {"kernel": host.DEFAULT_KERNEL,
                     "loaded": {"version": SIM_DRIVER_VERSION, "flavour": "open",
                                "modules": {"nvidia_uvm": 0, "nvidia": 1}},
                     "nouveau_loaded": False, "secure_boot": False, "nvswitch": True, "nvlink5": False}
    devices = _pci.read_nvidia_devices(root)
    gpus = [d for d in devices if d["kind"] == "gpu"]
    # The PCI view and NVML's agree on every GPU's bus id and name.
    assert [d["bus_id"] for d in gpus] == [host.sysfs_bus_id(g["pci_bus_id"]) for g in facts["gpus"]]
    assert set(d["name"] for d in gpus) == {"NVIDIA H200"} and all(d["bound_driver"] == "nvidia" for d in gpus)
    assert len([d for d in devices if d["kind"] == "nvswitch"]) == 4
    assert os.readlink(os.path.join(root, host.NVML_LIBRARY_LINK)) == "libnvidia-ml.so." + SIM_DRIVER_VERSION


@pytest.mark.parametrize("shape,switches,nvlink5", [
    ("dgx-a100-40gb", 6, False), ("hgx-h100-80gb", 4, False), ("hgx-b200", 0, True), ("l40s-x2", 0, False),
    ("mixed", 0, False),
])
def test_shapes_have_their_nvswitches_or_nvlink5_bridge(tmp_path, shape, switches, nvlink5):
    _sim(tmp_path, shape=shape).read_all()
    root = str(tmp_path / "root")
    devices = _pci.read_nvidia_devices(root)
    assert len([d for d in devices if d["kind"] == "nvswitch"]) == switches
    state = _driver_state.read(root)
    assert (state["nvswitch"], state["nvlink5"]) == (switches > 0, nvlink5)
    flavours = _pci.flavours(devices)
    assert flavours["open"] is True and flavours["proprietary"] is (shape != "hgx-b200")


def test_no_driver_loaded_nvml_fails_driver_not_loaded_and_pci_still_answers(tmp_path):
    sim = _sim(tmp_path, options="driver=none")
    with pytest.raises(NvmlInitError) as err:
        sim.read_all()
    assert err.value.name == "LIBRARY_NOT_FOUND"          # nothing installed: the library is missing first
    root = str(tmp_path / "root")
    host.install_nvml_library(root, "580.95.05")          # the userspace package, no module loaded
    with pytest.raises(NvmlInitError) as err:
        _sim(tmp_path, options="driver=none").read_all()
    assert err.value.name == "DRIVER_NOT_LOADED" and "Driver Not Loaded" in str(err.value)
    assert isinstance(err.value, GpuBackendError)
    state = _driver_state.read(root)
    assert state["loaded"] is None and state["nvswitch"] is False
    gpus = [d for d in _pci.read_nvidia_devices(root) if d["kind"] == "gpu"]
    assert len(gpus) == 8 and all(d["bound_driver"] is None for d in gpus)
    # Test hooks are no NVML calls: they still work.
    assert sim.reboot() == 2 and sim.raw_state()["host"]["driver"] is None


def test_mismatch_between_loaded_module_and_library_fails_like_nvidia_smi(tmp_path):
    sim = _sim(tmp_path, options="driver=570.172.08")
    assert sim.read_all()["driver_version"] == "570.172.08"
    root = str(tmp_path / "root")
    host.install_nvml_library(root, "580.95.05")          # packages upgraded, old module still loaded
    fresh = SimulatedBackend(str(tmp_path / "state.json"), root=root)
    with pytest.raises(NvmlInitError) as err:
        fresh.read_gpu(0)
    assert err.value.name == "LIB_RM_VERSION_MISMATCH"
    assert "Driver/library version mismatch" in str(err.value) and "580.95.05" in str(err.value)
    with pytest.raises(NvmlInitError):
        fresh.set_compute_mode(0, "Prohibited")
    assert fresh.raw_state()["mutating_calls"] == 0        # the refused call changed nothing
    # The module reloaded at the library's version: NVML answers with it.
    bus = [host.sysfs_bus_id(g["pci_bus_id"]) for g in fresh.raw_state()["gpus"]]
    host.unload_driver(root, bus)
    host.load_driver(root, "580.95.05", "open", bus)
    reloaded = SimulatedBackend(str(tmp_path / "state.json"), root=root)
    assert reloaded.read_all()["driver_version"] == "580.95.05"
    assert _driver_state.read(root)["loaded"]["version"] == "580.95.05"


def test_nouveau_secure_boot_proprietary_and_kernel_options(tmp_path):
    _sim(tmp_path, options="driver=none, nouveau, secure-boot=on, kernel=5.15.0-1-generic", root="a").raw_state()
    state = _driver_state.read(str(tmp_path / "a"))
    assert state["nouveau_loaded"] and state["secure_boot"] is True and state["kernel"] == "5.15.0-1-generic"
    gpus = [d for d in _pci.read_nvidia_devices(str(tmp_path / "a")) if d["kind"] == "gpu"]
    assert all(d["bound_driver"] == "nouveau" for d in gpus)
    os.unlink(str(tmp_path / "state.json"))
    _sim(tmp_path, options="flavour=proprietary,secure-boot=absent", root="b").read_all()
    state = _driver_state.read(str(tmp_path / "b"))
    assert state["loaded"]["flavour"] == "proprietary" and state["secure_boot"] is None


@pytest.mark.parametrize("options,words", [
    ("driver", "bad item 'driver'"), ("flavour=closed", "bad item"), ("secure-boot=maybe", "secure-boot=on|off"),
    ("nouveau", "nouveau and a loaded NVIDIA driver"), ("colour=red", "valid items"),
])
def test_bad_host_options_are_refused_before_anything_is_written(tmp_path, options, words):
    with pytest.raises(GpuBackendError, match=words):
        _sim(tmp_path, options=options)
    assert not os.path.exists(str(tmp_path / "state.json")) and not os.path.exists(str(tmp_path / "root"))


def test_holders_raise_nvidias_refcnt_and_release_lowers_it(tmp_path):
    sim = _sim(tmp_path)
    root = str(tmp_path / "root")
    assert not _driver_state.in_use(_driver_state.read(root)["loaded"]["modules"])
    sim.hold("device-plugin", pid=4100)
    sim.add_process(0, 4200, "train")
    modules = _driver_state.read(root)["loaded"]["modules"]
    assert modules["nvidia"] == 3 and _driver_state.in_use(modules)
    with open(os.path.join(root, "sys/module/nvidia/refcnt")) as handle:
        assert handle.read() == "3\n"
    sim.release("device-plugin")
    sim.remove_process(4200)
    assert not _driver_state.in_use(_driver_state.read(root)["loaded"]["modules"])


def test_without_a_root_nothing_is_rendered_and_nvml_answers_as_before(tmp_path):
    sim = _sim(tmp_path, root=None)
    assert sim.read_all()["driver_version"] == SIM_DRIVER_VERSION
    assert "host" not in sim.raw_state() and sorted(os.listdir(str(tmp_path))) == ["state.json", "state.json.lock"]


def test_a_state_created_without_a_root_gets_its_host_when_first_opened_with_one(tmp_path):
    """A rig's state file written before the run (no root) has no host tree; the run opens it with the node's root:
    the host is rendered then, as at creation (the char devices nvidia-ctk reads included), the GPUs' state is kept."""
    sim = _sim(tmp_path, root=None)
    sim.set_compute_mode(0, "Prohibited")
    (tmp_path / "bare").mkdir()
    opened = SimulatedBackend(str(tmp_path / "state.json"), root=str(tmp_path / "bare"))
    state = opened.raw_state()
    assert state["host"]["rendered"] and state["gpus"][0]["compute_mode"] == "Prohibited"
    assert host.modelled(str(tmp_path / "bare"))
    with open(str(tmp_path / "bare" / "proc/devices")) as handle:
        assert "195 nvidia\n" in handle.read()
    assert len(os.listdir(str(tmp_path / "bare" / "sys/bus/pci/devices"))) >= len(state["gpus"])
    assert opened.read_all()["driver_version"] == SIM_DRIVER_VERSION
    # host options apply as at creation
    (tmp_path / "none").mkdir()
    _sim(tmp_path / "other", root=None).read_all()
    with pytest.raises(NvmlInitError):
        SimulatedBackend(str(tmp_path / "other" / "state.json"), root=str(tmp_path / "none"),
                         host_options="driver=none").read_all()


def test_an_existing_state_is_not_rendered_again(tmp_path):
    _sim(tmp_path).read_all()
    marker = tmp_path / "root" / "proc/sys/kernel/osrelease"
    marker.write_text("edited\n")
    _sim(tmp_path, options="driver=none").read_all()         # options apply at creation only
    assert marker.read_text() == "edited\n"


def test_get_backend_passes_root_and_host_options(tmp_path, monkeypatch):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(tmp_path / "s.json"))
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "h200-x1")
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", str(tmp_path / "r"))
    monkeypatch.setenv("GPUOPS_SIMULATED_HOST", "driver=none,nouveau")
    backend = get_backend()
    with pytest.raises(NvmlInitError):
        backend.read_all()
    assert _driver_state.read(str(tmp_path / "r"))["nouveau_loaded"] is True


@pytest.mark.parametrize("shape,keeps_mig_mode", [("h200-x1", False), ("a30-x4", True)])
def test_a_driver_reload_loses_what_the_driver_held_in_the_gpus_without_a_reboot(tmp_path, shape, keeps_mig_mode):
    # The kmod stand-ins unload and load the driver (tests/support/driver_files.py): nvidia's load address changes,
    # and the simulated GPUs lose their MIG instances, compute mode and persistence mode as after a reboot; MIG mode
    # as the generation's reboot rule says (Ampere keeps it, Hopper loses it). The boot is the same.
    from tests.support import driver_files as df
    sim = _sim(tmp_path, shape=shape)
    root = str(tmp_path / "root")
    sim.set_mig_mode(0, True)
    sim.reset_gpu(0)
    with sim._locked(write=False) as state:
        assert state["gpus"][0]["mig_current"] is True
        profile = catalog.gi_profiles(state["gpus"][0]["model"])[0]
    sim.create_gpu_instance(0, profile["id"], profile["placements"][0]["start"])
    sim.set_compute_mode(0, "Prohibited")
    sim.set_persistence_mode(0, True)
    with sim._locked(write=False) as state:
        boot = state["boot_id"]
    address = host.load_address(root)
    # a holder's reference changes nvidia's refcnt, not its load: nothing is lost
    sim.hold("device-plugin", pid=4100)
    sim.release("device-plugin")
    assert host.load_address(root) == address
    with sim._locked(write=False) as state:
        assert len(state["gpus"][0]["gpu_instances"]) == 1 and state["gpus"][0]["compute_mode"] == "Prohibited"

    info = {"version": SIM_DRIVER_VERSION, "flavour": "open"}
    for module in ("nvidia_uvm", "nvidia"):
        df.unload_module(root, module)
    for module in ("nvidia", "nvidia_uvm"):
        df.load_module(root, module, info)
    assert host.load_address(root) not in (None, address)
    sim.read_all()
    with sim._locked(write=False) as state:
        assert state["boot_id"] == boot
        gpu = state["gpus"][0]
        assert gpu["gpu_instances"] == [] and gpu["compute_mode"] == "Default" and gpu["persistence_mode"] is False
        assert gpu["mig_current"] is keeps_mig_mode
        assert [e for e in state["call_log"] if e.get("event") == "driver_loaded"]
    # once seen, the same load is not a reload again
    sim.set_compute_mode(0, "Prohibited")
    sim.read_all()
    with sim._locked(write=False) as state:
        assert state["gpus"][0]["compute_mode"] == "Prohibited"
        assert len([e for e in state["call_log"] if e.get("event") == "driver_loaded"]) == 1


def _laid_out(sim):
    """GPU 0 of an H200 with MIG on, one GPU instance, compute mode Prohibited and persistence mode on."""
    sim.set_mig_mode(0, True)
    profile = catalog.gi_profiles(sim.raw_state()["gpus"][0]["model"])[0]
    sim.create_gpu_instance(0, profile["id"], profile["placements"][0]["start"])
    sim.set_compute_mode(0, "Prohibited")
    sim.set_persistence_mode(0, True)


def _as_loaded_again(gpu):
    return (gpu["mig_current"], gpu["gpu_instances"], gpu["compute_mode"], gpu["persistence_mode"])


def test_the_kmod_stand_ins_reload_writes_what_the_gpus_lost_to_the_state_file(tmp_path):
    """rmmod and modprobe as a run calls them (the stand-ins under tests/support/bin): once modprobe has loaded nvidia,
    the state file itself, read with no simulator, has no MIG instance, compute mode Default, persistence mode off and
    (Hopper) MIG mode off, before any call of a run re-applies them: a run stopped right after this modprobe leaves
    the truth for whatever reads the file (a test's helper, the fake device plugin, the CDI stand-in)."""
    import json
    import subprocess
    from tests.support import driver_files as df
    from tests.support.ansible_run import ROOT
    sim = _sim(tmp_path, shape="h200-x1")
    root, path = str(tmp_path / "root"), str(tmp_path / "state.json")
    df.install_module_files(root, SIM_DRIVER_VERSION)
    _laid_out(sim)
    env = dict(os.environ, GPUOPS_SIMULATED_ROOT=root, GPUOPS_SIMULATED_GPUS=path)

    def run(*command):
        proc = subprocess.run([os.path.join(ROOT, "tests", "support", "bin", command[0])] + list(command[1:]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr

    def stored():
        with open(path) as handle:
            return json.load(handle)

    run("rmmod", "nvidia_uvm")
    run("rmmod", "nvidia")
    # unloaded: nothing is followed yet (no NVML answers while no driver is loaded)
    assert len(stored()["gpus"][0]["gpu_instances"]) == 1
    run("modprobe", "nvidia")
    state = stored()
    assert _as_loaded_again(state["gpus"][0]) == (False, [], "Default", False)
    assert [e["event"] for e in state["call_log"] if "event" in e] == ["driver_loaded"]
    # the simulator reads the same, and sees that load as done
    assert sim.raw_state() == state


def test_the_site_tests_read_a_reload_through_the_simulator_even_before_the_state_file_is_written(tmp_path):
    """Site.gpus (the site tests' reader, LiveNode.layout's too): nvidia unloaded and loaded without the state file
    being written since (driver_files directly, not the stand-in), what it returns has lost the MIG instance, compute
    and persistence mode as NVML would say; the file itself still lists them."""
    import json
    from tests.integration.site_helpers import Site
    from tests.support import driver_files as df
    site = Site(tmp_path)
    path, root = str(site.state / "n.json"), str(site.state / "n")
    sim = SimulatedBackend(path, shape="h200-x1", root=root)
    _laid_out(sim)
    info = {"version": SIM_DRIVER_VERSION, "flavour": "open"}
    for module in ("nvidia_uvm", "nvidia"):
        df.unload_module(root, module)
    for module in ("nvidia", "nvidia_uvm"):
        df.load_module(root, module, info)
    with open(path) as handle:
        assert len(json.load(handle)["gpus"][0]["gpu_instances"]) == 1
    assert _as_loaded_again(site.gpus("n")["gpus"][0]) == (False, [], "Default", False)
