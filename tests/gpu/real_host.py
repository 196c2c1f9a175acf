"""What the real-GPU tests of tests/gpu share: whether this host can run them, and nvidia-smi's view of the GPU
settings that no test may change (compared before and after)."""
import os
import shutil
import subprocess


def why_skip(tool, env_var):
    """None when ``tool`` (the path ``env_var`` names) is executable, nvidia-smi is on PATH and pynvml sees a GPU;
    else why the tests cannot run here."""
    if not (tool and os.path.isfile(tool) and os.access(tool, os.X_OK)):
        return "%s does not name an executable (%r)" % (env_var, tool)
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not on PATH"
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # pylint: disable=broad-except  # no pynvml, no driver, no GPU: all mean skip
        return "no NVIDIA GPU through pynvml: %s" % exc
    return None if count else "NVML sees no GPU"


def gpu_settings(fields):
    """nvidia-smi's ``fields`` (e.g. compute_mode, mig.mode.current), one dict per GPU."""
    proc = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [dict(zip(fields, [c.strip() for c in line.split(",")])) for line in proc.stdout.strip().splitlines()]
