"""Corpus of opaque GpuConfig documents to put to NVIDIA's own types (gpuconfig_check.go).

Prints a JSON list of cases ``{"name", "expect", "devices", "document"}``:

* ``good``: exactly the shapes gpuops.nvidia's DRA provider will generate;
  the driver must accept them.
* ``bad``: mistakes a user or a bug could make; the driver must refuse them.
* ``edge``: shapes the collection does not generate but whose verdict we want on record.

``devices`` is how many GPUs the claim holds: MPS per-device memory limits are only
checked against the allocated devices (MpsPerDevicePinnedMemoryLimit.Normalize).

Only the standard library: tests/unit/test_dra_facts_fixture.py runs this script and
compares its output with the inputs recorded in tests/fixtures/dra/gpuconfig-verdicts-v25.8.1.json.
"""
import json
import sys

API_VERSION = "resource.nvidia.com/v1beta1"
KIND = "GpuConfig"
MIB = 1024 * 1024

# Memory in bytes as NVML reports it (nvidia-smi memory.total in MiB * 1 MiB).
GPU_MEMORY = {
    "h200": 150754820096,
    "a100-80gb": 85899345920,
}
MPS_SPLITS = (2, 3, 4, 7, 8)
FAKE_UUID = "GPU-00000000-0000-0000-0000-000000000000"  # the first fake UUID in gpuconfig_check.go


def gpu_config(sharing=None, **extra):
    doc = {"apiVersion": API_VERSION, "kind": KIND}
    if sharing is not None:
        doc["sharing"] = sharing
    doc.update(extra)
    return doc


def mps(**config):
    return {"strategy": "MPS", "mpsConfig": config}


def case(name, expect, document, devices=1):
    return {"name": name, "expect": expect, "devices": devices, "document": document}


def good_cases():
    cases = [case("exclusive", "good", gpu_config())]
    for interval in ("Default", "Short", "Medium", "Long"):
        cases.append(case(
            "timeslicing-%s" % interval.lower(), "good",
            gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}})))
    for gpu, memory in GPU_MEMORY.items():
        for n in MPS_SPLITS:
            cases.append(case(
                "mps-%s-split-%d" % (gpu, n), "good",
                gpu_config(mps(defaultActiveThreadPercentage=100 // n,
                               defaultPinnedDeviceMemoryLimit="%dMi" % ((memory // n) // MIB)))))
    cases.append(case("mps-threads-only", "good", gpu_config(mps(defaultActiveThreadPercentage=50))))
    cases.append(case("mps-per-device-index", "good",
                      gpu_config(mps(defaultPerDevicePinnedMemoryLimit={"0": "10Gi", "1": "20Gi"})),
                      devices=2))
    cases.append(case("mps-per-device-uuid", "good",
                      gpu_config(mps(defaultPerDevicePinnedMemoryLimit={FAKE_UUID: "10Gi"}))))
    return cases


def edge_cases():
    return [
        case("mps-threads-0", "edge", gpu_config(mps(defaultActiveThreadPercentage=0))),
        case("mps-threads-100", "edge", gpu_config(mps(defaultActiveThreadPercentage=100))),
        case("mps-no-mpsconfig", "edge", gpu_config({"strategy": "MPS"})),
        case("mps-empty-mpsconfig", "edge", gpu_config(mps())),
        case("timeslicing-no-config", "edge", gpu_config({"strategy": "TimeSlicing"})),
        case("timeslicing-empty-config", "edge",
             gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {}})),
        case("sharing-empty", "edge", gpu_config({})),
        case("mps-per-device-index-1-of-1", "edge",
             gpu_config(mps(defaultPerDevicePinnedMemoryLimit={"0": "10Gi", "1": "20Gi"}))),
    ]


def bad_cases():
    return [
        case("unknown-field-top", "bad", gpu_config(foo="bar")),
        case("unknown-field-sharing", "bad",
             gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}, "foo": 1})),
        case("unknown-field-mpsconfig", "bad", gpu_config(mps(defaultActiveThreadPercentage=50, foo=1))),
        case("strategy-lowercase-mps", "bad",
             gpu_config({"strategy": "mps", "mpsConfig": {"defaultActiveThreadPercentage": 50}})),
        case("timeslicing-with-mpsconfig", "bad",
             gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"},
                         "mpsConfig": {"defaultActiveThreadPercentage": 50}})),
        case("interval-verylong", "bad",
             gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "VeryLong"}})),
        case("mps-threads-negative", "bad", gpu_config(mps(defaultActiveThreadPercentage=-1))),
        case("mps-threads-101", "bad", gpu_config(mps(defaultActiveThreadPercentage=101))),
        case("mps-threads-string", "bad", gpu_config(mps(defaultActiveThreadPercentage="50"))),
        case("mps-pinned-1ki", "bad", gpu_config(mps(defaultPinnedDeviceMemoryLimit="1Ki"))),
        case("mps-pinned-ten", "bad", gpu_config(mps(defaultPinnedDeviceMemoryLimit="ten"))),
        case("mps-pinned-negative", "bad", gpu_config(mps(defaultPinnedDeviceMemoryLimit="-1Gi"))),
        case("mps-per-device-key-gpu0", "bad",
             gpu_config(mps(defaultPerDevicePinnedMemoryLimit={"gpu0": "10Gi"})), devices=2),
        case("mps-per-device-index-5", "bad",
             gpu_config(mps(defaultPerDevicePinnedMemoryLimit={"5": "10Gi"})), devices=2),
        case("kind-gpuconfigs", "bad", {"apiVersion": API_VERSION, "kind": "GpuConfigs"}),
        case("apiversion-v1", "bad", {"apiVersion": "resource.nvidia.com/v1", "kind": KIND}),
    ]


def corpus():
    return good_cases() + edge_cases() + bad_cases()


def main():
    json.dump(corpus(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
