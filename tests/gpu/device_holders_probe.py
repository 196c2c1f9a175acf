"""Read-only probe of who holds the NVIDIA device files on a real GPU host (tests/gpu/device_holders_run.sh runs it
on the lent GPU machine; readings in docs/readings/device-holders-real-gpu.md). It calls no mutating NVML function
(GPUOPS_NVML_READ_ONLY=1 refuses any) and never resets a GPU: it prints NVML's own IN_USE string, every holder of
/dev/nvidia* and /dev/nvidia-caps/* (the collection's finder), GPU 0's holders as the real backend narrows them, and
the message a refused reset of GPU 0 would carry."""
import json
import os
import sys

import pynvml

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _device_holders as dh
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import IN_USE_TEXT, NvmlInUse
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend


def show(title, found):
    print("--", title)
    print(json.dumps(found, indent=1, sort_keys=True))
    print("describe:", dh.describe(found))


def main():
    assert os.environ.get("GPUOPS_NVML_READ_ONLY") == "1", "run with GPUOPS_NVML_READ_ONLY=1"
    label = sys.argv[1] if len(sys.argv) > 1 else "now"
    print("probe", label, "pid", os.getpid(), "uid", os.getuid())
    show("every holder before this process starts NVML", dh.find_holders())
    backend = NvmlBackend()
    try:
        text = pynvml.nvmlErrorString(pynvml.NVML_ERROR_IN_USE)
        text = text.decode() if isinstance(text, bytes) else text
        print("nvmlErrorString(NVML_ERROR_IN_USE) = %r; collection's IN_USE_TEXT = %r; equal: %s"
              % (text, IN_USE_TEXT, text == IN_USE_TEXT))
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        print("GPU 0 minor number:", pynvml.nvmlDeviceGetMinorNumber(handle))
        after = dh.find_holders()
        own = [h for h in after["holders"] if h["pid"] == os.getpid()]
        print("this process holds after nvmlInit:", json.dumps(own))
        show("every holder after nvmlInit", after)
        show("GPU 0's holders (NvmlBackend.device_holders)", backend.device_holders(0))
        print("-- message of a refused reset of GPU 0 (built, no reset made):")
        print(backend.in_use_message(0, NvmlInUse("GPU 0 reset refused: GPU 00000000:xx:00.0: " + IN_USE_TEXT)))
    finally:
        backend.close()


if __name__ == "__main__":
    main()
