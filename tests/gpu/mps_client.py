"""MPS client probe for tests/gpu/test_mps_real.py (needs PyTorch and a CUDA GPU).

Prints one JSON line: what device 0 looks like from inside this process (SM count, total and free memory) and
whether allocations of the sizes given (GiB) succeed. Whether MPS applies, and which limits, depends only on
the environment it is started with (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT). It changes nothing on the GPU beyond its own allocations.

usage: python mps_client.py 2 6 12
"""
import json
import sys

GIB = 1 << 30


def main(sizes):
    import torch

    out = {"cuda": torch.cuda.is_available()}
    if not out["cuda"]:
        print(json.dumps(out))
        return 1
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    out.update(name=props.name, sms=props.multi_processor_count, total_gib=round(props.total_memory / GIB, 2),
               free_gib=round(free / GIB, 2), allocations={})
    for size in sizes:
        try:
            x = torch.empty(int(size * GIB), dtype=torch.uint8, device="cuda:0")
            x.fill_(1)
            torch.cuda.synchronize()
            del x
            out["allocations"][str(size)] = "ok"
        except (RuntimeError, MemoryError) as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
            text = str(e)
            out["allocations"][str(size)] = "OOM" if "out of memory" in text.lower() else "error: %s" % text[:200]
        torch.cuda.empty_cache()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main([float(a) for a in sys.argv[1:]] or [2, 6, 12]))
