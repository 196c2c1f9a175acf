"""tests/gpu/health_vs_smi.py's comparison, on this GPU-less machine: the simulator's H200 read against an
`nvidia-smi -q -x` document in the element names of driver 580's XML (a made-up document of a healthy H200, not a
reading: the real comparison runs on the lent GPU)."""
import importlib.util
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import NOT_SUPPORTED
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("health_vs_smi", os.path.join(ROOT, "tests", "gpu", "health_vs_smi.py"))
script = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(script)

XML = """<?xml version="1.0" ?>
<nvidia_smi_log><gpu id="00000000:07:00.0">
 <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
 <ecc_errors>
  <volatile><sram_correctable>0</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>
   <sram_uncorrectable_secded>0</sram_uncorrectable_secded><dram_correctable>0</dram_correctable>
   <dram_uncorrectable>{dram_unc}</dram_uncorrectable></volatile>
  <aggregate><sram_correctable>0</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>
   <sram_uncorrectable_secded>0</sram_uncorrectable_secded><dram_correctable>0</dram_correctable>
   <dram_uncorrectable>0</dram_uncorrectable><sram_threshold_exceeded>No</sram_threshold_exceeded></aggregate>
 </ecc_errors>
 <retired_pages><multiple_single_bit_retirement><retired_count>N/A</retired_count></multiple_single_bit_retirement>
  <double_bit_retirement><retired_count>N/A</retired_count></double_bit_retirement>
  <pending_retirement>N/A</pending_retirement></retired_pages>
 <remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>0</remapped_row_unc>
  <remapped_row_pending>{pending}</remapped_row_pending><remapped_row_failure>No</remapped_row_failure></remapped_rows>
 <pci><pci_gpu_link_info><pcie_gen><max_link_gen>5</max_link_gen><current_link_gen>5</current_link_gen>
  <device_current_link_gen>5</device_current_link_gen><max_device_link_gen>5</max_device_link_gen>
  <max_host_link_gen>5</max_host_link_gen></pcie_gen>
  <link_widths><max_link_width>16x</max_link_width><current_link_width>16x</current_link_width></link_widths>
 </pci_gpu_link_info></pci>
 <clocks_event_reasons><clocks_event_reason_gpu_idle>Active</clocks_event_reason_gpu_idle>
  <clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown></clocks_event_reasons>
 <temperature><gpu_temp>30 C</gpu_temp></temperature>
 <fabric><state>N/A</state><status>N/A</status></fabric>
</gpu></nvidia_smi_log>
"""


def _rows(tmp_path, root=None, **xml):
    health = SimulatedBackend(str(tmp_path / "s.json"), shape="h200-x1", root=root).read_health()
    values = {"dram_unc": 0, "pending": "No"}
    values.update(xml)
    return dict((r["field"], r) for r in script.compare(health, XML.format(**values), "", NOT_SUPPORTED))


def test_a_matching_reading_is_equal_field_by_field(tmp_path):
    rows = _rows(tmp_path)
    fields = [r for f, r in rows.items() if f != "pci.gpus"]
    assert set(r["result"] for r in fields) == {"equal"}, [r for r in fields if r["result"] != "equal"]
    assert rows["retired_pages.pending"]["ours"] == "N/A" and rows["pcie.width.max"]["smi"] == 16
    assert rows["nvlink"]["ours"] == "N/A"
    assert rows["pci.gpus"]["result"] == "not compared"          # no host tree: the bus is not read


def test_the_gpus_on_the_bus_are_compared_with_those_nvidia_smi_lists(tmp_path):
    rows = _rows(tmp_path, root=str(tmp_path / "root"))
    assert rows["pci.gpus"] == {"gpu": "node", "field": "pci.gpus", "ours": ["0000:07:00.0"], "smi": ["0000:07:00.0"],
                                "result": "equal"}
    # the GPU off NVML's list (nvidia-smi lists none): the bus still shows it, the row differs
    sim = SimulatedBackend(str(tmp_path / "s.json"), root=str(tmp_path / "root"))
    sim.inject_health(0, "missing")
    (row,) = script.compare(sim.read_health(), '<?xml version="1.0" ?><nvidia_smi_log></nvidia_smi_log>', "",
                            NOT_SUPPORTED)
    assert (row["field"], row["ours"], row["smi"], row["result"]) == ("pci.gpus", ["0000:07:00.0"], [], "differ")


def test_differences_are_found(tmp_path):
    rows = _rows(tmp_path, dram_unc=2, pending="Yes")
    assert rows["ecc.volatile.uncorrected"]["result"] == "differ"
    assert rows["remapped_rows.pending"]["result"] == "differ"


def test_nvlink_status_lines_are_read():
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    assert script.nvlink_states(text) == {0: {0: True, 1: False}}
